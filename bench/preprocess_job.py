#!/usr/bin/env python
"""Preprocess job throughput and memory vs the one-process pipeline, side by side in one run.

    python bench/preprocess_job.py --rows 200000 1000000 --cpus 1 2

For each corpus size it generates sharded JSONL (scripts/make_sample_data.py), then runs, each in a
fresh subprocess: the one-process reference (the same steps through QualityPreprocessor and
DedupFilter, reading and writing JSONL) and the Ray Data job on an embedded local cluster with each
``--cpus`` value. It prints one table: rows/s, parallel efficiency = job rows/s / (one-process rows/s
x CPUs), CPU efficiency = the GC-paused one-process run's CPU seconds / the job's CPU seconds (driver,
raylet, GCS and workers, without the reports the driver writes after the timed data work: the share
of the job's CPU work that is the pipeline itself, independent of other load on the machine; per kind
of process, with the kernel's share and the minor page faults), the worker processes the raylet
started during the run (from its log), peak RSS of the driver and of the Ray workers (sampled every
0.2 s), and appends a JSON record ``{bench, params, git_sha, results}`` to ``--record`` when given.
A ``DedupFilter`` line times the one-process dedup alone on all parsed rows (it must stay linear).

The job's stages run with the cyclic garbage collector paused per batch (``gc_paused``), so the
reference also runs a second time with the collector paused for the whole run ("one-process, GC
paused"); ``efficiency (like-for-like)`` divides by that run's rows/s. The plain one-process run
holds every row alive, and its collections scan them all, so it gets slower per row as the corpus
grows: efficiency against it alone flatters the job.

``--timeline`` prints, after each job run, its tasks from ``ray.timeline()``: per task kind the count,
first start, last end and busy seconds (seconds from the run's start), and the gaps longer than 0.25 s
in which a worker that runs the job's data tasks sat idle. That is where a run's start-up and tail go.

``--pair`` also runs two one-process references at once, each on the whole corpus, and prints their
parallel efficiency ("2 at once"): what two CPUs of this machine give work that needs no
coordination at all (two processes share caches and memory bandwidth; a virtual machine's two CPUs
may share a physical core). Read the job's two-CPU efficiency against it: it says how much of a
shortfall is the machine's.

``--job-runs 2`` runs the job twice on each embedded cluster: run #1 pays the per-run start-up (worker
processes importing Ray Data and the pipeline, Ray Data's own actors), #2 measures a driver that has
already run one job (a notebook or a service running one preprocess after another). ``--rounds K``
repeats everything K times, compares each job with its own round's references and prints the
medians: the machine's speed drifts between runs, and a single reference run can be far off.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.records import emit_record, git_sha  # noqa: E402

SHARDS = 16


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


KIND_RANK = {"other": 0, "workers": 1, "ray_data_actors": 2}


def _process_kind(name: str) -> str:
    """Ray Data's bookkeeping actors, task/actor workers, or the rest (raylet, GCS, agents)."""
    if name.startswith(("ray::_StatsActor", "ray::_AutoscalingCoordinatorActor")):
        return "ray_data_actors"
    if name.startswith("ray::") and not name.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent")):
        return "workers"
    return "other"


class ClusterSampler:
    """Samples this process's descendants (the embedded Ray cluster) in a thread: peak RSS of the
    Ray workers (``ray::...``) and the CPU seconds of every descendant (last value seen per pid).

    Summed RSS counts the object store's shared pages once per worker that maps them, so the peak of
    the workers' summed PSS (each shared page split between the processes that map it) is sampled
    too, at most every ``pss_interval_s`` and only while summed RSS is within 10 % of its peak. The
    sampler shares the driver's cores with the job, so it stays cheap: the process tree (a scan of
    /proc) is refreshed every ``tree_every`` samples, PSS (the kernel walks every mapping for
    ``smaps_rollup``: milliseconds per worker) only near the peak, and its own CPU time is measured
    (``own_cpu_s``) and reported apart from the driver's."""

    def __init__(self, interval_s: float = 0.2, pss_interval_s: float = 3.0, tree_every: int = 5):
        import psutil

        self.psutil, self.interval_s = psutil, interval_s
        self.pss_interval_s, self.tree_every = pss_interval_s, tree_every
        self.peak_total_mb = self.peak_single_mb = self.peak_pss_mb = 0.0
        self.own_cpu_s = 0.0
        self.cpu_by_pid: dict[int, float] = {}
        # kernel CPU seconds and minor page faults: a first job's extra kernel time is first touch of
        # memory (object store pages each worker maps, fresh heaps), which these two make visible
        self.kernel_by_pid: dict[int, float] = {}
        self.faults_by_pid: dict[int, float] = {}
        self.kind_by_pid: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_by_pid.values())

    def snapshot(self) -> dict[str, dict[int, float]]:
        """The per-process counters now, to subtract later with :meth:`by_kind`."""
        return {
            "cpu": dict(self.cpu_by_pid),
            "kernel": dict(self.kernel_by_pid),
            "faults": dict(self.faults_by_pid),
        }

    def by_kind(self, counter: str, since: dict[str, dict[int, float]]) -> dict[str, float]:
        """How much of ``counter`` ("cpu", "kernel" or "faults") each kind of process used since
        ``since`` (a :meth:`snapshot`)."""
        values = {"cpu": self.cpu_by_pid, "kernel": self.kernel_by_pid, "faults": self.faults_by_pid}[counter]
        before = since[counter]
        totals: dict[str, float] = {}
        for pid, value in values.items():
            kind = self.kind_by_pid.get(pid, "other")
            totals[kind] = totals.get(kind, 0.0) + value - before.get(pid, 0.0)
        return {k: round(v, 2) for k, v in sorted(totals.items())}

    @staticmethod
    def _minor_faults(pid: int) -> float | None:
        """Minor page faults of a process so far (Linux ``/proc/<pid>/stat``), or None."""
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return float(stat.read().rsplit(")", 1)[1].split()[7])
        except (OSError, IndexError, ValueError):
            return None

    def _run(self) -> None:
        me, procs, workers, samples, pss_at = self.psutil.Process(), [], [], 0, 0.0
        while not self._stop.is_set():
            started = time.thread_time()
            if samples % self.tree_every == 0:
                procs = me.children(recursive=True)
            samples += 1
            total = single = 0.0
            workers.clear()
            for proc in procs:
                try:
                    with proc.oneshot():
                        times, name = proc.cpu_times(), proc.name()
                        self.cpu_by_pid[proc.pid] = times.user + times.system
                        self.kernel_by_pid[proc.pid] = times.system
                        faults = self._minor_faults(proc.pid)
                        if faults is not None:
                            self.faults_by_pid[proc.pid] = faults
                        # a worker starts as "python", an actor as ray::IDLE: keep the most specific kind seen
                        kind = _process_kind(name)
                        if KIND_RANK[kind] > KIND_RANK[self.kind_by_pid.get(proc.pid, "other")]:
                            self.kind_by_pid[proc.pid] = kind
                        if name.startswith("ray::"):
                            rss = proc.memory_info().rss / 2**20
                            total += rss
                            single = max(single, rss)
                            workers.append(proc)
                except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                    continue
            self.peak_total_mb = max(self.peak_total_mb, total)
            self.peak_single_mb = max(self.peak_single_mb, single)
            now = time.monotonic()
            if total >= 0.9 * self.peak_total_mb and now - pss_at >= self.pss_interval_s:
                pss_at = now
                self.peak_pss_mb = max(self.peak_pss_mb, self._workers_pss_mb(workers))
            self.own_cpu_s += time.thread_time() - started
            self._stop.wait(self.interval_s)

    def _workers_pss_mb(self, workers: list) -> float:
        pss = 0.0
        for proc in workers:
            try:
                pss += proc.memory_full_info().pss / 2**20
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                continue
        return pss

    def __enter__(self) -> ClusterSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


IDLE_GAP_S = 0.25


def timeline_summary(events: list[dict], start: float, end: float) -> list[str]:
    """Lines describing one run from ``ray.timeline()`` events (``start``/``end``: epoch seconds).

    Task events are the complete events (``ph`` "X") whose category is ``task::<name>``: Ray Data's
    operators (read, sort map/reduce, write) and the calls to its actors. Workers are told apart by
    the event's ``tid``; the data workers are those that ran a task that is not an actor call.
    """
    tasks: dict[str, list[tuple[float, float]]] = {}
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for event in events:
        kind = str(event.get("cat", ""))
        if event.get("ph") != "X" or not kind.startswith("task::"):
            continue
        begin = event["ts"] / 1e6 - start
        finish = begin + event["dur"] / 1e6
        if finish < 0 or begin > end - start:
            continue
        name = kind[len("task::") :]
        tasks.setdefault(name, []).append((begin, finish))
        if "Actor." not in name:
            by_worker.setdefault(str(event.get("tid")), []).append((begin, finish))
    lines = [f"{'task':>52} {'n':>4} {'first s':>8} {'last end':>8} {'busy s':>7}"]
    for name, spans in sorted(tasks.items(), key=lambda item: min(b for b, _ in item[1])):
        lines.append(
            f"{name:>52} {len(spans):>4} {min(b for b, _ in spans):>8.2f} "
            f"{max(f for _, f in spans):>8.2f} {sum(f - b for b, f in spans):>7.2f}"
        )
    for index, spans in enumerate(sorted(by_worker.values(), key=min), 1):
        gaps, cursor = [], 0.0
        for begin, finish in sorted(spans):
            if begin - cursor > IDLE_GAP_S:
                gaps.append(f"{cursor:.2f}-{begin:.2f}")
            cursor = max(cursor, finish)
        if end - start - cursor > IDLE_GAP_S:
            gaps.append(f"{cursor:.2f}-{end - start:.2f}")
        busy = sum(f - b for b, f in spans)
        lines.append(
            f"data worker {index}: busy {busy:.2f} s; idle > {IDLE_GAP_S} s: {', '.join(gaps) or 'none'}"
        )
    return lines


def worker_processes_started() -> int | None:
    """Worker processes the local raylet has started so far (it logs each start; actors count too),
    or None when this process has no local node (a remote cluster). Reads the raylet's log through
    Ray's private node handle: a measurement for this bench, not something the job relies on."""
    import ray

    node = ray._private.worker._global_node
    if node is None:
        return None
    log = Path(node.get_session_dir_path()) / "logs" / "raylet.out"
    return log.read_text(errors="replace").count("Started worker process") if log.exists() else None


def object_store_mib() -> dict[str, float]:
    """The object store's capacity and what Ray has spilled to and restored from disk so far (MiB,
    cumulative over the cluster's life), from Ray's memory summary."""
    import re

    import ray
    from ray._private.internal_api import memory_summary

    summary = memory_summary(stats_only=True)
    figures = {"capacity": ray.cluster_resources().get("object_store_memory", 0) / 2**20}
    for name, label in (("spilled", "Spilled"), ("restored", "Restored")):
        found = re.search(rf"{label} (\d+) MiB", summary)
        figures[name] = float(found.group(1)) if found else 0.0
    return figures


def child_baseline(corpus: str, config: str | None, output: str, gc_off: bool = False) -> dict:
    """One process: read + parse, the pipeline over all rows, write kept rows and the ledger
    (``gc_off``: with the cyclic garbage collector paused while the pipeline runs, as job stages do)."""
    from contextlib import nullcontext

    from twinkle_agentic.jobs.preprocess.config import build_parser, resolve_config
    from twinkle_agentic.jobs.preprocess.job import plan

    from twinkle_agentic.io import dumps
    from twinkle_agentic.preprocessor import run_pipeline
    from twinkle_agentic.preprocessor.batch import gc_paused

    argv = ["--input", corpus, "--output", output] + (["--config", config] if config else [])
    cfg = resolve_config(build_parser().parse_args(argv))
    _, steps, _, _ = plan(cfg)
    start, cpu_start = time.perf_counter(), _own_cpu_s()
    with gc_paused() if gc_off else nullcontext():
        result = run_pipeline(cfg.inputs, steps)
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "kept.jsonl"), "w", encoding="utf-8") as kept:
        kept.writelines(dumps(row) + "\n" for row in result.kept)
    with open(os.path.join(output, "dropped.jsonl"), "w", encoding="utf-8") as dropped:
        dropped.writelines(dumps({"step": s, "reason": r, "row": row}) + "\n" for s, r, row in result.dropped)
    seconds = time.perf_counter() - start
    return {
        "rows": result.rows_read,
        "kept": len(result.kept),
        "seconds": seconds,
        "cpu_s": _own_cpu_s() - cpu_start,
        "driver_peak_mb": _peak_rss_mb(),
    }


def child_dedup(corpus: str) -> dict:
    """DedupFilter alone over every parsed row of the corpus, in this process."""
    from twinkle_agentic.preprocessor import DedupFilter
    from twinkle_agentic.preprocessor.pipeline import read_rows

    rows, _, _ = read_rows([corpus])
    start = time.perf_counter()
    kept, dropped = DedupFilter()(rows)
    return {
        "rows": len(rows),
        "kept": len(kept),
        "seconds": time.perf_counter() - start,
        "driver_peak_mb": _peak_rss_mb(),
    }


@contextmanager
def reports_timed(cpu: list[float]) -> Iterator[None]:
    """Append to ``cpu`` the driver's CPU seconds for the reports each job run writes after its timed
    data work (a fresh process's first chart imports matplotlib, ~1 CPU s); the reference writes none."""
    from twinkle_agentic.jobs.preprocess import job

    write_reports = job.write_reports

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return write_reports(*args, **kwargs)
        finally:
            cpu.append(time.thread_time() - start)

    job.write_reports = timed
    try:
        yield
    finally:
        job.write_reports = write_reports


@contextmanager
def input_digests(on: bool) -> Iterator[None]:
    """With ``on`` false, the job runs without its pass that checksums every input for stats.json
    (its ``inputs`` list comes out empty): the other half of the ``--digests-ab`` comparison."""
    from twinkle_agentic.jobs.preprocess import job

    start, gather = job.start_digests, job.gather_digests
    if not on:
        job.start_digests, job.gather_digests = (lambda sources, tasks: []), (lambda refs: [])
    try:
        yield
    finally:
        job.start_digests, job.gather_digests = start, gather


def child_job(
    corpus: str,
    config: str | None,
    output: str,
    cpus: int,
    batch_size: int | None,
    runs: int = 1,
    timeline: bool = False,
    digests_ab: bool = False,
) -> list[dict]:
    """The job ``runs`` times on one embedded cluster: the first pays the per-run start-up (worker
    processes importing Ray Data and the pipeline, Ray Data's own actors), later ones find it done,
    as jobs do on a long-lived driver (a notebook, a service) that runs one preprocess after another.
    With ``digests_ab`` every second run (the 2nd, 4th, ...) skips the input checksum pass."""
    from twinkle_agentic.jobs.preprocess.config import build_parser, resolve_config
    from twinkle_agentic.jobs.preprocess.job import connect, run

    argv = ["--input", corpus, "--output", output, "--num-cpus", str(cpus), "--no-progress", "--overwrite"]
    argv += (["--config", config] if config else []) + (
        ["--batch-size", str(batch_size)] if batch_size else []
    )
    cfg = resolve_config(build_parser().parse_args(argv))
    connect(None, num_cpus=cpus)  # start the cluster first: its start-up is not the job's work
    results = []
    for index in range(runs):
        digests = not (digests_ab and index % 2)
        store_before, started_before = object_store_mib(), worker_processes_started()
        report_cpu: list[float] = []
        with ClusterSampler() as cluster, reports_timed(report_cpu), input_digests(digests):
            time.sleep(0.5)
            cluster_start, cluster_start_cpu_s, cpu_start = cluster.snapshot(), cluster.cpu_s, _own_cpu_s()
            started = time.time()
            summary = run(cfg)
            # neither the sampler nor the reports written after the timed data work are the driver's
            driver_cpu_s = _own_cpu_s() - cpu_start - cluster.own_cpu_s - sum(report_cpu)
        store_after, started_after = object_store_mib(), worker_processes_started()
        results.append(
            {
                "rows": summary.rows_read,
                "kept": summary.kept,
                "seconds": summary.seconds,
                "input_digests": digests,
                "object_store_mib": {
                    "capacity": round(store_after["capacity"]),
                    "spilled": store_after["spilled"] - store_before["spilled"],
                    "restored": store_after["restored"] - store_before["restored"],
                },
                # the driver's own CPU plus every cluster process's (raylet, GCS, workers) during the run
                "cpu_s": driver_cpu_s + cluster.cpu_s - cluster_start_cpu_s,
                "worker_processes_started": None if started_after is None else started_after - started_before,
                "cpu_s_by_process": {
                    "driver": round(driver_cpu_s, 2),
                    "driver_reports": round(sum(report_cpu), 2),
                    **cluster.by_kind("cpu", cluster_start),
                    "bench_sampler": round(cluster.own_cpu_s, 2),
                },
                "kernel_cpu_s_by_process": cluster.by_kind("kernel", cluster_start),
                "minor_faults_by_process": cluster.by_kind("faults", cluster_start),
                "driver_peak_mb": _peak_rss_mb(),
                "workers_peak_total_mb": cluster.peak_total_mb,
                "workers_peak_single_mb": cluster.peak_single_mb,
                "workers_peak_pss_mb": cluster.peak_pss_mb,
            }
        )
        if timeline:
            import ray

            # the timed span only: the reports written after it (a chart) are not the job's data work
            results[-1]["timeline"] = timeline_summary(ray.timeline(), started, started + summary.seconds)
    return results


def _children(*arg_lists: list) -> list[dict]:
    """Run one child per argument list, all at once, and return their results in order."""
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO_ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )
        for args in arg_lists
    ]
    outputs = [proc.communicate() for proc in procs]
    results = []
    for args, proc, (stdout, stderr) in zip(arg_lists, procs, outputs, strict=True):
        lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(
                f"child {args[0]} failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}"
            )
        results.append(json.loads(lines[-1][len("RESULT ") :]))
    return results


def _child(args: list) -> dict:
    return _children(args)[0]


def make_corpus(work: Path, rows: int, seed: int) -> Path:
    corpus = work / f"corpus-{rows}-{seed}"
    if not (corpus / "manifest.json").exists():
        subprocess.run(
            [sys.executable, str(REPO_ROOT / "scripts" / "make_sample_data.py"), "--rows", str(rows), "--seed",
             str(seed), "--shards", str(SHARDS), "--out", str(corpus)],
            check=True, capture_output=True,
        )  # fmt: skip
    return corpus


def marginal_cpu(results: list[dict]) -> dict:
    """CPU seconds per extra row between the smallest and the largest corpus, per run kind: the
    steady-state cost without fixed start-up costs, and the job's efficiency on that margin."""
    lines, values = [], {}
    runs: dict[tuple, list[dict]] = {}
    for r in results:
        runs.setdefault((r["run"], r["cpus"], r.get("run_on_cluster", 1)), []).append(r)
    for key, rs in runs.items():
        rs = sorted(rs, key=lambda r: r["rows"])
        if len(rs) >= 2 and "cpu_s" in rs[0] and rs[-1]["rows"] > rs[0]["rows"]:
            # a pair of one-process runs processed every row twice: its CPU is per row processed
            copies = rs[0].get("copies", 1)
            per_row = (rs[-1]["cpu_s"] - rs[0]["cpu_s"]) / ((rs[-1]["rows"] - rs[0]["rows"]) * copies)
            values[f"{key[0]} {key[1]} CPU" + (f" #{key[2]}" if key[2] > 1 else "")] = per_row
    base = values.get("one-process 1 CPU")
    for name, per_row in values.items():
        share = (
            f", CPU efficiency on the margin {base / per_row:.0%}"
            if base and name != "one-process 1 CPU"
            else ""
        )
        lines.append(f"# marginal CPU per row, {name}: {per_row * 1e6:,.0f} us{share}")
    return {"lines": lines, "values": values}


def measure_pair(args: argparse.Namespace, corpus: Path, n: int, round_index: int, base_rate: float) -> dict:
    """Two one-process references at once, each on the whole corpus: their parallel efficiency
    (the one run alone's rows/s x 2 against the pair's) is what two CPUs of this machine give
    work with no coordination at all. Two processes at once share caches and memory bandwidth,
    and a virtual machine's two CPUs may share a physical core: a job's two-CPU shortfall that the
    pair shows too is the machine's, not the job's."""
    outputs = [str(args.work / f"out-pair-{n}-{side}") for side in "ab"]
    pair = _children(*(["baseline", str(corpus), args.config, out, False] for out in outputs))
    seconds = statistics.mean(p["seconds"] for p in pair)
    rate = 2 * pair[0]["rows"] / seconds
    efficiency = rate / (2 * base_rate)
    cpu_s = sum(p["cpu_s"] for p in pair)
    each = ", ".join(f"{p['seconds']:.1f} s" for p in pair)
    print(
        f"{pair[0]['rows']:>9,} {'2 at once':>13} {seconds:>8.1f} {rate:>8,.0f} {efficiency:>10.0%} "
        f"{cpu_s:>7.1f}   (each: {each})"
    )
    return {
        "rows": pair[0]["rows"],
        "run": "one-process x2 at once",
        "cpus": 2,
        "round": round_index,
        "seconds": seconds,
        "pair_seconds": [p["seconds"] for p in pair],
        "copies": 2,  # each of the two runs processed every row
        "cpu_s": cpu_s,
        "rows_per_s": rate,
        "efficiency": efficiency,
    }


def measure_size(args: argparse.Namespace, n: int, round_index: int) -> list[dict]:
    """One round at one corpus size: the two one-process references, DedupFilter alone, then the
    job with each ``--cpus``; every job's efficiency is against this round's references
    (``--job-only``: the job alone, no efficiency)."""
    results: list[dict] = []
    corpus = make_corpus(args.work, n, args.seed)
    rates: dict[bool, float] = {}
    paused_cpu_s = None
    for label, gc_off in () if args.job_only else (("one-process", False), ("1-proc GC off", True)):
        base = _child(["baseline", str(corpus), args.config, str(args.work / f"out-base-{n}"), gc_off])
        rates[gc_off] = base["rows"] / base["seconds"]
        if gc_off:
            paused_cpu_s = base["cpu_s"]
        run = "one-process GC paused" if gc_off else "one-process"
        results.append(
            {
                "rows": base["rows"],
                "run": run,
                "cpus": 1,
                "round": round_index,
                **base,
                "rows_per_s": rates[gc_off],
            }
        )
        print(
            f"{base['rows']:>9,} {label:>13} {base['seconds']:>8.1f} {rates[gc_off]:>8,.0f} {'':>10} "
            f"{base['cpu_s']:>7.1f} {'':>10} {base['driver_peak_mb']:>9,.0f}"
        )
    base_rate, paused_rate = rates.get(False), rates.get(True)
    if args.pair and base_rate:
        results.append(measure_pair(args, corpus, n, round_index, base_rate))
    if not args.job_only:
        dedup = _child(["dedup", str(corpus)])
        results.append(
            {
                "run": "DedupFilter",
                "cpus": 1,
                "round": round_index,
                **dedup,
                "rows_per_s": dedup["rows"] / dedup["seconds"],
            }
        )
        print(
            f"{dedup['rows']:>9,} {'DedupFilter':>13} {dedup['seconds']:>8.1f} "
            f"{dedup['rows'] / dedup['seconds']:>8,.0f}"
        )
    for cpus in args.cpus:
        jobs = _child(
            [
                "job",
                str(corpus),
                args.config,
                str(args.work / f"out-job-{n}-{cpus}"),
                cpus,
                args.batch_size,
                args.job_runs,
                args.timeline,
                args.digests_ab,
            ]
        )
        for run_index, job in enumerate(jobs, 1):
            timeline = job.pop("timeline", [])
            rate = job["rows"] / job["seconds"]
            result = {"run": "job", "cpus": cpus, "run_on_cluster": run_index, "round": round_index, **job,
                      "rows_per_s": rate}  # fmt: skip
            if base_rate:
                result["efficiency"] = rate / (base_rate * cpus)
                result["efficiency_like_for_like"] = rate / (paused_rate * cpus)
                result["cpu_efficiency"] = paused_cpu_s / job["cpu_s"]  # one process's CPU work / the job's
            results.append(result)
            label = f"job {cpus} CPU" + (f" #{run_index}" if len(jobs) > 1 else "")
            label += "" if job["input_digests"] else " -sha"
            print(
                f"{job['rows']:>9,} {label:>13} {job['seconds']:>8.1f} {rate:>8,.0f} "
                f"{_percent(result.get('efficiency')):>10} {job['cpu_s']:>7.1f} "
                f"{_percent(result.get('cpu_efficiency')):>10} {job['driver_peak_mb']:>9,.0f} "
                f"{job['workers_peak_total_mb']:>10,.0f} {_percent(result.get('efficiency_like_for_like')):>13} "
                f"{job['workers_peak_pss_mb']:>14,.0f}"
            )
            print(
                f"{'':>9} {'':>13} CPU seconds by process: {job['cpu_s_by_process']}; "
                f"worker processes started: {job.get('worker_processes_started')}"
            )
            store = job["object_store_mib"]
            print(
                f"{'':>9} {'':>13} object store: {store['capacity']:,} MiB; spilled {store['spilled']:,.0f} MiB, "
                f"restored {store['restored']:,.0f} MiB during the run"
            )
            faults = {kind: f"{n / 1000:,.0f}k" for kind, n in job["minor_faults_by_process"].items()}
            print(
                f"{'':>9} {'':>13} of them in the kernel: {job['kernel_cpu_s_by_process']}; "
                f"minor page faults: {faults}"
            )
            for line in timeline:
                print(f"{'':>9} {'':>13} {line}")
    return results


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _median_range(values: list[float]) -> tuple[str, str]:
    """(median, "low-high") of ratios, as percentages."""
    values = sorted(values)
    return f"{statistics.median(values):.0%}", f"{values[0]:.0%}-{values[-1]:.0%}"


def median_efficiencies(results: list[dict]) -> list[str]:
    """Per corpus size, CPUs and run on the cluster: the median efficiency over rounds, each
    round's job against that round's references; and the median of the two-at-once pairs."""
    groups: dict[tuple, list[dict]] = {}
    pairs: dict[int, list[float]] = {}
    for r in results:
        if r["run"] == "job" and "efficiency" in r:
            groups.setdefault((r["rows"], r["cpus"], r["run_on_cluster"]), []).append(r)
        elif r["run"] == "one-process x2 at once":
            pairs.setdefault(r["rows"], []).append(r["efficiency"])
    lines = []
    for (rows, cpus, run_on_cluster), rs in sorted(groups.items()):
        if len(rs) < 2:
            continue
        eff, eff_range = _median_range([r["efficiency"] for r in rs])
        like, like_range = _median_range([r["efficiency_like_for_like"] for r in rs])
        lines.append(
            f"# {rows:,} rows, job {cpus} CPU #{run_on_cluster}, {len(rs)} rounds: efficiency median "
            f"{eff} (range {eff_range}), like-for-like median {like} ({like_range})"
        )
    for rows, effs in sorted(pairs.items()):
        if len(effs) >= 2:
            eff, eff_range = _median_range(effs)
            lines.append(
                f"# {rows:,} rows, two one-process runs at once, {len(effs)} rounds: efficiency median "
                f"{eff} (range {eff_range})"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=int, nargs="+", default=[200_000, 1_000_000], help="base rows per corpus"
    )
    parser.add_argument("--cpus", type=int, nargs="+", default=[1, 2], help="CPUs of the embedded cluster")
    parser.add_argument("--config", help="pipeline YAML (default: the bundled default pipeline)")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument(
        "--job-runs",
        type=int,
        default=1,
        help="runs of the job per embedded cluster (#2 on: workers and Ray Data's actors already started)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat every measurement; each job is compared with its own round's references, and the "
        "medians over rounds are printed (the machine's speed drifts between runs)",
    )
    parser.add_argument(
        "--timeline", action="store_true", help="print each job run's tasks from ray.timeline() and idle gaps"
    )
    parser.add_argument(
        "--pair",
        action="store_true",
        help="also run two one-process references at once: the parallel efficiency this machine's CPUs "
        "give work with no coordination, to read the job's two-CPU efficiency against",
    )
    parser.add_argument(
        "--job-only",
        action="store_true",
        help="run the job alone, without the one-process references (no efficiency): for corpora whose "
        "rows one process cannot hold, to measure the job's memory and spilling at scale",
    )
    parser.add_argument(
        "--digests-ab",
        action="store_true",
        help="run every second job (#2, #4, ...) without the pass that checksums each input for "
        "stats.json: what that pass costs, side by side on one cluster (use --job-runs 5 or more)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/twinkle-bench-preprocess"))
    parser.add_argument("--record", type=Path, help="append a JSON record of the results to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        kind, *rest = json.loads(args.child)
        children = {"baseline": child_baseline, "dedup": child_dedup, "job": child_job}
        result = children[kind](*rest)
        print("RESULT " + json.dumps(result))
        return 0

    args.work.mkdir(parents=True, exist_ok=True)
    print(f"# load average before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    results = []
    header = (
        f"{'rows':>9} {'run':>13} {'seconds':>8} {'rows/s':>8} {'efficiency':>10} {'CPU s':>7} "
        f"{'CPU effic.':>10} {'driver MB':>9} {'workers MB':>10} {'like-for-like':>13} {'workers PSS MB':>14}"
    )
    print(header)
    for round_index in range(1, args.rounds + 1):
        for n in args.rows:
            if args.rounds > 1:
                print(f"# round {round_index} of {args.rounds}, {n:,} base rows")
            results += measure_size(args, n, round_index)
    print(f"# load average after: {os.getloadavg()[0]:.2f} (1 min)")
    for line in median_efficiencies(results):
        print(line)
    marginal = marginal_cpu([r for r in results if r.get("round", 1) == 1])
    for line in marginal["lines"]:
        print(line)
    record = {
        "marginal": marginal["values"],
        "bench": "preprocess_job",
        "params": {
            "rows": args.rows,
            "cpus": args.cpus,
            "config": args.config or "bundled default",
            "seed": args.seed,
            "job_runs": args.job_runs,
            "rounds": args.rounds,
            "pair": args.pair,
            "job_only": args.job_only,
            "digests_ab": args.digests_ab,
        },
        "git_sha": git_sha(),
        "results": results,
    }
    emit_record(record, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
