"""Seeded heavy-tailed latency for tools: benchmarks of agentic loops need tools that are slow, and
slow unevenly, the way real services are.

A latency model is written ``lognormal:median=0.3,sigma=1.0`` (seconds; p99 / median =
exp(2.326 sigma)), ``pareto:scale=0.1,alpha=1.5`` (the smallest delay and the tail index) or
``fixed:seconds=0.2``; every model takes an optional ``max=`` cap in seconds (default 30). ``none``
is no delay. A call's delay is a function of the seed, the tool's name and its arguments only (a
hash turned into a quantile), so the same call waits the same time in every run and every process,
whatever order the calls arrive in: two runs with the same seed can be compared call for call.

``latent_demo_tools(latency=..., seed=...)`` is the demo tools with such a delay before each
answer; as a tool server's ``{"import_path": ..., "kwargs": ...}`` spec the delay happens on the
Serve replica. The delay is a sleep on the call's thread: wall time, no CPU.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from twinkle_agentic.data_format import ToolInfo
from twinkle_agentic.errors import ConfigError
from twinkle_agentic.tools.base import Tool

DEFAULT_MAX_S = 30.0
PARAMETERS = {"lognormal": ("median", "sigma"), "pareto": ("scale", "alpha"), "fixed": ("seconds",)}
EXAMPLES = "lognormal:median=0.3,sigma=1.0, pareto:scale=0.1,alpha=1.5, fixed:seconds=0.2 or none"


class LatencyError(ConfigError):
    """A latency spec that cannot be read; the message names the part and shows valid specs."""


@dataclass(frozen=True)
class ToolLatency:
    """A delay distribution (module docstring); ``kind`` None is no delay."""

    kind: str | None = None
    params: tuple[tuple[str, float], ...] = ()
    max_s: float = DEFAULT_MAX_S

    @classmethod
    def parse(cls, spec: str | None) -> ToolLatency:
        """``ToolLatency`` from its text form; ``LatencyError`` names what is wrong."""
        if spec is None or str(spec).strip().lower() in ("", "none", "0"):
            return cls()
        kind, _, rest = str(spec).strip().partition(":")
        kind = kind.strip().lower()
        if kind not in PARAMETERS:
            raise LatencyError(f"unknown latency kind {kind!r} in {spec!r}; write one of: {EXAMPLES}")
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq or key not in (*PARAMETERS[kind], "max"):
                raise LatencyError(
                    f"latency {spec!r}: {part!r} is not one of {[*PARAMETERS[kind], 'max']} written key=value"
                )
            try:
                values[key] = float(value)
            except ValueError:
                raise LatencyError(f"latency {spec!r}: {key}={value!r} is not a number") from None
            if not math.isfinite(values[key]) or values[key] < 0 or (key != "seconds" and values[key] == 0):
                raise LatencyError(f"latency {spec!r}: {key} must be a finite number > 0")
        missing = [key for key in PARAMETERS[kind] if key not in values]
        if missing:
            raise LatencyError(f"latency {spec!r} needs {missing}; for example: {EXAMPLES}")
        max_s = values.pop("max", DEFAULT_MAX_S)
        return cls(kind, tuple((key, values[key]) for key in PARAMETERS[kind]), max_s)

    def quantile(self, u: float) -> float:
        """The delay at quantile ``u`` in (0, 1), capped at ``max_s``."""
        p = dict(self.params)
        if self.kind is None:
            return 0.0
        if self.kind == "fixed":
            delay = p["seconds"]
        elif self.kind == "lognormal":
            delay = p["median"] * math.exp(p["sigma"] * statistics.NormalDist().inv_cdf(u))
        else:  # pareto: P(X > x) = (scale / x) ** alpha
            delay = p["scale"] * (1.0 - u) ** (-1.0 / p["alpha"])
        return min(delay, self.max_s)

    def delay(self, seed: int, name: str, arguments: Any) -> float:
        """The delay of one call: a quantile fixed by the seed, the tool's name and its arguments."""
        if self.kind is None:
            return 0.0
        key = json.dumps([seed, name, arguments], sort_keys=True, default=str).encode()
        digest = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
        return self.quantile((digest + 0.5) / 2**64)

    def __str__(self) -> str:
        if self.kind is None:
            return "none"
        return f"{self.kind}:" + ",".join(f"{k}={v:g}" for k, v in (*self.params, ("max", self.max_s)))


class LatentTool(Tool):
    """``tool`` that first sleeps its call's delay (``ToolLatency.delay``)."""

    def __init__(self, tool: Tool, latency: ToolLatency, seed: int = 0):
        self.tool = tool
        self.latency = latency
        self.seed = seed
        self.timeout_s = tool.timeout_s

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        time.sleep(self.latency.delay(self.seed, tool_name, arguments))
        return self.tool(tool_name, arguments)

    def tool_info(self) -> ToolInfo:
        return self.tool.tool_info()


def latent_demo_tools(latency: str | None = None, seed: int = 0) -> list[Tool]:
    """The demo tools (``demo_tools``), each call delayed by ``latency`` (a spec string) under ``seed``."""
    from .tools import demo_tools

    model = ToolLatency.parse(latency)
    return [LatentTool(tool, model, seed) for tool in demo_tools()]


def trajectory_delays(messages: list[dict[str, Any]], latency: ToolLatency, seed: int = 0) -> list[float]:
    """The delays the tool calls of a trajectory's ``messages`` were given (``LatentTool`` under
    ``latency`` and ``seed``): recomputed from the calls, in order; a call whose arguments do not
    decode never reaches the tool and waits nothing."""
    from twinkle_agentic.tools.tool_manager import parse_arguments

    delays = []
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            arguments, error = parse_arguments(function.get("arguments"))
            delays.append(0.0 if error else latency.delay(seed, str(function.get("name")), arguments))
    return delays
