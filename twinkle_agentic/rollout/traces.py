"""Per-trajectory JSON trace files (SPEC 17.4), shared by both rollouts.

File name ``{step}-{ok|fail}-{id}.json``: ``step000042`` from ``global_step`` (omitted with its dash
when there is none), ``ok``/``fail`` from ``success_callback`` (default ``fail``), the id from
user_data ``id``/``prompt_id`` or the top-level ``id`` (else ``{epoch_ms}-{index}``), sanitised and
capped at 64 characters. Repeated ids (e.g. one prompt sampled for a GRPO group) get ``-1``, ``-2``...
instead of overwriting each other.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from twinkle_agentic.data_format import user_data_get
from twinkle_agentic.traces import TraceWriter

logger = logging.getLogger(__name__)

HEAVY_KEYS = frozenset(
    {
        "input_ids",
        "labels",
        "attention_mask",
        "position_ids",
        "logprobs",
        "pixel_values",
        "image_grid_thw",
        "mm_token_type_ids",
    }
)
ID_KEYS = ("id", "prompt_id")
ID_MAX_CHARS = 64
UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")

TrajectoryPredicate = Callable[[Mapping[str, Any]], Any]


def _first_id(trajectory: Mapping[str, Any]) -> str | None:
    user_data = trajectory.get("user_data")
    candidates = [user_data_get(user_data, key) for key in ID_KEYS] + [trajectory.get("id")]
    for value in candidates:
        if value is not None and str(value).strip():
            return str(value)
    return None


def trace_id(trajectory: Mapping[str, Any], index: int, epoch_ms: int) -> str:
    raw = _first_id(trajectory) or f"{epoch_ms}-{index}"
    return UNSAFE_ID_CHARS.sub("_", raw)[:ID_MAX_CHARS]


def trace_file_name(trajectory: Mapping[str, Any], index: int, success: bool, global_step: int | None, epoch_ms: int) -> str:
    parts = [] if global_step is None else [f"step{int(global_step):06d}"]
    parts += ["ok" if success else "fail", trace_id(trajectory, index, epoch_ms)]
    return "-".join(parts) + ".json"


def trace_record(trajectory: Mapping[str, Any], success: bool) -> dict[str, Any]:
    record = {k: v for k, v in trajectory.items() if k not in HEAVY_KEYS}
    ground_truth = trajectory.get("ground_truth")
    if ground_truth is None:
        ground_truth = user_data_get(trajectory.get("user_data"), "ground_truth")
    record.update(
        ground_truth=ground_truth,
        stop_reason=trajectory.get("stop_reason"),
        truncated=trajectory.get("truncated"),
        success=success,
        turns=trajectory.get("turns"),
        error=trajectory.get("error"),
    )
    return record


def _ask(callback: TrajectoryPredicate | None, trajectory: Mapping[str, Any], default: bool, what: str) -> bool:
    if callback is None:
        return default
    try:
        return bool(callback(trajectory))
    except Exception as exc:  # a broken callback must not lose the batch
        logger.debug("%s raised %s: %s; treated as False", what, type(exc).__name__, exc)
        return False


class TrajectoryTraces:
    """Writes one JSON file per finished trajectory into ``trace_dir`` (created at construction)."""

    def __init__(
        self,
        trace_dir: str | os.PathLike[str],
        trace_callback: TrajectoryPredicate | None = None,
        success_callback: TrajectoryPredicate | None = None,
    ):
        self.writer = TraceWriter(trace_dir, indent=2)
        self.trace_dir = self.writer.trace_dir
        self.trace_callback = trace_callback
        self.success_callback = success_callback

    @classmethod
    def maybe(
        cls,
        trace_dir: str | os.PathLike[str] | None,
        trace_callback: TrajectoryPredicate | None = None,
        success_callback: TrajectoryPredicate | None = None,
    ) -> TrajectoryTraces | None:
        return None if trace_dir is None else cls(trace_dir, trace_callback, success_callback)

    def write(self, trajectories: Sequence[Mapping[str, Any]], global_step: int | None = None) -> list[Path]:
        """Write the selected trajectories; returns the paths written. Never raises."""
        epoch_ms = int(time.time() * 1000)
        written: list[Path] = []
        for index, trajectory in enumerate(trajectories):
            if not _ask(self.trace_callback, trajectory, True, "trace_callback"):
                continue
            success = _ask(self.success_callback, trajectory, False, "success_callback")
            try:
                name = trace_file_name(trajectory, index, success, global_step, epoch_ms)
                written.append(self.writer.write(trace_record(trajectory, success), _numbered(name)))
            except Exception as exc:  # tracing is best effort; the rollout result matters more
                logger.debug("trace for trajectory %d not written: %s: %s", index, type(exc).__name__, exc)
        return written


def _numbered(name: str) -> Callable[[int], str]:
    """``name``, then ``<stem>-1.json``, ``<stem>-2.json``...: repeated ids never overwrite each other."""
    stem = name[: -len(".json")]
    return lambda n: name if n == 0 else f"{stem}-{n}.json"
