"""QualityPreprocessor: run filter and mapper steps in order over one batch, keeping its shape.

The batch comes back in the shape it came in (list, column dict, DataFrame) with exactly the
surviving rows, so HF ``Dataset.map(batched=True)`` and Ray Data ``map_batches`` keep only those;
an all-dropped column dict is ``{k: [] for k in input_keys}``, never ``{}``. Every dropped row goes
to the optional JSONL log with its step and reason; per-step statistics are kept and logged.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .batch import from_rows, shape_of, to_rows
from .dropped_log import REASON_KEY, UNKNOWN_REASON, DroppedLog
from .stats import StepStats

logger = logging.getLogger(__name__)


class StepContractError(TypeError):
    """A step broke the contract: it must return ``(kept, dropped)`` accounting for every input row."""

    def __init__(self, step: str, problem: str) -> None:
        self.step = step
        self.problem = problem
        super().__init__(
            f"step {step!r} {problem}; a step must return a 2-tuple (kept, dropped) whose lengths add up "
            "to the number of rows it was given"
        )


def step_name(step: Any) -> str:
    """``step.name``, else ``__name__``, else the class name."""
    name = getattr(step, "name", None)
    if isinstance(name, str) and name:
        return name
    name = getattr(step, "__name__", None)
    if isinstance(name, str) and name:
        return name
    return type(step).__name__


class QualityPreprocessor:
    """Run ``pipeline`` steps in order; each takes rows and returns ``(kept, dropped)``.

    Args:
        pipeline: callables (filters, mappers or plain functions) run in order.
        dropped_log_path: optional JSONL drop ledger: ``{"step", "reason", "source", "line", "row"}``
            per dropped row, the preprocess job's record; ``source`` and ``line`` are null here
            (the steps are handed rows, not files).
        shard_log: write ``<path>.<pid>`` per process instead (merge with ``merge_log_shards``).
        overwrite_log: truncate the log once, now; otherwise it is only ever appended to.

    ``last_stats`` holds the :class:`StepStats` of the last call (one per step, zeros for steps
    skipped because no row remained); ``total_stats`` sums every call made by this process.
    """

    def __init__(
        self,
        pipeline: Sequence[Callable[..., Any]],
        dropped_log_path: str | os.PathLike | None = None,
        *,
        shard_log: bool = False,
        overwrite_log: bool = False,
    ) -> None:
        if isinstance(pipeline, (str, bytes)) or not isinstance(pipeline, Sequence):
            raise TypeError(f"pipeline must be a list of steps, got {type(pipeline).__name__}")
        for i, step in enumerate(pipeline):
            if not callable(step):
                raise TypeError(
                    f"pipeline[{i}] ({step!r}) is not callable; a step maps rows to (kept, dropped)"
                )
        self.pipeline = list(pipeline)
        self.names = [step_name(s) for s in self.pipeline]
        self.log = (
            DroppedLog(dropped_log_path, shard=shard_log, overwrite=overwrite_log)
            if dropped_log_path is not None
            else None
        )
        self.last_stats: list[StepStats] = []
        self.total_stats: list[StepStats] = [StepStats(n) for n in self.names]

    def run_rows(self, rows: list) -> tuple[list, list[tuple[str, list]]]:
        """Run the steps over a list of rows: ``(kept, [(step, dropped_rows), ...])``."""
        stats: list[StepStats] = []
        dropped_by_step: list[tuple[str, list]] = []
        for step, name in zip(self.pipeline, self.names, strict=True):
            if not rows:
                stats.append(StepStats(name))
                continue
            start = time.perf_counter()
            result = step(rows)
            seconds = time.perf_counter() - start
            if not isinstance(result, tuple) or len(result) != 2:
                raise StepContractError(name, f"returned {type(result).__name__}, not a 2-tuple")
            kept, dropped = (to_rows(part) if part is not None else [] for part in result)
            if len(kept) + len(dropped) != len(rows):
                raise StepContractError(
                    name, f"was given {len(rows)} rows but returned {len(kept)} kept + {len(dropped)} dropped"
                )
            reasons = Counter(
                (r.get(REASON_KEY) if isinstance(r, dict) else None) or UNKNOWN_REASON for r in dropped
            )
            stats.append(StepStats(name, len(rows), len(kept), len(dropped), seconds, reasons))
            if dropped:
                dropped_by_step.append((name, dropped))
            rows = kept
        self.last_stats = stats
        self.total_stats = [t + s for t, s in zip(self.total_stats, stats, strict=True)]
        return rows, dropped_by_step

    def __call__(self, batch: Any) -> Any:
        shape = shape_of(batch)
        rows = to_rows(batch)
        kept, dropped_by_step = self.run_rows(rows)
        if self.log is not None and dropped_by_step:
            self.log.write(dropped_by_step)
        self._log_stats(len(rows), len(kept))
        return from_rows(kept, shape)

    def _log_stats(self, total: int, final: int) -> None:
        if not logger.isEnabledFor(logging.INFO):
            return
        logger.info("[QualityPreprocessor] %d -> %d", total, final)
        for s in self.last_stats:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(s.reasons.items()))
            logger.info(
                "[QualityPreprocessor]   %s: %d -> %d (dropped %d%s) %.3fs",
                s.step,
                s.before,
                s.after,
                s.dropped,
                f": {reasons}" if reasons else "",
                s.seconds,
            )

    def __repr__(self) -> str:
        log = f", dropped_log_path={self.log.path!r}" if self.log else ""
        return f"QualityPreprocessor([{', '.join(self.names)}]{log})"
