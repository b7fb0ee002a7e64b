"""The rollout job's driver side at scale: ``jobs/rollout/job.py::run`` itself on 100k and 1M prompts,
with the cluster, the services and the farm replaced by stand-ins (the farm reads its input in
batches and answers each at once with finished trajectories), resuming a journal that already holds
a tenth of them. Reports the driver's CPU per trajectory and its peak memory, each size in a fresh
process; ``--code CHECKOUT`` measures another checkout's rollout job (e.g. a ``git worktree`` of an
earlier commit) on the same files.

    python bench/rollout_job_scale.py --json-out bench/results/rollout_job_scale.jsonl
    git worktree add /tmp/old <sha> && python bench/rollout_job_scale.py --code /tmp/old ...

See docs/bench/farm_scale.md ("The rollout job's driver side") for what is measured and left out.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.records import child_record, emit_record, git_sha  # noqa: E402

REPEAT_EVERY = 100  # every 100th row repeats an earlier one: ids with ~2, ~3
BATCH = 32


def config(prompts: Path, output: Path, samples: int) -> Any:
    from twinkle_agentic.jobs.rollout.config import config_from_mapping

    mapping: dict[str, Any] = {"prompts": str(prompts), "output": str(output), "progress": False}
    if samples > 1:
        mapping.update(samples_per_prompt=samples, sampling={"temperature": 1.0})
    return config_from_mapping(mapping).validate()


def make_data(folder: Path, n: int, samples: int, done_share: float) -> None:
    """``prompts.jsonl`` (``n`` rows, no ``id``: content-hash ids) and ``done/``, an output directory whose
    journal holds the first ``done_share`` of the groups, as an interrupted run leaves it."""
    from twinkle_agentic.jobs.rollout.journal import Journal
    from twinkle_agentic.jobs.rollout.prompts import check_prompts

    folder.mkdir(parents=True, exist_ok=True)
    prompts = folder / "prompts.jsonl"
    with open(prompts, "w", encoding="utf-8") as handle:
        for i in range(n):
            k = i - REPEAT_EVERY // 2 if i % REPEAT_EVERY == REPEAT_EVERY - 1 else i
            row = {"messages": [{"role": "user", "content": f"Question {k}: what is {k} times 7?"}], "user_data": {"answer": 7 * k}}
            handle.write(json.dumps(row) + "\n")
    done = folder / "done"
    shutil.rmtree(done, ignore_errors=True)
    cfg = config(prompts, done, samples)
    journal, _ = Journal.open(str(done), cfg.fingerprint(), overwrite=True)
    for index, group in enumerate(check_prompts(str(prompts), None, samples).groups()):
        if index >= done_share * n:
            break
        journal.append([finished(t) for t in group])
    journal.close()


def finished(trajectory: dict[str, Any]) -> dict[str, Any]:
    """What a worker sends back for a trajectory: its input plus tokens, a reward and the stop reason."""
    return {
        **trajectory, "input_ids": list(range(24)), "labels": [-100] * 16 + list(range(16, 24)),
        "logprobs": [-0.5] * 8, "stop_reason": "stop", "policy_version": 0, "reward": float(len(trajectory["trajectory_id"]) % 2),
    }  # fmt: skip


class EchoFarm:
    """Stands in for ``RolloutFarm``: ``run`` reads its input ``BATCH`` at a time and yields each batch at
    once, finished; the CPU it spends making results is kept apart (``cpu_s``) to be left out."""

    cpu_s = 0.0

    def __init__(self, engine: Any, spec: Any, options: Any):
        self.restarts = self.given_up = 0

    def start(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def run(self, trajectories: Any) -> Any:
        from twinkle_agentic.actors.activity import Activity
        from twinkle_agentic.actors.driver import FarmBatch

        items = iter(trajectories)
        while True:
            batch = [t for _, t in zip(range(BATCH), items, strict=False)]
            if not batch:
                return
            t0 = time.process_time()
            out = [finished(t) for t in batch]
            EchoFarm.cpu_s += time.process_time() - t0
            yield FarmBatch(out, Activity(), 8 * len(out), 0, 1)


class Stand:
    """The cluster and the services the job would start: nothing to start."""

    embedded = False
    catalog = None
    urls: dict[str, str] = {}

    def summary(self) -> str:
        return "stand-in"

    def wait_ready(self) -> None:
        pass

    def teardown(self) -> None:
        pass


def load_job(code: str | None) -> Any:
    """``twinkle_agentic.jobs.rollout.job`` from this checkout, or from ``code`` (another checkout's jobs/)."""
    if code:
        import twinkle_agentic.jobs

        twinkle_agentic.jobs.__path__.insert(0, str(Path(code) / "jobs"))
    from twinkle_agentic.actors import driver
    from twinkle_agentic.jobs.rollout import job, services

    if code and not job.__file__.startswith(str(Path(code))):
        raise SystemExit(f"{job.__file__} is not from {code}")
    job.demand = lambda cfg: None
    job.connect = lambda cfg, needs: Stand()
    job.check_schedulable = lambda *args: None
    job.cluster_capacity = lambda: None
    services.deploy = lambda cfg, embedded: Stand()
    driver.RolloutFarm = EchoFarm
    return job


def measure(folder: Path, n: int, samples: int, code: str | None, trace: bool) -> dict[str, Any]:
    job = load_job(code)
    output = folder / ("run-old" if code else "run-new")
    shutil.rmtree(output, ignore_errors=True)
    shutil.copytree(folder / "done", output)
    cfg = config(folder / "prompts.jsonl", output, samples)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if trace:
        tracemalloc.start()
    cpu, wall = time.process_time(), time.perf_counter()
    summary = job.run(cfg)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = tracemalloc.get_traced_memory()[1] if trace else None
    if trace:
        tracemalloc.stop()
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    shutil.rmtree(output, ignore_errors=True)
    planned = n * samples
    if summary.total_in_output != planned or summary.tally.trajectories + summary.resumed != planned:
        raise AssertionError(
            f"{summary.total_in_output} trajectories in the output, {summary.tally.trajectories} run + "
            f"{summary.resumed} resumed; {planned} planned"
        )
    driver_cpu = cpu - EchoFarm.cpu_s
    return {
        "prompts": n,
        "samples_per_prompt": samples,
        "trajectories": planned,
        "resumed": summary.resumed,
        "run": summary.tally.trajectories,
        "driver_cpu_s": round(driver_cpu, 3),
        "driver_cpu_us_per_trajectory": round(driver_cpu / planned * 1e6, 2),
        "stand_in_farm_cpu_s": round(EchoFarm.cpu_s, 3),
        "wall_s": round(wall, 3),
        "peak_rss_mb": round(rss_peak / 1024, 1),
        "rss_growth_mb": round((rss_peak - rss_before) / 1024, 1),
        "tracemalloc_peak_mb": round(peak / 2**20, 2) if peak is not None else None,
    }


def child(args: argparse.Namespace, folder: Path, n: int, trace: bool) -> dict[str, Any]:
    """One measurement in a fresh interpreter, so peak RSS is that run's alone."""
    command = [sys.executable, __file__, "--child", str(n), "--data", str(folder), "--samples", str(args.samples)]
    if trace:
        command.append("--trace-memory")
    if args.code:
        command += ["--code", args.code]
    return child_record(command, f"{n:,} prompts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000", help="prompt counts, comma-separated")
    parser.add_argument("--samples", type=int, default=1, help="samples_per_prompt")
    parser.add_argument("--done-share", type=float, default=0.1, help="share of the groups already in the journal")
    parser.add_argument("--data", default="/tmp/rollout_job_scale", help="folder for the prompts files and journals")
    parser.add_argument("--keep-data", action="store_true", help="reuse prompts files made by an earlier run")
    parser.add_argument("--code", help="another checkout whose jobs/rollout to measure (e.g. a git worktree)")
    parser.add_argument("--no-trace", action="store_true", help="skip the second run under tracemalloc")
    parser.add_argument("--json-out", help="append the record to this JSON Lines file")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--trace-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(Path(args.data), args.child, args.samples, args.code, args.trace_memory)))
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        folder = Path(args.data) / f"{n}x{args.samples}"
        if not (args.keep_data and (folder / "done").exists()):
            make_data(folder, n, args.samples, args.done_share)
        row = child(args, folder, n, trace=False)
        if not args.no_trace:
            row["tracemalloc_peak_mb"] = child(args, folder, n, trace=True)["tracemalloc_peak_mb"]
        rows.append(row)
        print(
            f"{n:>9,} prompts: driver {row['driver_cpu_us_per_trajectory']:.1f} us/trajectory, peak RSS "
            f"{row['peak_rss_mb']:.0f} MB (+{row['rss_growth_mb']:.1f} MB in the run), tracemalloc peak "
            f"{row['tracemalloc_peak_mb']} MB, wall {row['wall_s']:.1f} s",
            file=sys.stderr,
        )
    emit_record(
        {"bench": "rollout_job_scale", "git": git_sha(), "code": args.code or "this checkout", "rows": rows},
        args.json_out,
    )


if __name__ == "__main__":
    main()
