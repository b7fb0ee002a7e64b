"""Run a pipeline over input files in this process: the reference the Ray job must match.

Rows are read and parsed by :mod:`twinkle_agentic.io`, as the job reads them, in input order. Each
global step (``DedupFilter``, ``NearDedupFilter``) runs once on all rows that survived the steps
before it; every run of other steps between them goes through :class:`QualityPreprocessor`. The
preprocess job's kept rows and drop reasons equal this run's, as sets; use it for data that fits in
memory, for tests and to check a pipeline before a cluster run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.io import UNREADABLE_FAIL, UNREADABLE_MODES, expand_inputs, parse_read, read_source
from twinkle_agentic.io.records import READ_STEP

from .dedup import DedupFilter
from .dropped_log import REASON_KEY, UNKNOWN_REASON
from .near_dedup import ORIGIN_KEY, NearDedupFilter
from .quality import QualityPreprocessor, step_name
from .step_specs import PipelineConfigError, build_steps, read_pipeline_config


@dataclass
class PipelineRun:
    """What :func:`run_pipeline` returns: the kept rows in input order and every drop."""

    kept: list[dict] = field(default_factory=list)
    # (step, reason, row) for every dropped row; for read drops the row is the raw text or value
    dropped: list[tuple[str, str, Any]] = field(default_factory=list)
    rows_read: int = 0
    seconds: float = 0.0


def unique_names(steps: Sequence[Any]) -> list[str]:
    """Step names, with ``#2``, ``#3``... added to repeats so statistics stay per step."""
    seen: dict[str, int] = {}
    names = []
    for step in steps:
        base = step_name(step)
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


def is_global(step: Any) -> bool:
    """Whether ``step`` needs every row at once (dedup), rather than one batch at a time."""
    return isinstance(step, (DedupFilter, NearDedupFilter))


def read_rows(
    inputs: Sequence[str],
    input_format: str | None = None,
    unreadable: str = UNREADABLE_FAIL,
    origin_key: str | None = None,
) -> tuple[list[dict], list[tuple[str, str, Any]], int]:
    """(rows in input order, read drops as (step, reason, value), records read); with
    ``origin_key``, each row carries ``[source URI, line]`` under that key."""
    rows: list[dict] = []
    dropped: list[tuple[str, str, Any]] = []
    n = 0
    for source in expand_inputs(list(inputs), input_format):
        for line, raw, error in read_source(source, unreadable):
            n += 1
            row, reason, value = parse_read(raw, error)
            if row is None:
                dropped.append((READ_STEP, reason, value))
            else:
                if origin_key is not None:
                    row[origin_key] = [source.uri, line]
                rows.append(row)
    return rows, dropped, n


def _reason(row: Any) -> str:
    reason = row.get(REASON_KEY) if isinstance(row, dict) else None
    return reason if isinstance(reason, str) and reason else UNKNOWN_REASON


def _body(row: Any) -> Any:
    return {k: v for k, v in row.items() if k != REASON_KEY} if isinstance(row, dict) else row


def run_steps(rows: list[dict], steps: Sequence[Any]) -> tuple[list[dict], list[tuple[str, str, Any]]]:
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


def _without(row: Any, key: str) -> Any:
    return {k: v for k, v in row.items() if k != key} if isinstance(row, dict) and key in row else row


def with_lineage(row: dict, origin_key: str) -> dict:
    """A kept row as ``--lineage`` writes it: ``{"source", "line", "row"}`` (the ledger's layout)."""
    source, line = row[origin_key]
    return {"source": source, "line": line, "row": _without(row, origin_key)}


def run_pipeline(
    inputs: Sequence[str],
    steps: Sequence[Any] | str | os.PathLike | None = None,
    *,
    input_format: str | None = None,
    unreadable: str | None = None,
    lineage: bool = False,
) -> PipelineRun:
    """Run a pipeline over the rows of ``inputs`` in this process, with no Ray.

    ``inputs``: files, directories, globs or URIs, as ``twinkle-agentic preprocess --input`` takes
    them. ``steps``: ``None`` for the bundled default pipeline; the path of a pipeline YAML file (the
    ``--config`` of the job: its ``steps``, and its ``input_format`` / ``unreadable_files`` unless
    given here; its cluster options do not apply in one process); or a list whose items are step
    objects (``HardFilter()``, your own callables) or YAML step entries (``"RefuseFilter"``,
    ``{"HardFilter": {"min_user_chars": 10}}``). ``input_format`` forces one format (``jsonl``,
    ``json``, ``parquet``); ``unreadable`` is ``"fail"`` (a file that breaks off raises, the default)
    or ``"drop"`` (its unreadable rest becomes an ``unreadable_file`` drop). ``lineage``: each kept
    row comes back as ``{"source": input file, "line": its line or record number, "row": the row}``,
    as the job's ``--lineage`` writes it. Every row is held in memory; for larger data run the job.
    """
    if steps is None or isinstance(steps, (str, os.PathLike)):
        config, where = read_pipeline_config(None if steps is None else os.fspath(steps))
        input_format = input_format if input_format is not None else config.get("input_format")
        unreadable = unreadable if unreadable is not None else config.get("unreadable_files")
        steps = config.get("steps")
        if not isinstance(steps, list):
            raise PipelineConfigError(f"{where}: 'steps' must be a list of pipeline steps, got {steps!r}")
    unreadable = UNREADABLE_FAIL if unreadable is None else unreadable
    if unreadable not in UNREADABLE_MODES:
        raise PipelineConfigError(f"unreadable must be one of {UNREADABLE_MODES}, got {unreadable!r}")
    built = build_steps(steps)
    start = time.perf_counter()
    # NearDedupFilter names kept rows by their origin, as the job does: rows carry it meanwhile.
    # With lineage, kept rows take their source and line from the same origin.
    near = any(isinstance(step, NearDedupFilter) for step in built)
    origin_key = ORIGIN_KEY if near or lineage else None
    rows, dropped, n = read_rows(inputs, input_format, unreadable, origin_key)
    kept, step_dropped = run_steps(rows, built)
    if lineage:
        kept = [with_lineage(row, origin_key) for row in kept]
    elif origin_key is not None:
        kept = [_without(row, origin_key) for row in kept]
        step_dropped = [(step, reason, _without(row, origin_key)) for step, reason, row in step_dropped]
    return PipelineRun(kept, dropped + step_dropped, n, time.perf_counter() - start)
