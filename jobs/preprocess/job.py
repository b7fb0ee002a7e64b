"""Build and run the preprocess job on Ray Data.

Data flow::

    RecordDatasource: raw records + ids, and in the same task stage 1 (parse + cheap steps) on
      each block; only when files alone would leave CPUs idle are the records re-blocked to
      batch_size rows first and stage 1 runs as a map_batches over tasks
      -> stage 2...: cheap steps (map_batches over tasks)              } one stage per group of cheap
      -> model step (map_batches over an actor pool, models load once) } steps, per model step,
      -> dedup: hash partition by group key -> winners per partition   } and per DedupFilter
      -> near dedup: bands -> candidates -> verify -> decide in rounds -> mark (NearDedupFilter)
      -> ...
      -> PreprocessDatasink: kept rows, drop ledger, summed StepStats

A resumable run (``--resume``, :func:`build` with checkpoints) ends the stages before the first exchange with
a commit stage that checkpoints each input's rows (:mod:`.checkpoints`), and reads the rows of inputs
committed by an earlier attempt back from their checkpoints, straight into the exchange.

Where dedup runs is the config's choice: a ``DedupFilter`` entry becomes an exchange at exactly that
place in the pipeline, and the one-process reference runs it on all surviving rows at the same
place. The bundled default puts it last (its comments say why); the seed documents put it first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from twinkle_agentic.io import UNREADABLE_FILE, Source, expand_inputs
from twinkle_agentic.io.records import READ_STEP
from twinkle_agentic.preprocessor.pipeline import unique_names

from .checkpoints import UnitCheckpoints
from .config import PreprocessConfig
from .frame import DPART, PART_SPACE
from .input_digests import gather_digests, start_digests
from .near_exchange import near_exchange
from .ray_tuning import short_run_scheduling
from .read_plan import ReadPlan, autoscaler_max_cpus, plan_read
from .report import RunSummary, write_reports
from .resume import (
    RESUME_DIR,
    ResumeState,
    crash_point,
    fingerprint,
    finish,
    open_run,
    read_summary,
)
from .shared_storage import claimed_output, stale_markers
from .sink import DROPPED_DIR, KEPT_DIR, SinkResult, output_filesystem
from .stages import READ_POSITION, StageAdapter, StepStartError, mark_duplicates
from .steps import ConfigError, Stage, build_step, plan_stages, pool_size

logger = logging.getLogger(__name__)

# Default dedup partitions: two per CPU (at most MAX_CPU_PARTITIONS), or more when the input is large,
# so that no partition holds much more than PARTITION_TARGET_BYTES of frames. A partition is merged
# by one reduce task (about twice its size in memory while it sorts) and marked whole by
# mark_duplicates; with partitions tied to CPUs only, a 20 GB corpus on a 2-CPU node made four 5 GB
# partitions.
MAX_CPU_PARTITIONS = 64
PARTITION_TARGET_BYTES = 512 << 20
# Input blocks from which the dedup exchange uses Ray's push-based shuffle (Ray's own guidance).
PUSH_BASED_MIN_BLOCKS = 1000
# Logical CPUs a fused read+filter task asks Ray for; the read's ``concurrency`` (one task per CPU of
# the cluster at its largest, :mod:`.read_plan`) is what bounds how many run at once. Ray Data
# reserves resources for every downstream operator from the start: with read tasks asking for 1 CPU,
# a 2-CPU cluster ran one read task at a time (measured: docs/bench/preprocess_job.md).
READ_TASK_CPUS = 0.25


class InvariantError(RuntimeError):
    """The run's counts do not add up (kept + dropped != rows read, or a step lost rows)."""


class ActorStage:
    """Actor-pool form of a stage: the steps' models load once per actor, in ``__init__``.

    A step that cannot load its models fails the stage's first batch, not the actor's start: an
    error raised in an actor's constructor reaches the driver only as the text of Ray's
    ``ActorDiedError``, while a batch's error arrives as itself, for the CLI to name the step.
    """

    def __init__(self, adapter: StageAdapter):
        self.adapter = adapter
        self.start_error: StepStartError | None = None
        try:
            adapter.warmup()
        except StepStartError as exc:
            self.start_error = exc

    def __call__(self, table: Any) -> Any:
        if self.start_error is not None:
            raise self.start_error
        return self.adapter(table)


# What the job's tasks import: an embedded cluster's workers import them before they accept work,
# so the workers Ray prestarts (which Ray Data's actors take) do it before a run, not in it. The
# issue detectors are what a task worker's first DataContext loads (with ray.util.state: ~0.13 CPU s).
WORKER_MODULES = (
    "ray.data",
    "ray.data._internal.issue_detection",
    "twinkle_agentic.jobs.preprocess.read",
    "twinkle_agentic.jobs.preprocess.stages",
    "twinkle_agentic.jobs.preprocess.sink",
)


def connect(address: str | None = None, num_cpus: int | None = None) -> str:
    """Connect to Ray (the address given, else RAY_ADDRESS, else an embedded local cluster sized to
    this machine) through the project's cluster helper; returns a one-line description."""
    from twinkle_agentic.cluster import connect as cluster_connect

    info = cluster_connect(
        address, num_cpus=num_cpus, include_dashboard=False, preload_modules=WORKER_MODULES
    )
    return info.summary()


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def needs_split(sources: list[Source], cpus: int) -> bool:
    """Whether read tasks (one file each) alone would leave CPUs idle: fewer files than CPUs, or one
    file larger than a CPU's share. Then the records are re-blocked so any worker can take any block."""
    sizes = [s.size_bytes or 0 for s in sources]
    return len(sources) < cpus or max(sizes, default=0) * cpus > sum(sizes)


def actor_pool(stage: Stage, cfg: PreprocessConfig) -> Any:
    """The Ray Data actor pool of a model stage: fixed, or autoscaling between ``actors`` and
    ``max_actors``."""
    import ray.data

    low, high = pool_size(stage, cfg.actors, cfg.max_actors)
    return ray.data.ActorPoolStrategy(size=low) if low == high else ray.data.ActorPoolStrategy(min_size=low, max_size=high)


def actor_cpus(stages: list[Stage], default_actors: int, cpus: int) -> float:
    """Logical CPUs each model-stage actor asks Ray for: one, unless all the run's actors would then
    leave less than one CPU of the cluster free. Ray Data starts an actor pool whole before any task
    runs, and the tasks around it (reads, cheap stages) ask for up to one CPU each: with two actors
    on two CPUs, or one on one, the reads that feed the actors waited forever. So together the
    actors take at most ``cpus - 1``, shared equally (zero on one CPU: Ray places such actors
    anyway)."""
    actors = sum(s.actors or default_actors for s in stages if s.kind == "actor")
    if not actors:
        return 1.0
    return min(1.0, max(0, cpus - 1) / actors)


def default_partitions(cpus: int, input_bytes: int) -> int:
    """Partitions of the dedup exchange when the config sets none: ``2 x cpus`` (at most
    MAX_CPU_PARTITIONS), or one per PARTITION_TARGET_BYTES of input when that is more, rounded up to
    a multiple of ``cpus`` so that the last round of reduce tasks keeps every CPU busy."""
    by_cpus = min(MAX_CPU_PARTITIONS, 2 * cpus)
    by_size = -(-input_bytes // PARTITION_TARGET_BYTES)
    if by_size <= by_cpus:
        return by_cpus
    return -(-by_size // cpus) * cpus


def partition_bounds(partitions: int) -> list[int]:
    """Cut points of the dedup exchange: ``partitions`` equal ranges of the ``_dpart`` hash space.

    One partition still needs a cut point (Ray samples cut points when given none), so it is the
    end of the space and the second, empty range receives nothing.
    """
    return [(i * PART_SPACE) // partitions for i in range(1, partitions)] or [PART_SPACE]


def exchange_strategy(current: Any, input_blocks: int) -> Any:
    """The shuffle strategy of the dedup exchange: Ray Data's sort shuffle, as plain tasks in the
    job's worker pool. Pull-based, unless the context asks for the push-based one or the input is
    PUSH_BASED_MIN_BLOCKS blocks or more, where Ray recommends it (the pull-based map writes one
    object per block and partition)."""
    from ray.data.context import ShuffleStrategy

    if current == ShuffleStrategy.SORT_SHUFFLE_PUSH_BASED or input_blocks >= PUSH_BASED_MIN_BLOCKS:
        return ShuffleStrategy.SORT_SHUFFLE_PUSH_BASED
    return ShuffleStrategy.SORT_SHUFFLE_PULL_BASED


@contextlib.contextmanager
def context_settings(context: Any, **settings: Any) -> Iterator[None]:
    """Set attributes of a Ray ``DataContext`` for the ``with`` block, then restore the caller's."""
    saved = {name: getattr(context, name) for name in settings}
    try:
        for name, value in settings.items():
            setattr(context, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(context, name, value)


def input_blocks(sources: list[Source], block_bytes: int | None) -> int:
    """About how many blocks the read yields: the input's in-memory size over Ray's block size (its
    default when the context sets none)."""
    from ray.data.context import DEFAULT_TARGET_MAX_BLOCK_SIZE

    from .read import estimated_total

    return -(-estimated_total(sources) // (block_bytes or DEFAULT_TARGET_MAX_BLOCK_SIZE))


def stage_adapter(stage: Stage, steps: list[Any], names: list[str], uris: list[str]) -> StageAdapter:
    return StageAdapter(
        [steps[p] for p in stage.positions],
        stage.positions,
        [names[p] for p in stage.positions],
        parse=stage.parse,
        dedup=stage.dedup_next,
        uris=uris,
    )


def build(
    sources: list[Source],
    steps: list[Any],
    names: list[str],
    stages: list[Stage],
    cfg: PreprocessConfig,
    partitions: int,
    split_records: bool,
    cpus: int,
    ledger: Any = None,
    read: ReadPlan | None = None,
    checkpoints: UnitCheckpoints | None = None,
) -> Any:
    """The read and the stages on top of it; returns the dataset of final frames.

    Without ``split_records`` each read task takes whole files and runs the first stage on every
    block it reads (see :mod:`.read`): no hop through the object store, batches of exactly the first
    stage's batch size. With ``split_records`` the raw records are re-blocked first, so one big file
    still spreads over every CPU, and the first stage is a ``map_batches`` like the others.
    ``ledger`` (a ``sink.EarlyLedger``): fused read tasks write the first stage's drops to the drop
    ledger themselves, so those rows skip the dedup exchange. ``read`` (:func:`.read_plan.plan_read`):
    how many whole-file read tasks, and how many at once; default: planned for ``cpus``.
    ``checkpoints`` (a resumable run's, see :mod:`.checkpoints`): only the inputs not committed are
    read and go through the per-row stages, then through the commit stage, which checkpoints them;
    the committed inputs' frames are read back from their checkpoints and join them; the first
    exchange and the stages after it run on both.
    """
    import ray.data

    from .read import RecordDatasource

    uris = [s.uri for s in sources]  # by input index, as ``_src``: every input, read here or not
    cpus_per_actor = actor_cpus(stages, cfg.actors, cpus)
    read = read or plan_read(sources, cpus, None, cfg.read_concurrency)
    per_row, rest = (stages, []) if checkpoints is None else split_at_exchange(stages)
    fresh = sources if checkpoints is None else [s for s in sources if s.index not in checkpoints.committed]
    parts = []
    if fresh:
        first_batch = per_row[0].batch_size or cfg.batch_size
        unreadable = cfg.unreadable_files
        if split_records:
            raw = RecordDatasource(fresh, first_batch, unreadable=unreadable, checkpoints=checkpoints)
            ds = ray.data.read_datasource(raw).repartition(target_num_rows_per_block=first_batch)
            later = per_row
        else:
            fused = RecordDatasource(
                fresh,
                first_batch,
                transform=stage_adapter(per_row[0], steps, names, uris),
                unreadable=unreadable,
                ledger=ledger,
                checkpoints=checkpoints,
            )
            ds = ray.data.read_datasource(
                fused, override_num_blocks=read.tasks, concurrency=read.concurrency, num_cpus=READ_TASK_CPUS
            )
            later = per_row[1:]
        ds = add_stages(ds, steps, names, later, cfg, partitions, cpus_per_actor, uris)
        if checkpoints is not None:
            ds = ds.map_batches(checkpoints.commit, batch_size=None, batch_format="pyarrow")
        parts.append(ds)
    if checkpoints is not None and checkpoints.committed:
        from .checkpoints import CheckpointDatasource

        schema = stage_adapter(per_row[-1], steps, names, uris).output_schema()
        counted = [(READ_POSITION, READ_STEP)] + [(p, names[p]) for stage in per_row for p in stage.positions]
        reused = CheckpointDatasource(checkpoints, schema, counted)
        parts.append(
            ray.data.read_datasource(
                reused,
                override_num_blocks=min(read.tasks, len(checkpoints.committed)),
                concurrency=read.concurrency,
                num_cpus=READ_TASK_CPUS,
            )
        )
    ds = parts[0] if len(parts) == 1 else parts[0].union(parts[1])
    return add_stages(ds, steps, names, rest, cfg, partitions, cpus_per_actor, uris)


def add_stages(
    ds: Any,
    steps: list[Any],
    names: list[str],
    stages: list[Stage],
    cfg: PreprocessConfig,
    partitions: int,
    cpus_per_actor: float,
    uris: list[str],
) -> Any:
    """``stages`` on top of ``ds`` (raw records for a stage that parses, else frames), each as the
    Ray Data operation of its kind: what the CLI runs after its read, and :func:`.dataset_api.
    process_dataset` after a user's dataset. ``uris`` names each ``_src`` (in errors, the ledger)."""
    for stage in stages:
        if stage.kind == "near":
            (position,) = stage.positions
            bounds = partition_bounds(partitions)
            ds = near_exchange(ds, steps[position], names[position], position, bounds, uris, cfg.batch_size)
            continue
        if stage.kind == "dedup":
            (position,) = stage.positions
            # Hash partitioning as a range partition of the key's hash: the sort shuffle runs as
            # plain tasks on the job's warm workers, where a keyed repartition (HASH_SHUFFLE) starts
            # aggregator actors, a fresh process each, in every run.
            ds = ds.sort(DPART, boundaries=partition_bounds(partitions)).map_batches(
                mark_duplicates,
                fn_kwargs={"step": names[position], "position": position},
                batch_size=None,  # whole partitions: every group lies inside one
                batch_format="pyarrow",
            )
            continue
        adapter = stage_adapter(stage, steps, names, uris)
        batch_size = stage.batch_size or cfg.batch_size
        if stage.kind == "actor":
            ds = ds.map_batches(
                ActorStage,
                fn_constructor_kwargs={"adapter": adapter},
                compute=actor_pool(stage, cfg),
                num_cpus=cpus_per_actor,
                batch_size=batch_size,
                batch_format="pyarrow",
            )
        else:
            ds = ds.map_batches(adapter, batch_size=batch_size, batch_format="pyarrow")
    return ds


def split_at_exchange(stages: list[Stage]) -> tuple[list[Stage], list[Stage]]:
    """(the per-row stages, the first exchange and all after it): each row's work up to the first
    dedup or near-dedup exchange depends on that row alone, everything from it on on every input."""
    for at, stage in enumerate(stages):
        if stage.kind in ("dedup", "near"):
            return stages[:at], stages[at:]
    return stages, []


def prepare_output(output: str, overwrite: bool) -> tuple[Any, str]:
    """Refuse to mix with an earlier run's files unless ``overwrite``; then clear only our outputs
    (a killed run's storage marker among them). A folder that cannot be made or cleared is a
    ConfigError naming it."""
    try:
        return _prepare_output(output, overwrite)
    except OSError as exc:
        raise ConfigError(f"cannot use output {output!r}: {exc}") from exc


def output_entries(root: str) -> list[str]:
    """What a run writes into its output folder ``root`` (and ``--overwrite`` replaces); a resumable
    run's checkpoints (:mod:`.resume`) last."""
    from .report import CHART_FILE, REPORT_FILE, STATS_FILE

    names = (KEPT_DIR, DROPPED_DIR, STATS_FILE, REPORT_FILE, CHART_FILE, RESUME_DIR)
    return [f"{root}/{name}" for name in names]


def is_own_output(output: str) -> Callable[[str], bool]:
    """Whether an input's location (its URI; a local file's real path, as ``expand_inputs`` passes
    it) is one of the job's outputs in ``output``: an earlier run's kept and dropped parts or its
    stats.json, which a directory or glob over the inputs' folder may find. Read back, they would be
    counted twice, and ``--overwrite`` deletes them before the reads."""
    if "://" in output and not output.startswith("file://"):  # inputs' URIs carry no query
        entries = output_entries(output.split("?", 1)[0].rstrip("/"))
    else:  # a local path: compare where links lead
        entries = [os.path.realpath(e) for e in output_entries(output_filesystem(output)[1])]

    def own(where: str) -> bool:
        return any(where == e or where.startswith(e + "/") for e in entries)

    return own


def prepare_resume(cfg: PreprocessConfig, sources: list[Source]) -> tuple[Any, str, ResumeState]:
    """Start or continue the resumable run in ``cfg.output`` (:func:`.resume.open_run`)."""
    from pyarrow import fs

    try:
        filesystem, root = output_filesystem(cfg.output)
        if filesystem.get_file_info(root).type == fs.FileType.File:
            raise ConfigError(f"output {cfg.output!r} is a file; pass a directory")
        filesystem.create_dir(root, recursive=True)
        state = open_run(filesystem, root, cfg.output, fingerprint(cfg, sources), output_entries(root))
    except OSError as exc:
        raise ConfigError(f"cannot use output {cfg.output!r}: {exc}") from exc
    return filesystem, root, state


def _prepare_output(output: str, overwrite: bool) -> tuple[Any, str]:
    from pyarrow import fs

    filesystem, root = output_filesystem(output)
    info = filesystem.get_file_info(root)
    if info.type == fs.FileType.File:
        raise ConfigError(f"output {output!r} is a file; pass a directory")
    ours = output_entries(root)
    present = [
        p for p, i in zip(ours, filesystem.get_file_info(ours), strict=True) if i.type != fs.FileType.NotFound
    ]
    if info.type == fs.FileType.Directory:
        present += stale_markers(filesystem, root)
    if present and not overwrite:
        raise ConfigError(
            f"output directory {output!r} already holds a run ({present[0]}); pass --overwrite to replace it"
        )
    for path, kind in ((p, filesystem.get_file_info(p).type) for p in present):
        if kind == fs.FileType.Directory:
            filesystem.delete_dir(path)
        else:
            filesystem.delete_file(path)
    filesystem.create_dir(root, recursive=True)
    return filesystem, root


def plan(cfg: PreprocessConfig) -> tuple[list[Source], list[Any], list[str], list[Stage]]:
    """Everything decided before Ray starts: input files, step objects, stage grouping."""
    sources = expand_inputs(cfg.inputs, cfg.input_format, skip=is_own_output(cfg.output))
    steps = [build_step(spec) for spec in cfg.steps]
    names = unique_names(steps)
    stages = plan_stages(steps, cfg.steps)
    for stage in stages:
        if stage.kind == "actor":
            stage.actors, stage.max_actors = pool_size(stage, cfg.actors, cfg.max_actors)
    return sources, steps, names, stages


def collect_stats(result: SinkResult, names: list[str]) -> list:
    """Per-step StepStats in pipeline order (``read`` first), zeros for steps no row reached."""
    from twinkle_agentic.preprocessor.stats import StepStats

    ordered = [result.stats.get(READ_POSITION) or StepStats(READ_STEP)]
    ordered += [result.stats.get(p) or StepStats(name) for p, name in enumerate(names)]
    return ordered


def check_invariants(result: SinkResult, stats: list) -> None:
    """kept + dropped == rows read; every step's rows add up and chain; the ledger matches the stats."""
    rows_read = stats[0].before
    problems = []
    if result.kept + result.dropped != rows_read:
        problems.append(f"kept {result.kept} + dropped {result.dropped} != rows read {rows_read}")
    for previous, current in zip(stats, stats[1:], strict=False):
        if current.before != previous.after:
            problems.append(
                f"{current.step} saw {current.before} rows but {previous.step} passed {previous.after}"
            )
    for s in stats:
        if s.before != s.after + s.dropped:
            problems.append(f"{s.step}: {s.before} in != {s.after} out + {s.dropped} dropped")
        for reason, n in s.reasons.items():
            if result.drops.get((s.step, reason), 0) != n:
                problems.append(
                    f"{s.step}/{reason}: ledger has {result.drops.get((s.step, reason), 0)}, stats {n}"
                )
    if stats[-1].after != result.kept:
        problems.append(f"last step passed {stats[-1].after} rows but {result.kept} were written")
    if sum(result.drops.values()) != sum(s.dropped for s in stats):
        problems.append("the ledger holds drops of steps that are not in the pipeline")
    if problems:
        raise InvariantError("row accounting failed: " + "; ".join(problems))


def execute(
    cfg: PreprocessConfig,
    sources: list[Source],
    steps: list[Any],
    names: list[str],
    stages: list[Stage],
    run_id: str,
    checkpoints: UnitCheckpoints | None = None,
) -> tuple[str, SinkResult, float, list[dict]]:
    """Connect to Ray and run the dataset into the sink: (cluster description, what the sink
    counted, seconds of the data work, each input's size and checksum). With ``checkpoints`` (a
    resumable run) :func:`build` checkpoints each input."""
    import ray.data

    from .read import estimated_total
    from .sink import EarlyLedger, PreprocessDatasink

    cluster = connect(cfg.address, cfg.num_cpus)
    context = ray.data.DataContext.get_current()
    cpus = cluster_cpus()
    partitions = cfg.dedup_partitions or default_partitions(cpus, estimated_total(sources))
    read = plan_read(sources, cpus, autoscaler_max_cpus(), cfg.read_concurrency)
    split = needs_split(sources, read.cpus)
    for stage in stages:
        logger.info("stage %s", stage.describe(names))
    logger.info(
        "%d input file(s)%s; dedup exchange partitions: %d",
        len(sources),
        ", re-blocked for parallelism" if split else f", read fused with the first stage; {read.describe()}",
        partitions,
    )

    start = time.perf_counter()
    digests = start_digests(sources, cpus)
    strategy = exchange_strategy(
        context.shuffle_strategy, input_blocks(sources, context.target_max_block_size)
    )
    uris = [s.uri for s in sources]
    early_ledger = EarlyLedger(cfg.output, run_id, uris)
    # The dataset copies the context when built; the progress bars Ray Data opens while it executes
    # read the current one. Both settings last for this run only: the caller's datasets keep theirs.
    # raise_original_map_exception: a step's error on a batch reaches the driver as itself (Ray Data
    # would wrap it in a UserCodeException that keeps only its text), for the CLI to name the step.
    with context_settings(
        context,
        enable_progress_bars=cfg.progress,
        shuffle_strategy=strategy,
        raise_original_map_exception=True,
    ):
        ds = build(sources, steps, names, stages, cfg, partitions, split, cpus, early_ledger, read, checkpoints)
        sink = PreprocessDatasink(
            cfg.output, uris, run_id, cfg.output_format, cfg.rows_per_file, lineage=cfg.lineage
        )
        with short_run_scheduling():
            ds.write_datasink(sink)
    crash_point("written")
    inputs = gather_digests(digests)
    return cluster, sink.result or SinkResult(), time.perf_counter() - start, inputs


def run(cfg: PreprocessConfig) -> RunSummary:
    """Run the job and write every output; raises ConfigError/InputError or InvariantError."""
    cfg.validate()
    sources, steps, names, stages = plan(cfg)
    state, checkpoints = None, None
    if cfg.resume:
        filesystem, root, state = prepare_resume(cfg, sources)
        if state.complete:
            logger.info("the run in %s is complete: nothing to resume", cfg.output)
            summary = RunSummary.from_stats(cfg.output, read_summary(filesystem, root))
            summary.already_complete = True
            return summary
        run_id = state.run_id
        checkpoints = UnitCheckpoints(cfg.output, state.committed)
        logger.info(
            "resumable run %s: %d of %d input(s) from checkpoints", run_id, len(state.committed), len(sources)
        )
    else:
        filesystem, root = prepare_output(cfg.output, cfg.overwrite)
        run_id = uuid.uuid4().hex[:12]
    with claimed_output(filesystem, root, run_id):  # every task that writes checks for its marker
        cluster, result, seconds, inputs = execute(cfg, sources, steps, names, stages, run_id, checkpoints)

    stats = collect_stats(result, names)
    check_invariants(result, stats)
    unreadable = stats[0].reasons.get(UNREADABLE_FILE, 0)
    if unreadable:
        logger.warning(
            "%d input file(s) could not be read to their end: the rest of each is one %s drop in the ledger",
            unreadable,
            UNREADABLE_FILE,
        )
    summary = RunSummary(
        output=cfg.output,
        rows_read=stats[0].before,
        kept=result.kept,
        dropped=result.dropped,
        seconds=seconds,
        steps=stats,
        config=cfg.to_dict(),
        inputs=inputs,
        cluster=cluster,
        resume=state.summary(len(sources)) if state is not None else None,
    )
    write_reports(summary, filesystem, root)
    if state is not None:
        finish(filesystem, root)
    return summary
