"""``VLLMSampler``: an offline vLLM engine (``vllm.LLM``) behind the sampler contract.

One ``sample`` call is one batched ``LLM.generate`` over token-id prompts, so the engine's
continuous batching sees the whole turn at once. ``@remote_class`` makes it a Ray actor holding the
engine: ``VLLMSampler.options(num_gpus=1).remote(model)``; a rollout then calls
``ray.get(sampler.sample.remote(...))``.
"""

from __future__ import annotations

import threading
from typing import Any

from twinkle_agentic.data_format import InputFeature, SampleResponse
from twinkle_agentic.remote import remote_class

from .base import DeviceMesh, ParamsArg, check_responses, to_sample_response
from .engine import VLLMEngineConfig, fit_to_context
from .weights import (
    FINISH_UPDATE,
    START_UPDATE,
    ServedWeights,
    Stopwatch,
    UpdateTimings,
    WeightUpdate,
    with_loader_extension,
)


@remote_class()
class VLLMSampler(ServedWeights):
    """Samples token-id prompts with a ``vllm.LLM`` built from ``VLLMEngineConfig(model, **config)``.

    ``sampling_overrides`` are ``vllm.SamplingParams`` fields applied to every request on top of the
    mapped ``SamplingParams`` (e.g. ``{"ignore_eos": True}`` for fixed-length benchmarks).
    """

    device_mesh: DeviceMesh | None = None  # one engine: no data-parallel shards to pad for

    def __init__(self, model: str, *, sampling_overrides: dict[str, Any] | None = None, **config: Any):
        from vllm import LLM

        self.config = VLLMEngineConfig(model=str(model), **config)
        self.sampling_overrides = dict(sampling_overrides or {})
        self.engine = LLM(**with_loader_extension(self.config.to_engine_kwargs()))
        self.max_model_len = int(self.engine.llm_engine.model_config.max_model_len)
        self._update_lock = threading.Lock()
        self._engine_lock = threading.Lock()  # the offline engine serves one caller at a time

    def sample(self, inputs: list[InputFeature], sampling_params: ParamsArg = None) -> list[SampleResponse]:
        prompts, params, answered = fit_to_context(inputs, sampling_params, self.max_model_len)
        todo = [i for i in range(len(prompts)) if i not in answered]
        with self._engine_lock:
            version = self._policy_version
            outputs = (
                self.engine.generate(
                    [{"prompt_token_ids": prompts[i]} for i in todo],
                    [params[i].to_vllm(**self.sampling_overrides) for i in todo],
                    use_tqdm=False,
                )
                if todo
                else []
            )
        responses = dict(answered)
        responses.update({i: to_sample_response(out, version) for i, out in zip(todo, outputs, strict=True)})
        return check_responses([responses[i] for i in range(len(prompts))], len(prompts))

    def _load(self, update: WeightUpdate, version: int, on_update: str) -> UpdateTimings:
        """The update waits for a ``sample`` call in progress (in either ``on_update`` mode: the offline
        engine runs a call to the end), and the next call runs on the new weights."""
        watch = Stopwatch()
        with self._engine_lock:
            drain_s = watch.lap()
            self.engine.collective_rpc(START_UPDATE)
            try:
                for method, args in update.loads:
                    self.engine.collective_rpc(method, args=args)
            finally:
                self.engine.collective_rpc(FINISH_UPDATE)
            load_s = watch.lap()
            if not self.engine.reset_prefix_cache():
                raise RuntimeError("vLLM refused to reset the prefix cache after a weight update (requests running)")
            self._policy_version = version
            reset_s = watch.lap()
        return UpdateTimings(drain_s, load_s, reset_s, load_s + reset_s, update.rpc_calls)

    def _engine_rpc(self, method: str, kwargs: dict[str, Any]) -> Any:
        with self._engine_lock:
            return self.engine.collective_rpc(method, kwargs=kwargs)

    def get_tokenizer(self) -> Any:
        return self.engine.get_tokenizer()

    def shutdown(self) -> None:
        """Stop the engine's worker processes (also happens when the object is collected)."""
        engine = getattr(self.engine, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


vLLMSampler = VLLMSampler  # the seeds' spelling
