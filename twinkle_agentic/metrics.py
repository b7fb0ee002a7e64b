"""The project's metrics, exported through ``ray.util.metrics`` to each node's Ray metrics endpoint.

Every metric is declared once in :data:`METRICS` (name, type, tag keys); ``docs/metrics.md`` lists them
with where each is recorded. Recording is a no-op in a process where Ray is not initialised (unit tests,
the one-process preprocessor), so the library imports and runs without a cluster; Ray's metric objects
are made on first use in each process (the driver, a Ray Data task worker). Names and tags are checked
on every call, with or without Ray, so a wrong call fails in unit tests too.

Ray's exporter adds the prefix ``ray_`` to each name and the tags ``SessionName``, ``NodeAddress``,
``WorkerId`` (one series per recording process) and ``Component``.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

# Bucket bounds (seconds): tool calls from milliseconds (an in-process tool) to a minute (a sandbox);
# weight updates from tens of milliseconds (a tiny model in memory) to minutes (a 70B checkpoint).
TOOL_LATENCY_BOUNDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
UPDATE_LATENCY_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str
    description: str
    tags: tuple[str, ...] = ()
    bounds: tuple[float, ...] = ()


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        # -- preprocess job (recorded in the Ray Data tasks and actors that run the steps) -------------
        Metric("twinkle_preprocess_rows_read_total", COUNTER, "Input records read (rows and unreadable lines)."),
        Metric(
            "twinkle_preprocess_rows_kept_total", COUNTER, "Rows a pipeline step passed on.", ("step",)
        ),
        Metric(
            "twinkle_preprocess_rows_dropped_total",
            COUNTER,
            "Rows a pipeline step dropped, by the reason it gave.",
            ("step", "reason"),
        ),
        # -- rollout farm (recorded by the driver, RolloutFarm) ----------------------------------------
        Metric("twinkle_rollout_trajectories_started_total", COUNTER, "Trajectories sent to a worker the first time."),
        Metric(
            "twinkle_rollout_trajectories_finished_total",
            COUNTER,
            "Trajectories that came back, by stop_reason (error ones included).",
            ("stop_reason",),
        ),
        Metric(
            "twinkle_rollout_trajectories_failed_total",
            COUNTER,
            "Trajectories that came back with stop_reason=error: ended by the worker, or given up by the farm.",
            ("source",),
        ),
        Metric("twinkle_rollout_generated_tokens_total", COUNTER, "Tokens the policy generated (trainable labels)."),
        Metric(
            "twinkle_rollout_tool_latency_seconds",
            HISTOGRAM,
            "Latency of one tool call or environment step, by tool and whether it answered an error.",
            ("tool", "ok"),
            TOOL_LATENCY_BOUNDS,
        ),
        Metric(
            "twinkle_rollout_worker_seconds_total",
            COUNTER,
            "Workers' active time: engine_busy (a generation request in flight), tool_wait (the engine idle "
            "while a tool call is outstanding), other (engine idle otherwise).",
            ("state",),
        ),
        Metric("twinkle_rollout_worker_restarts_total", COUNTER, "Rollout workers replaced after they died or failed."),
        Metric(
            "twinkle_rollout_weight_update_seconds",
            HISTOGRAM,
            "Wall time of one RolloutFarm.update_weights, by path (payload or transfer group).",
            ("path",),
            UPDATE_LATENCY_BOUNDS,
        ),
        Metric("twinkle_rollout_policy_version", GAUGE, "Policy version the farm's latest weights carry."),
    )
}

_made: dict[str, Any] = {}
_lock = threading.Lock()


def ray_running() -> bool:
    """Whether this process is connected to Ray (never imports Ray: a process that has not imported it
    is not connected)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _check(name: str, tags: Mapping[str, str]) -> Metric:
    metric = METRICS.get(name)
    if metric is None:
        raise KeyError(f"unknown metric {name!r}; declare it in twinkle_agentic.metrics.METRICS")
    if set(tags) != set(metric.tags):
        raise ValueError(f"metric {name} takes tags {sorted(metric.tags)}, got {sorted(tags)}")
    return metric


def _ray_metric(metric: Metric) -> Any:
    made = _made.get(metric.name)
    if made is not None:
        return made
    from ray.util import metrics

    with _lock:
        if metric.name not in _made:
            if metric.kind == COUNTER:
                _made[metric.name] = metrics.Counter(metric.name, metric.description, metric.tags)
            elif metric.kind == GAUGE:
                _made[metric.name] = metrics.Gauge(metric.name, metric.description, metric.tags)
            else:
                _made[metric.name] = metrics.Histogram(
                    metric.name, metric.description, list(metric.bounds), metric.tags
                )
        return _made[metric.name]


def record(name: str, value: float, **tags: str) -> None:
    """Add ``value`` to a counter (zero adds nothing), set a gauge, or observe a histogram value."""
    metric = _check(name, tags)
    if not ray_running() or (metric.kind == COUNTER and value == 0):
        return
    target = _ray_metric(metric)
    tags = {k: str(v) for k, v in tags.items()}
    if metric.kind == COUNTER:
        target.inc(value, tags=tags)
    elif metric.kind == GAUGE:
        target.set(value, tags=tags)
    else:
        target.observe(value, tags=tags)


# -- what each job records ----------------------------------------------------------------------------


def record_step(step: str, kept: int, dropped: Mapping[str, int], *, read: int = 0) -> None:
    """One preprocess step's result on one batch: rows kept, drops by reason; ``read`` for the read step."""
    if not ray_running():
        return
    record("twinkle_preprocess_rows_read_total", read)
    record("twinkle_preprocess_rows_kept_total", kept, step=step)
    for reason, n in dropped.items():
        record("twinkle_preprocess_rows_dropped_total", n, step=step, reason=reason)


def record_started(trajectories: int) -> None:
    record("twinkle_rollout_trajectories_started_total", trajectories)


def record_batch(trajectories: Iterable[Mapping[str, Any]], activity: Any, generated_tokens: int, *, source: str) -> None:
    """A batch back at the driver: its trajectories by stop_reason, failures (``source``: ``worker`` or
    ``farm``), tokens, tool latencies and the worker's time (an ``actors.activity.Activity``)."""
    if not ray_running():
        return
    reasons = Tally(str(t.get("stop_reason")) for t in trajectories)
    for reason, n in reasons.items():
        record("twinkle_rollout_trajectories_finished_total", n, stop_reason=reason)
    record("twinkle_rollout_trajectories_failed_total", reasons.get("error", 0), source=source)
    record("twinkle_rollout_generated_tokens_total", generated_tokens)
    for call in activity.tool_calls:
        record("twinkle_rollout_tool_latency_seconds", call.latency_s, tool=call.tool, ok=str(call.ok).lower())
    record("twinkle_rollout_worker_seconds_total", activity.engine_busy_s, state="engine_busy")
    record("twinkle_rollout_worker_seconds_total", activity.tool_wait_s, state="tool_wait")
    record("twinkle_rollout_worker_seconds_total", activity.other_s, state="other")


def record_restart() -> None:
    record("twinkle_rollout_worker_restarts_total", 1)


def record_update(wall_s: float, version: int, *, path: str) -> None:
    """A finished weight update: its wall time (``path``: ``payload`` or ``transfer``) and the new version."""
    record("twinkle_rollout_weight_update_seconds", wall_s, path=path)
    record("twinkle_rollout_policy_version", version)
