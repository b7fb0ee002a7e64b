"""Fakes of the async-rollout tests: an async scripted sampler, and tools that order a timeline.

``AsyncScriptedSampler`` answers like ``tests.support.scripted_sampler.ScriptedSampler`` (same script format and
tokens) one request at a time; each request can be delayed or made to fail per trajectory, and
cancelled requests are recorded. It lives in a module (not a test file) so a Ray actor can be built
from it. ``wait_for_the_others`` builds tool managers under which one trajectory's tool call answers
only after every other trajectory has ended.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.support.scripted_sampler import ScriptedSampler
from twinkle_agentic.data_format import SampleResponse
from twinkle_agentic.demo.tools import WEATHER_TOOL, lookup_weather
from twinkle_agentic.tools.base import Tool
from twinkle_agentic.tools.tool_manager import ToolManager


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


class ClosingManager(ToolManager):
    """Counts closes into ``closed``: the async rollout closes a trajectory's manager when it ends."""

    def __init__(self, tools: list, closed: list, all_closed: threading.Event, expected: int):
        super().__init__(tools)
        self.closed, self.all_closed, self.expected = closed, all_closed, expected

    def close(self) -> None:
        self.closed.append(self)
        if len(self.closed) >= self.expected:
            self.all_closed.set()


class WaitingWeather(Tool):
    """get_weather whose lookups for ``city`` block until ``release`` is set; ``waits`` logs whether
    each was released (True) or gave up after ``limit_s`` (False)."""

    def __init__(self, city: str, release: threading.Event, limit_s: float = 120.0):
        self.city, self.release, self.limit_s = city, release, limit_s
        self.waits: list[bool] = []

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        if arguments.get("city") == self.city:
            self.waits.append(self.release.wait(self.limit_s))
        return lookup_weather(arguments.get("city", ""))

    def tool_info(self) -> dict[str, Any]:
        return WEATHER_TOOL


def wait_for_the_others(
    city: str, trajectories: list[dict], extra_tools: list | None = None
) -> tuple[Any, WaitingWeather]:
    """A tool-manager factory under which ``city``'s weather lookup answers only once every other
    trajectory has ended (its manager closed): the proof that no turn barrier holds them back."""
    release, closed = threading.Event(), []
    weather = WaitingWeather(city, release)
    others = sum(1 for t in trajectories if city not in t["messages"][0]["content"])

    def factory(trajectory: dict) -> ClosingManager:
        mine = city in trajectory["messages"][0]["content"]
        return ClosingManager([weather, *(extra_tools or [])], [] if mine else closed, release, others)

    return factory, weather
