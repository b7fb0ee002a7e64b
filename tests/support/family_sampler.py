"""A scripted sampler that speaks a real model family's wire format, sync (``sample``) and async
(``generate``), for rollout tests without an engine.

Each trajectory is recognised by a key in its prompt; its n-th request gets ``script[key][n]``: the
completion text exactly as the model would emit it (``<think>`` blocks, the family's tool-call
markup, its stop token), tokenized with the family's real vocabulary. ``max_tokens`` cuts a longer
reply and reports ``length``, as an engine does. Every request is recorded so a test can rebuild
the stream independently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.data_format import SampledSequence, SampleResponse
from twinkle_agentic.sampler.base import params_per_input


@dataclass
class FamilySampler:
    template: Any
    script: dict[str, list[str]]
    requests: list[tuple[str, list[int], list[int], str, Any]] = field(default_factory=list)

    def _key(self, prompt_ids: list[int]) -> str:
        text = self.template.decode(prompt_ids, skip_special_tokens=False)
        found = [key for key in self.script if key in text]
        if len(found) != 1:
            raise AssertionError(f"prompt matches script keys {found}: {text[-200:]!r}")
        return found[0]

    def reply(self, prompt_ids: list[int], params: Any) -> SampledSequence:
        key = self._key(prompt_ids)
        turn = sum(1 for request in self.requests if request[0] == key)
        tokens = self.template.encode_text(self.script[key][turn])
        stops = set(params.stop_token_ids)
        cut = next((k + 1 for k, t in enumerate(tokens) if t in stops), len(tokens))
        reason = "stop"
        tokens = tokens[:cut]
        if params.max_tokens is not None and len(tokens) > params.max_tokens:
            tokens, reason = tokens[: params.max_tokens], "length"
        self.requests.append((key, list(prompt_ids), tokens, reason, params))
        logprobs = [-0.01 * (k + 1) for k in range(len(tokens))]
        return SampledSequence(tokens=tokens, logprobs=logprobs, stop_reason=reason, decoded=None)

    def sample(self, inputs: list[dict[str, Any]], sampling_params: Any = None) -> list[SampleResponse]:
        params = params_per_input(sampling_params, len(inputs))
        return [
            SampleResponse(sequences=[self.reply(list(item["input_ids"]), p)], prompt_token_ids=list(item["input_ids"]))
            for item, p in zip(inputs, params, strict=True)
        ]

    async def generate(self, prompt_ids: list[int], params: Any) -> SampleResponse:
        seq = self.reply(list(prompt_ids), params)
        return SampleResponse(sequences=[seq], prompt_token_ids=list(prompt_ids))
