"""``SamplerBackend``: scorer backend on the project's vLLM sampler (a local object or a Ray actor handle).

Prompt logprobs come from ``sampler.sample(features, SamplingParams(max_tokens=1, prompt_logprobs=1))``.
Batches are padded to a multiple of the data-parallel size by repeating the last item and trimmed
afterwards, so a batch of one works on an engine with DP=8.

Built from a config (``SamplerBackend.from_config(model=...)``, or ``backend={'type': 'sampler',
'model': ...}`` in ``ScoreFilter``), the engine and template are created on first use (or by
``warmup()``) in the process that uses them, so the backend pickles as its config and an actor pool
builds one engine per actor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ....data_format import InputFeature, SamplingParams
from .base import (
    BackendError,
    ScoreBackend,
    TokenLogprobs,
    chunks,
    isolate_failures,
    pad_batch,
    read_or_none,
)

PROMPT_LOGPROBS_PARAMS = {"max_tokens": 1, "prompt_logprobs": 1, "temperature": 0.0}
#: vLLM request options of engines the backend builds itself (see ``SamplerBackend.from_config``).
DEFAULT_SAMPLING_OVERRIDES = {"detokenize": False}


def feature(ids: Sequence[int]) -> InputFeature:
    return {"input_ids": [int(t) for t in ids]}


def data_parallel_size(sampler: Any) -> int:
    """The sampler's data-parallel world size when it exposes one (``device_mesh.data_world_size``)."""
    mesh = getattr(sampler, "device_mesh", None)
    size = getattr(mesh, "data_world_size", None)
    return size if isinstance(size, int) and size > 1 else 1


class SamplerBackend(ScoreBackend):
    """Backend on a sampler with ``sample(List[InputFeature], SamplingParams) -> List[SampleResponse]``.

    ``template`` provides ``encode(traj, add_generation_prompt=True)`` and ``tokenizer``. ``dp_size``
    overrides the padding multiple (read from ``sampler.device_mesh`` otherwise; give it for actor
    handles). ``max_batch_size`` splits large batches into several engine calls.
    """

    def __init__(
        self,
        sampler: Any,
        template: Any,
        *,
        dp_size: int | None = None,
        max_batch_size: int | None = None,
    ) -> None:
        if sampler is not None and not hasattr(sampler, "sample"):
            raise TypeError(
                f"SamplerBackend needs an object with sample(features, params), got {type(sampler).__name__}"
            )
        if sampler is not None and template is None:
            raise ValueError("SamplerBackend(sampler, template) needs the template of the sampler's model")
        self._sampler = sampler
        self._template = template
        self._config: dict[str, Any] | None = None
        self.dp_size = dp_size
        self.max_batch_size = max_batch_size

    @classmethod
    def from_config(
        cls,
        model: str,
        template: Any = None,
        dp_size: int | None = None,
        max_batch_size: int | None = None,
        **engine_kwargs: Any,
    ) -> SamplerBackend:
        """A backend that builds ``VLLMSampler(model, **engine_kwargs)`` and the model's template lazily.

        The engine is the scorer's own, so it skips detokenisation (``detokenize=False`` in
        ``sampling_overrides``): the engine would otherwise decode every prompt-logprob token, which
        nothing here reads, and that is the largest cost of a batch of prompt logprobs on small
        models. Generated texts are decoded by the template instead.
        """
        backend = cls(None, template, dp_size=dp_size, max_batch_size=max_batch_size)
        overrides = {**DEFAULT_SAMPLING_OVERRIDES, **(engine_kwargs.pop("sampling_overrides", None) or {})}
        backend._config = {"model": model, "sampling_overrides": overrides, **engine_kwargs}
        return backend

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self._config is not None:  # rebuilt where it is used; engines do not pickle
            state["_sampler"] = None
        return state

    @property
    def sampler(self) -> Any:
        if self._sampler is None:
            if self._config is None:
                raise BackendError("SamplerBackend has neither a sampler nor a config to build one")
            from ....sampler import VLLMSampler

            self._sampler = VLLMSampler(**self._config)
        return self._sampler

    @property
    def template(self) -> Any:
        if self._template is None or isinstance(self._template, (dict, str)):
            from ....template import Template

            spec = self._template
            if isinstance(spec, dict):
                self._template = Template(**spec)
            else:
                self._template = Template(spec or (self._config or {}).get("model"))
        return self._template

    def warmup(self) -> None:
        _ = self.template
        self._sample([feature(self.encode_text("warm up"))], SamplingParams(**PROMPT_LOGPROBS_PARAMS))

    # -- engine calls -------------------------------------------------------------------------

    def _padding_multiple(self) -> int:
        if self.dp_size is not None:
            return self.dp_size
        return data_parallel_size(self.sampler)

    def _sample(self, features: list[InputFeature], params: SamplingParams) -> list[Any]:
        """One engine call: pad to the data-parallel multiple, sample, trim."""
        padded = pad_batch(features, self._padding_multiple())
        sample = self.sampler.sample
        if hasattr(sample, "remote"):  # a Ray actor handle
            import ray

            responses = ray.get(sample.remote(padded, params))
        else:
            responses = sample(padded, params)
        if len(responses) != len(padded):
            raise BackendError(f"the sampler returned {len(responses)} responses for {len(padded)} prompts")
        return list(responses[: len(features)])

    def _batched(self, call: Any, items: list, what: str) -> list:
        out: list = []
        for chunk in chunks(items, self.max_batch_size):
            out.extend(isolate_failures(call, chunk, what))
        return out

    # -- ScoreBackend -------------------------------------------------------------------------

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        # render + tokenize rather than template.encode: no labels to compute, and no max_length
        # error on a history that fit_prompt is about to shorten.
        text = self.template.render(messages, tools, add_generation_prompt=True)
        return self.encode_text(text)

    def encode_text(self, text: str) -> list[int]:
        return list(self.template.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.template.tokenizer.decode(list(ids), skip_special_tokens=True)

    def prompt_logprobs(self, ids_batch: list[list[int]]) -> list[TokenLogprobs | None]:
        params = SamplingParams(**PROMPT_LOGPROBS_PARAMS)

        def call(batch: list[list[int]]) -> list[TokenLogprobs | None]:
            responses = self._sample([feature(ids) for ids in batch], params)
            return [
                read_or_none(r.prompt_logprobs, ids, "prompt_logprobs")
                for r, ids in zip(responses, batch, strict=True)
            ]

        return self._batched(call, ids_batch, "prompt_logprobs")

    def chat(
        self, batch: list[list[dict]], n: int, temperature: float, max_tokens: int
    ) -> list[list[str] | None]:
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, num_samples=n)

        def call(convs: list[list[dict]]) -> list[list[str]]:
            features = [feature(self.encode_chat(messages)) for messages in convs]
            return [[self._text(seq) for seq in r.sequences] for r in self._sample(features, params)]

        return self._batched(call, batch, "chat")

    def _text(self, sequence: Any) -> str:
        decoded = getattr(sequence, "decoded", None)
        return decoded if isinstance(decoded, str) and decoded else self.decode(sequence.tokens)

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError(
            "SamplerBackend has no embedding model; give ParaphraseScorer an embed_backend "
            "(None uses the bundled all-MiniLM-L6-v2, or an OpenAIBackend with embed_base_url)"
        )

    def __repr__(self) -> str:
        source = self._config if self._config is not None else type(self._sampler).__name__
        return f"SamplerBackend({source!r}, dp_size={self.dp_size}, max_batch_size={self.max_batch_size})"
