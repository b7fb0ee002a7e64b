"""A scripted sampler for unit tests of the rollout's pure logic (no engine).

Each trajectory is recognised by a key string in its prompt; the reply for its n-th turn is
``script[key][n]``, tokenized with the tiny model's tokenizer and ended with ``<|im_end|>`` (as vLLM
does when the model stops), unless ``end_with_eot`` is False (a stop-string stop). ``max_tokens`` is
honoured like an engine: a longer reply is cut and reported as ``length``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.data_format import SampledSequence, SampleResponse, SamplingParams
from twinkle_agentic.sampler.base import DeviceMesh, params_per_input


@dataclass
class ScriptedSampler:
    template: Any
    script: dict[str, list[str]]
    end_with_eot: bool = True
    with_logprobs: bool = True
    logprob_pairs: bool = False
    stop_reason: str = "stop"
    device_mesh: DeviceMesh | None = None
    calls: list[tuple[int, list[int | None]]] = field(default_factory=list)

    def _key(self, prompt: str) -> str:
        first_user = prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
        found = [k for k in self.script if k in first_user]
        if len(found) != 1:
            raise AssertionError(f"prompt matches script keys {found}: {prompt[-200:]!r}")
        return found[0]

    def reply(self, prompt_ids: list[int], params: SamplingParams) -> SampledSequence:
        prompt = self.template.decode(prompt_ids, skip_special_tokens=False)
        key = self._key(prompt)
        turn = prompt.count("<|im_start|>assistant") - 1
        tokens = self.template.encode_text(self.script[key][turn])
        reason = self.stop_reason
        if reason == "stop" and self.end_with_eot:
            tokens.append(self.template.end_of_turn_id)
        if params.max_tokens is not None and len(tokens) > params.max_tokens:
            tokens, reason = tokens[: params.max_tokens], "length"
        logprobs: list[Any] | None = None
        if self.with_logprobs:
            values = [-0.01 * (k + 1) for k in range(len(tokens))]
            logprobs = [[(t + 1, -9.0), (t, v)] for t, v in zip(tokens, values, strict=True)] if self.logprob_pairs else values
        return SampledSequence(tokens=tokens, logprobs=logprobs, stop_reason=reason, decoded=None)

    def sample(self, inputs: list[dict[str, Any]], sampling_params: Any = None) -> list[SampleResponse]:
        params = params_per_input(sampling_params, len(inputs))
        self.calls.append((len(inputs), [p.max_tokens for p in params]))
        return [
            SampleResponse(sequences=[self.reply(item["input_ids"], p)], prompt_token_ids=item["input_ids"])
            for item, p in zip(inputs, params, strict=True)
        ]


def call_text(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'
