"""The preprocess pipeline on a ``ray.data.Dataset`` the caller built: their own source in, the kept
rows, the drop ledger and exact statistics out, as datasets to compose with their own stages and
sinks.

The stages are the CLI's (:func:`.job.add_stages`): the same step grouping, dedup and near-dedup
exchanges and actor pools; only the read differs (the rows come from the dataset, numbered in its
order, instead of files read and filtered in one task). Rows travel as JSON text, as in the job
(:mod:`.frame` says why), and come out that way: ``json.loads(row["row"])`` gives each row back.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twinkle_agentic.io import dumps
from twinkle_agentic.preprocessor.pipeline import unique_names
from twinkle_agentic.preprocessor.quality import step_name
from twinkle_agentic.preprocessor.stats import StepStats

from .config import PreprocessConfig
from .frame import DROPPED, KIND, LINE, LIVE, RAW, REASON, ROW, STATS, STEP, read_schema
from .steps import StepSpec, build_step, parse_step, plan_stages, positive_int

# The name of the dataset in the ledger's and the lineage's ``source`` unless the caller gives one.
DEFAULT_SOURCE = "dataset"


@dataclass
class PreprocessResult:
    """What :func:`process_dataset` returns, computed by one execution of the pipeline.

    ``kept``: one row per kept row, column ``row`` (its JSON text), with ``source`` and ``line``
    beside it when asked for lineage. ``dropped``: the drop ledger, columns ``step``, ``reason``,
    ``source``, ``line`` and ``row`` (JSON text of the row as the step saw it), the CLI's ``dropped/``
    records. ``stats``: per step, ``read`` first, as in the CLI's stats.json. Both datasets read the
    materialized result; they are not recomputed when consumed."""

    kept: Any
    dropped: Any
    stats: list[StepStats]
    rows_read: int
    kept_rows: int
    dropped_rows: int


def resolve_steps(entries: Sequence[Any]) -> tuple[list[Any], list[StepSpec]]:
    """Step objects and their specs (stage options: actors, batch_size) from ``StepSpec``s, YAML step
    entries (``"HardFilter"``, ``{"HardFilter": {...}, "actors": 2}``) or step objects."""
    steps, specs = [], []
    for index, entry in enumerate(entries):
        if isinstance(entry, StepSpec):
            spec, step = entry, build_step(entry)
        elif isinstance(entry, (str, dict)):
            spec = parse_step(entry, index)
            step = build_step(spec)
        else:
            step, spec = entry, StepSpec(step_name(entry))
        steps.append(step)
        specs.append(spec)
    return steps, specs


def _raw_records(text_column: str | None) -> Any:
    """A ``map_batches`` function: the caller's rows as the raw record bytes a read yields."""
    import pyarrow as pa

    def to_raw(table: Any) -> Any:
        if text_column is None:
            raws = [dumps(row).encode("utf-8", "surrogatepass") for row in table.to_pylist()]
        else:
            raws = [
                None if t is None else t.encode("utf-8", "surrogatepass") if isinstance(t, str) else bytes(t)
                for t in table.column(text_column).to_pylist()
            ]
        return pa.table({RAW: pa.array(raws, pa.large_binary())})

    return to_raw


def _numbered(table: Any, offset: int, start: int, end: int) -> Any:
    """Rows ``start:end`` of a block of raw records, the first being row ``offset`` of the dataset,
    in the read layout: all from source 0, lines numbered from ``offset + 1``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = table.slice(start, end - start)
    lines = pa.array(range(offset + 1, offset + 1 + table.num_rows), pa.int64())
    raws = pc.fill_null(
        table.column(RAW), pa.scalar(b"null", pa.large_binary())
    )  # a null text is a row that is not an object
    srcs = pa.array([0] * table.num_rows, pa.int32())
    errors = pa.nulls(table.num_rows, pa.string())
    return pa.table([srcs, lines, raws, errors], schema=read_schema())


def number_rows(raw: Any) -> Any:
    """The rows of a materialized dataset numbered by position: its blocks in order, each given the
    count of rows before it (Ray Data has no row index of its own; ``zip`` with a range is
    deprecated for relying on an order it does not guarantee, where a materialized dataset's block
    list is fixed)."""
    import ray
    import ray.data

    number = ray.remote(_numbered)
    refs, offset = [], 0
    for bundle in raw.iter_internal_ref_bundles():  # a bundle may hold row ranges of its blocks
        slices = getattr(bundle, "slices", None) or [None] * len(bundle.block_refs)
        for ref, metadata, part in zip(bundle.block_refs, bundle.metadata, slices, strict=True):
            start, end = (0, metadata.num_rows) if part is None else (part.start_offset, part.end_offset)
            refs.append(number.remote(ref, offset, start, end))
            offset += end - start
    return ray.data.from_arrow_refs(refs)


def _kept_rows(source: str, lineage: bool) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    def kept(table: Any) -> Any:
        live = table.filter(pc.equal(table.column(KIND), LIVE))
        columns = {"row": pc.cast(live.column(ROW), pa.string())}
        if lineage:
            columns = {
                "source": pa.array([source] * live.num_rows, pa.string()),
                "line": live.column(LINE),
                **columns,
            }
        return pa.table(columns)

    return kept


def _ledger_rows(source: str) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    def ledger(table: Any) -> Any:
        dropped = table.filter(pc.equal(table.column(KIND), DROPPED))
        return pa.table(
            {
                "step": dropped.column(STEP),
                "reason": dropped.column(REASON),
                "source": pa.array([source] * dropped.num_rows, pa.string()),
                "line": dropped.column(LINE),
                "row": pc.cast(dropped.column(ROW), pa.string()),
            }
        )

    return ledger


def process_dataset(
    ds: Any,
    steps: Sequence[Any],
    *,
    text_column: str | None = None,
    source: str = DEFAULT_SOURCE,
    lineage: bool = False,
    batch_size: int = 1024,
    actors: int = 1,
    max_actors: int | None = None,
    dedup_partitions: int | None = None,
) -> PreprocessResult:
    """Run pipeline ``steps`` over the rows of ``ds`` (a ``ray.data.Dataset``) on the current Ray
    cluster; returns the kept rows, the drop ledger and the statistics (:class:`PreprocessResult`).

    ``steps``: ``StepSpec``s, YAML step entries or step objects, as in a pipeline YAML's ``steps``.
    Rows: each row of ``ds`` as Ray Data holds it, or, with ``text_column``, the JSON text in that
    column, parsed as the CLI parses a line (a text that is not a JSON object is a ``read`` drop).
    Prefer text for rows of varying shape: Ray Data's Arrow blocks give every struct the fields of
    all of them (missing ones as null), so a dict row may differ from the one the source held.
    Rows are numbered by their position in ``ds`` (``line``, 1-based; dedup ties go to the earlier
    row) and named ``source`` in the ledger and, with ``lineage``, beside each kept row.

    Executes now: the statistics are exact only once every row has passed, so the pipeline runs once
    and its output is materialized (in Ray's object store, spilled to disk when large); ``kept`` and
    ``dropped`` read that. The other options are the CLI's (``--batch-size``, ``--actors``, ...).
    """
    import ray.data

    from .job import (
        actor_cpus,
        add_stages,
        check_invariants,
        cluster_cpus,
        collect_stats,
        context_settings,
        default_partitions,
        exchange_strategy,
    )
    from .sink import SinkResult, add_stats_records

    built, specs = resolve_steps(list(steps))
    names = unique_names(built)
    for name, value in (("batch_size", batch_size), ("actors", actors)):
        positive_int(value, name)
    for name, value in (("max_actors", max_actors), ("dedup_partitions", dedup_partitions)):
        if value is not None:
            positive_int(value, name)
    cfg = PreprocessConfig(
        batch_size=batch_size, actors=actors, max_actors=max_actors, dedup_partitions=dedup_partitions
    )
    stages = plan_stages(built, specs)

    def in_order(context: Any) -> Any:  # row numbers and the dedup tie-break follow the dataset's order
        ordered = copy.copy(context.execution_options)
        ordered.preserve_order = True
        return context_settings(context, execution_options=ordered, raise_original_map_exception=True)

    # ``ds`` and what derives from it run with the context ``ds`` was made with, not the current one
    with in_order(ds.context):
        raw = ds.map_batches(_raw_records(text_column), batch_format="pyarrow").materialize()
    context = ray.data.DataContext.get_current()
    with in_order(context):
        cpus = cluster_cpus()
        partitions = dedup_partitions or default_partitions(cpus, raw.size_bytes() or 0)
        strategy = exchange_strategy(context.shuffle_strategy, raw.num_blocks())
        with context_settings(context, shuffle_strategy=strategy):
            records = number_rows(raw).repartition(
                target_num_rows_per_block=stages[0].batch_size or batch_size
            )
            frames = add_stages(
                records, built, names, stages, cfg, partitions, actor_cpus(stages, actors, cpus), [source]
            ).materialize()
    result = SinkResult()
    tallies = frames.map_batches(_tally, batch_format="pyarrow").take_all()
    for tally in tallies:
        result.kept += tally["kept"]
        result.dropped += tally["dropped"]
        for step, reason, n in json.loads(tally["drops"]):
            result.drops[(step, reason)] += n
        add_stats_records(json.loads(tally["stats"]), result)
    stats = collect_stats(result, names)
    check_invariants(result, stats)  # the CLI's accounting checks: an InvariantError if rows went missing
    return PreprocessResult(
        kept=frames.map_batches(_kept_rows(source, lineage), batch_format="pyarrow"),
        dropped=frames.map_batches(_ledger_rows(source), batch_format="pyarrow"),
        stats=stats,
        rows_read=stats[0].before,
        kept_rows=result.kept,
        dropped_rows=result.dropped,
    )


def _tally(table: Any) -> Any:
    """One row per block: its kept and dropped counts, drops by (step, reason), its stats records."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kinds = table.column(KIND)
    dropped = table.filter(pc.equal(kinds, DROPPED))
    drops = Counter(zip(dropped.column(STEP).to_pylist(), dropped.column(REASON).to_pylist(), strict=True))
    stats = table.filter(pc.equal(kinds, STATS)).column(ROW).to_pylist()
    return pa.table(
        {
            "kept": [int(pc.sum(pc.equal(kinds, LIVE)).as_py() or 0)],
            "dropped": [dropped.num_rows],
            "drops": [json.dumps([[s, r, n] for (s, r), n in drops.items()])],
            "stats": [json.dumps(stats)],
        }
    )
