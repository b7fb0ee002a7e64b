"""The functions Ray Data runs on each block: a group of steps, and the dedup winner selection.

Both are plain callables on a ``pyarrow.Table`` in the layout of :mod:`.frame`, so they are unit-tested
without Ray. ``StageAdapter`` calls exactly the step objects ``QualityPreprocessor`` would run in one
process, on a list of row dicts, and checks the step contract on every call.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from ray.exceptions import UserCodeException

from twinkle_agentic.io.inputs import LINE_BITS, MAX_LINE, row_order
from twinkle_agentic.io.records import READ_STEP, dumps, parse_read
from twinkle_agentic.metrics import record_step
from twinkle_agentic.preprocessor.batch import gc_paused, to_rows
from twinkle_agentic.preprocessor.dedup import DUPLICATE
from twinkle_agentic.preprocessor.dropped_log import REASON_KEY, UNKNOWN_REASON
from twinkle_agentic.preprocessor.quality import StepContractError
from twinkle_agentic.preprocessor.stats import StepStats

from .frame import (
    DKEY,
    DLEN,
    DROPPED,
    KIND,
    LINE,
    LIVE,
    RAW,
    READ_ERROR,
    REASON,
    ROW,
    SRC,
    STEP,
    FrameBuilder,
    frame_schema,
    passthrough,
)
from .resume import crash_point

# Each live row carries its id under this key while steps run, so kept and dropped rows can be
# traced back to (source, line) whatever a step returns. It is removed before a row is written.
ROW_ID_KEY = "__twinkle_row_id__"
READ_POSITION = -1


class StepFailedError(UserCodeException):
    """A step raised on a batch: names the step, its error and the input lines of the batch's first and
    last rows, so a failing run says which rows to look at (the step's traceback comes with it).

    The job has Ray Data raise it as itself (``raise_original_map_exception``), so that it reaches the
    driver; as a ``UserCodeException`` Ray Data still reports it as an error in user code, with the
    user's frames only, not as an error of Ray's own."""

    def __init__(self, step: str, error: str, rows: int, first: str, last: str):
        self.step, self.error, self.rows, self.first, self.last = step, error, rows, first, last
        super().__init__(f"step {step!r} raised {error} on a batch of {rows} rows, from {first} to {last}")

    @classmethod
    def during(
        cls, step: str, error: Exception, rows: list, size: int, uris: Sequence[str]
    ) -> StepFailedError:
        """``rows`` as the step left them (it may have changed the list); ``size`` as it got them."""
        ids = [row.get(ROW_ID_KEY) for row in rows if isinstance(row, dict)]
        ids = [i for i in ids if isinstance(i, int)]

        def where(order: int | None) -> str:
            if order is None:  # the step took the ids off the rows before it raised
                return "unknown lines"
            src, line = order >> LINE_BITS, order & MAX_LINE
            return f"{uris[src] if 0 <= src < len(uris) else f'input #{src}'} line {line}"

        first, last = (min(ids), max(ids)) if ids else (None, None)
        return cls(step, f"{type(error).__name__}: {error}", size, where(first), where(last))

    def __reduce__(self) -> tuple:  # Ray ships it from the worker to the driver
        return StepFailedError, (self.step, self.error, self.rows, self.first, self.last)


class StepStartError(UserCodeException):
    """A step's ``warmup`` (loading its models) raised on a stage actor: names the step and its error
    (a ``UserCodeException`` for the reason StepFailedError is)."""

    def __init__(self, step: str, error: str):
        self.step, self.error = step, error
        super().__init__(f"step {step!r} could not start: {error}")

    def __reduce__(self) -> tuple:
        return StepStartError, (self.step, self.error)


class StageError(UserCodeException):
    """An error of the job's own code in a stage, not of a step: as a ``UserCodeException`` it is
    reported by Ray Data as an error in user code, not as one of Ray's own (Ray Data asks for a
    report on Ray's tracker for those), and it keeps its type and message to the driver."""

    def __init__(self, stage: str, error: str):
        self.stage, self.error = stage, error
        super().__init__(f"stage {stage} failed: {error}")

    def __reduce__(self) -> tuple:
        return StageError, (self.stage, self.error)


@contextlib.contextmanager
def errors_as_user_code(stage: str) -> Iterator[None]:
    """Errors of the ``with`` block as :class:`StageError` (those that already are user code pass)."""
    try:
        yield
    except UserCodeException:
        raise
    except Exception as exc:
        raise StageError(stage, f"{type(exc).__name__}: {exc}") from exc


class StepBrokeContract(StepContractError, UserCodeException):
    """StepContractError as the job raises it: a ``UserCodeException`` for the reason StepFailedError
    is, and picklable (Ray ships it to the driver)."""

    def __reduce__(self) -> tuple:
        return StepBrokeContract, (self.step, self.problem)


def stats_record(position: int, stats: StepStats) -> dict:
    """One step's statistics on one batch, as the sink sums them; also counted in the job's metrics
    (``twinkle_agentic.metrics``) here, in the task, so they follow the run's progress."""
    read = stats.before if position == READ_POSITION else 0
    record_step(stats.step, stats.after, stats.reasons, read=read)
    return {"position": position, **stats.to_dict()}


class StageAdapter:
    """Runs a group of steps on one batch of rows, as a Ray Data ``map_batches`` function.

    ``parse=True`` for the first stage: its input is raw records (``_src``, ``_line``, ``_raw``) and
    lines that are not JSON objects become drops of step ``read``. Its output lists the dropped rows
    first, then the live ones, then the statistics record (``sink.split_dropped`` relies on that).
    ``dedup`` is the DedupFilter that follows this stage: its group key and message count are
    attached to every live row for the shuffle (computed here, where the rows are already decoded).
    """

    def __init__(
        self,
        steps: list[Any],
        positions: list[int],
        names: list[str],
        *,
        parse: bool = False,
        dedup: Any = None,
        uris: Sequence[str] = (),
    ):
        if not (len(steps) == len(positions) == len(names)):
            raise ValueError("steps, positions and names must have the same length")
        self.steps = list(steps)
        self.positions = list(positions)
        self.names = list(names)
        self.parse = parse
        self.dedup = dedup
        self.uris = tuple(uris)  # the input files, by index: named when a step fails
        self.label = " -> ".join(self.names)  # names the stage in an error of its own code

    def output_schema(self) -> Any:
        return frame_schema(self.dedup is not None)

    def warmup(self) -> None:
        """Load what the steps need (models) now: called once per actor in an actor pool."""
        for step, name in zip(self.steps, self.names, strict=True):
            warm = getattr(step, "warmup", None)
            if callable(warm):
                try:
                    warm()
                except Exception as exc:
                    raise StepStartError(name, f"{type(exc).__name__}: {exc}") from exc

    def __call__(self, table: Any) -> Any:
        with gc_paused(), errors_as_user_code(self.label):
            return self._process(table)

    def _process(self, table: Any) -> Any:
        import pyarrow as pa

        with_key = self.dedup is not None
        if table.num_rows == 0:  # Ray may hand over empty blocks without columns
            return self.output_schema().empty_table()
        out = FrameBuilder(with_key)
        records: list[dict] = []
        if self.parse:
            rows = self._parse(table, out, records)
            parts = []
        else:
            rows = self._decode(table)
            parts = [passthrough(table, with_key)]
        rows = self._run_steps(rows, out, records)
        for row in rows:
            order = row.pop(ROW_ID_KEY)
            text = dumps(row)
            key, length = self.dedup.key(row) if with_key else (None, 0)
            out.add(order >> LINE_BITS, order & MAX_LINE, LIVE, None, None, text, key, length)
        out.add_stats(records)
        parts.append(out.build())
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    @staticmethod
    def _parse(table: Any, out: FrameBuilder, records: list[dict]) -> list[dict]:
        start = time.perf_counter()
        rows: list[dict] = []
        reasons: Counter = Counter()
        srcs = table.column(SRC).to_pylist()
        lines = table.column(LINE).to_pylist()
        raws, errors = table.column(RAW).to_pylist(), table.column(READ_ERROR).to_pylist()
        for src, line, raw, error in zip(srcs, lines, raws, errors, strict=True):
            row, reason, value = parse_read(raw, error)
            if row is None:
                reasons[reason] += 1
                out.add(src, line, DROPPED, READ_STEP, reason, dumps(value))
            else:
                row[ROW_ID_KEY] = row_order(src, line)
                rows.append(row)
        n = len(srcs)
        stats = StepStats(READ_STEP, n, len(rows), n - len(rows), time.perf_counter() - start, reasons)
        records.append(stats_record(READ_POSITION, stats))
        return rows

    @staticmethod
    def _decode(table: Any) -> list[dict]:
        import pyarrow.compute as pc

        live = table.filter(pc.equal(table.column(KIND), LIVE))
        rows = []
        for src, line, text in zip(
            live.column(SRC).to_pylist(),
            live.column(LINE).to_pylist(),
            live.column(ROW).to_pylist(),
            strict=True,
        ):
            row = json.loads(text)
            row[ROW_ID_KEY] = row_order(src, line)
            rows.append(row)
        return rows

    def _run_steps(self, rows: list[dict], out: FrameBuilder, records: list[dict]) -> list[dict]:
        for step, position, name in zip(self.steps, self.positions, self.names, strict=True):
            before = len(rows)
            if before == 0:
                records.append(stats_record(position, StepStats(name)))
                continue
            start = time.perf_counter()
            try:
                result = step(rows)
            except Exception as exc:
                raise StepFailedError.during(name, exc, rows, before, self.uris) from exc
            seconds = time.perf_counter() - start
            if not (isinstance(result, tuple) and len(result) == 2):
                raise StepBrokeContract(name, f"returned {type(result).__name__}, not a 2-tuple")
            kept, dropped = (to_rows(part) if part is not None else [] for part in result)
            self._check_ids(name, before, kept, dropped)
            reasons: Counter = Counter()
            for row in dropped:
                order = row.pop(ROW_ID_KEY)
                reason = row.pop(REASON_KEY, None)
                reason = reason if isinstance(reason, str) and reason else UNKNOWN_REASON
                reasons[reason] += 1
                out.add(order >> LINE_BITS, order & MAX_LINE, DROPPED, name, reason, dumps(row))
            records.append(
                stats_record(position, StepStats(name, before, len(kept), len(dropped), seconds, reasons))
            )
            rows = kept
        return rows

    @staticmethod
    def _check_ids(name: str, before: int, kept: list, dropped: list) -> None:
        if len(kept) + len(dropped) != before:
            raise StepBrokeContract(
                name, f"was given {before} rows but returned {len(kept)} kept + {len(dropped)} dropped"
            )
        ids = set()
        for row in (*kept, *dropped):
            order = row.get(ROW_ID_KEY) if isinstance(row, dict) else None
            if order is None:
                raise StepBrokeContract(
                    name,
                    "returned a row that lost the keys it does not handle (or is not a dict): "
                    f"steps must keep unknown row keys, got {str(row)[:200]}",
                )
            ids.add(order)
        if len(ids) != before:
            raise StepBrokeContract(name, "returned the same input row more than once")


@errors_as_user_code("mark_duplicates")
def mark_duplicates(table: Any, step: str, position: int) -> Any:
    """Dedup winner selection on one hash partition (``batch_size=None``: whole partitions).

    Every group key lies wholly inside one partition. Per key the live row with the most messages
    wins, ties going to the earliest row id (``_src``, ``_line``): the order-free form of
    DedupFilter's one-pass rule. Losers become drops of ``step`` with reason ``duplicate``.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return frame_schema().empty_table()
    crash_point("exchange")
    start = time.perf_counter()
    kinds = table.column(KIND).to_numpy()
    live_index = np.flatnonzero(kinds == LIVE)
    losers = np.zeros(table.num_rows, dtype=bool)
    if live_index.size:
        live = table.select([DKEY, DLEN, SRC, LINE]).take(pa.array(live_index))
        order = pc.sort_indices(
            live,
            sort_keys=[(DKEY, "ascending"), (DLEN, "descending"), (SRC, "ascending"), (LINE, "ascending")],
        ).to_numpy()
        keys = live.column(DKEY).take(pa.array(order)).combine_chunks()
        first = np.ones(order.size, dtype=bool)
        if order.size > 1:
            first[1:] = pc.not_equal(keys.slice(1), keys.slice(0, order.size - 1)).to_numpy(
                zero_copy_only=False
            )
        losers[live_index[order[~first]]] = True
    mask = pa.array(losers)
    result = table.select(list(frame_schema().names))
    result = result.set_column(
        result.schema.get_field_index(KIND),
        KIND,
        pc.if_else(mask, pa.scalar(DROPPED, pa.int8()), result.column(KIND)),
    )
    result = result.set_column(
        result.schema.get_field_index(STEP), STEP, pc.if_else(mask, pa.scalar(step), result.column(STEP))
    )
    result = result.set_column(
        result.schema.get_field_index(REASON),
        REASON,
        pc.if_else(mask, pa.scalar(DUPLICATE), result.column(REASON)),
    )
    n_losers = int(losers.sum())
    stats = StepStats(
        step,
        int(live_index.size),
        int(live_index.size) - n_losers,
        n_losers,
        time.perf_counter() - start,
        Counter({DUPLICATE: n_losers}) if n_losers else Counter(),
    )
    tail = FrameBuilder()
    tail.add_stats([stats_record(position, stats)])
    return pa.concat_tables([result, tail.build()])
