"""The one-process run the job must match: the same steps, by ``QualityPreprocessor`` and ``DedupFilter``.

Rows are read and parsed by the same functions as the job, in input order; each ``DedupFilter``
runs once on all rows that survived the steps before it (as the seeds prescribe), and every run of
other steps between dedups goes through ``QualityPreprocessor.run_rows``. Used by the tests (the
job's output must equal this, as sets, with identical drop reasons) and by the benchmark (one-process
rows/s).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.preprocessor.dropped_log import REASON_KEY, UNKNOWN_REASON
from twinkle_agentic.preprocessor.quality import QualityPreprocessor

from .frame import READ_STEP
from .sources import UNREADABLE_FAIL, expand_inputs, parse_read, read_source
from .steps import is_global, unique_names


@dataclass
class InProcessRun:
    kept: list[dict] = field(default_factory=list)
    # (step, reason, row) for every dropped row; for read drops the row is the raw text or value
    dropped: list[tuple[str, str, Any]] = field(default_factory=list)
    rows_read: int = 0
    seconds: float = 0.0


def read_rows(
    inputs: list[str], input_format: str | None = None, unreadable: str = UNREADABLE_FAIL
) -> tuple[list[dict], list, int]:
    """(rows in input order, read drops as (step, reason, value), records read)."""
    rows: list[dict] = []
    dropped: list[tuple[str, str, Any]] = []
    n = 0
    for source in expand_inputs(inputs, input_format):
        for _, raw, error in read_source(source, unreadable):
            n += 1
            row, reason, value = parse_read(raw, error)
            if row is None:
                dropped.append((READ_STEP, reason, value))
            else:
                rows.append(row)
    return rows, dropped, n


def _reason(row: Any) -> str:
    reason = row.get(REASON_KEY) if isinstance(row, dict) else None
    return reason if isinstance(reason, str) and reason else UNKNOWN_REASON


def _body(row: Any) -> Any:
    return {k: v for k, v in row.items() if k != REASON_KEY} if isinstance(row, dict) else row


def run_steps(rows: list[dict], steps: list[Any]) -> tuple[list[dict], list[tuple[str, str, Any]]]:
    """Run the pipeline over all rows at once; returns (kept, [(step, reason, row), ...])."""
    names = unique_names(steps)
    dropped: list[tuple[str, str, Any]] = []
    segment: list[int] = []

    def flush(rows: list[dict]) -> list[dict]:
        if not segment:
            return rows
        runner = QualityPreprocessor([steps[i] for i in segment])
        kept, by_step = runner.run_rows(rows)
        # run_rows reports (name, rows) for steps that dropped something, in pipeline order.
        unique = iter([names[i] for i in segment])
        plain = iter(runner.names)
        for step, step_rows in by_step:
            name = next(u for u, p in zip(unique, plain, strict=False) if p == step)
            dropped.extend((name, _reason(r), _body(r)) for r in step_rows)
        segment.clear()
        return kept

    for i, step in enumerate(steps):
        if is_global(step):
            rows = flush(rows)
            rows, step_dropped = step(rows)
            dropped.extend((names[i], _reason(r), _body(r)) for r in step_dropped)
        else:
            segment.append(i)
    return flush(rows), dropped


def run_in_process(
    inputs: list[str], steps: list[Any], input_format: str | None = None, unreadable: str = UNREADABLE_FAIL
) -> InProcessRun:
    start = time.perf_counter()
    rows, dropped, n = read_rows(inputs, input_format, unreadable)
    kept, step_dropped = run_steps(rows, steps)
    return InProcessRun(kept, dropped + step_dropped, n, time.perf_counter() - start)
