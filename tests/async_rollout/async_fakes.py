"""An async scripted sampler: ``tests/vllm/scripted.py``'s answers, one request at a time.

Same script format and tokens as ``ScriptedSampler``, but each request can be delayed or made to fail
per trajectory, so tests shape the timeline; cancelled requests are recorded. A class of a module (not
of a test file) so a Ray actor can be built from it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from scripted import ScriptedSampler

from twinkle_agentic.data_format import SampleResponse


@dataclass
class AsyncScriptedSampler:
    """``await generate(prompt_ids, params)`` over a ``ScriptedSampler``; ``delays[key]`` seconds per request
    of the trajectory whose prompt holds ``key``; ``fail[key]`` raises that many times for that key."""

    scripted: ScriptedSampler
    delays: dict[str, float] = field(default_factory=dict)
    fail: dict[str, int] = field(default_factory=dict)
    error: type[BaseException] = RuntimeError
    requests: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    async def generate(self, prompt_ids: list[int], params: Any) -> SampleResponse:
        key = self.scripted._key(self.scripted.template.decode(prompt_ids, skip_special_tokens=False))
        self.requests.append(key)
        try:
            await asyncio.sleep(self.delays.get(key, 0.0))
        except asyncio.CancelledError:
            self.cancelled.append(key)
            raise
        if self.fail.get(key, 0) > 0:
            self.fail[key] -= 1
            raise self.error(f"injected sampler failure for {key!r}")
        seq = self.scripted.reply(list(prompt_ids), params)
        return SampleResponse(sequences=[seq], prompt_token_ids=list(prompt_ids))
