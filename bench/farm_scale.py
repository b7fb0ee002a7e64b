"""The rollout farm's driver at scale: the real ``RolloutFarm`` (``actors/driver.py``) drives 1,000
simulated engines (``bench/sim_ray.py``: Ray's calls on a virtual clock, workers that answer after a
modelled latency) through 100k and 1M trajectories; reports the driver's CPU per trajectory and its
memory, each size in a fresh process.

    python bench/farm_scale.py --json-out bench/results/farm_scale.jsonl

See docs/bench/farm_scale.md for what is measured and what the simulation leaves out.
"""

from __future__ import annotations

import argparse
import heapq
import importlib.util
import json
import random
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.records import child_record, emit_record, git_sha  # noqa: E402
from bench.sim_ray import SimRay  # noqa: E402


class SimWorker:
    """A rollout worker without an engine: a batch "takes" ``latency_s`` x lognormal(0, ``jitter``) of
    virtual time, and up to ``concurrency`` of its calls run at once (1: one batch at a time, as the
    synchronous mode does). It answers with new trajectory dicts, as deserialised results would be."""

    latency_s = 20.0
    jitter = 0.5
    concurrency = 1
    start_s = 30.0
    _seeds = iter(range(1, 1 << 30))

    @staticmethod
    def ray_options(cfg: Any) -> dict[str, Any]:
        return {}

    def __init__(self, engine: Any, spec: Any, weights: Any = None, policy_version: int = 0):
        self.policy_version = policy_version
        self._rng = random.Random(next(SimWorker._seeds))
        self._lanes = [0.0] * self.concurrency

    def latency(self, method: str, args: tuple) -> float:
        if method == "ready":
            return self.start_s * (0.5 + self._rng.random())
        if method == "run_batch":
            return self.latency_s * self._rng.lognormvariate(0.0, self.jitter)
        return 0.001

    def schedule(self, now: float, duration: float) -> float:
        """When a call arriving at ``now`` finishes: on the lane that frees first."""
        start = max(now, heapq.heappop(self._lanes))
        heapq.heappush(self._lanes, start + duration)
        return start + duration

    def ready(self) -> dict[str, Any]:
        return {"policy_version": self.policy_version, "pid": 0, "device": "simulated"}

    def run_batch(self, batch: list[dict]) -> Any:
        from twinkle_agentic.actors.activity import Activity
        from twinkle_agentic.actors.worker import BatchResult

        out = [{**t, "stop_reason": "stop", "policy_version": self.policy_version} for t in batch]
        return BatchResult(out, Activity(), 16 * len(out))

    def shutdown(self) -> None:
        pass


def load_driver(path: str | None) -> Any:
    """``actors/driver.py`` as installed, or another version of the file (for before/after runs)."""
    if path is None:
        from twinkle_agentic.actors import driver

        return driver
    import twinkle_agentic.actors  # noqa: F401  (the package its relative imports resolve in)

    spec = importlib.util.spec_from_file_location("twinkle_agentic.actors._driver_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def prompts(n: int):
    """``n`` trajectories, made as they are pulled (the farm sees an iterator, not a list)."""
    for i in range(n):
        yield {"trajectory_id": i, "messages": [{"role": "user", "content": f"prompt {i}"}]}


def simulate(
    n: int,
    *,
    engines: int,
    batch_size: int,
    inflight: int,
    latency_s: float = 20.0,
    jitter: float = 0.5,
    concurrency: int = 1,
    trace_memory: bool = False,
    driver_path: str | None = None,
) -> dict[str, Any]:
    """Run ``n`` trajectories through a farm of ``engines`` simulated workers; check every one comes
    back exactly once and return the driver's figures."""
    from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutSpec

    driver = load_driver(driver_path)
    SimWorker.latency_s, SimWorker.jitter, SimWorker.concurrency = latency_s, jitter, concurrency
    seen = bytearray(n)
    sim = SimRay()
    options = FarmOptions(engines=engines, batch_size=batch_size, inflight_per_worker=inflight)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if trace_memory:
        tracemalloc.start()
    batches = 0
    with sim.install():
        farm = driver.RolloutFarm(EngineConfig("simulated"), RolloutSpec(), options, worker_cls=SimWorker)
        farm.start()
        started_at = sim.now
        cpu, wall, inside = time.process_time(), time.perf_counter(), sim.inside_cpu_s
        for finished in farm.run(prompts(n)):
            batches += 1
            for trajectory in finished.trajectories:
                index = trajectory["trajectory_id"]
                if seen[index]:
                    raise AssertionError(f"trajectory {index} came back twice")
                seen[index] = 1
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        inside = sim.inside_cpu_s - inside
        virtual_s = sim.now - started_at
        farm.shutdown()
    traced_peak = tracemalloc.get_traced_memory()[1] if trace_memory else None
    if trace_memory:
        tracemalloc.stop()
    missing = n - seen.count(1)
    if missing:
        raise AssertionError(f"{missing} trajectories did not come back")
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    driver_cpu = cpu - inside
    return {
        "trajectories": n,
        "engines": engines,
        "batch_size": batch_size,
        "inflight_per_worker": inflight,
        "concurrency": concurrency,
        "latency_s": latency_s,
        "jitter": jitter,
        "batches": batches,
        "driver_cpu_s": round(driver_cpu, 3),
        "driver_cpu_us_per_trajectory": round(driver_cpu / n * 1e6, 2),
        "sim_cpu_s": round(inside, 3),
        "wall_s": round(wall, 3),
        "virtual_s": round(virtual_s, 1),
        "trajectories_per_virtual_s": round(n / virtual_s, 1) if virtual_s else None,
        "driver_busy": round(driver_cpu / virtual_s, 4) if virtual_s else None,
        "peak_rss_mb": round(rss_peak / 1024, 1),
        "rss_growth_mb": round((rss_peak - rss_before) / 1024, 1),
        "tracemalloc_peak_mb": round(traced_peak / 2**20, 2) if traced_peak is not None else None,
        "max_refs_per_wait": sim.max_wait_refs,
        "ray_calls_per_trajectory": {k: round(v / n, 4) for k, v in sim.calls.items()},
    }


def child(args: argparse.Namespace, n: int, trace: bool) -> dict[str, Any]:
    """One size in a fresh interpreter, so peak RSS is that run's alone."""
    command = [
        sys.executable, __file__, "--child", str(n), "--engines", str(args.engines), "--batch-size", str(args.batch_size),
        "--inflight", str(args.inflight), "--latency-s", str(args.latency_s), "--jitter", str(args.jitter),
        "--concurrency", str(args.concurrency),
    ]  # fmt: skip
    if trace:
        command.append("--trace-memory")
    if args.driver:
        command += ["--driver", args.driver]
    return child_record(command, f"{n:,} trajectories")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000", help="trajectory counts, comma-separated")
    parser.add_argument("--engines", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--inflight", type=int, default=2, help="inflight_per_worker (batches)")
    parser.add_argument("--latency-s", type=float, default=20.0, help="median virtual seconds per batch")
    parser.add_argument("--jitter", type=float, default=0.5, help="sigma of the lognormal latency factor")
    parser.add_argument("--concurrency", type=int, default=1, help="calls a simulated worker runs at once")
    parser.add_argument("--no-trace", action="store_true", help="skip the second run under tracemalloc")
    parser.add_argument("--driver", help="another driver.py to measure (e.g. an earlier revision)")
    parser.add_argument("--json-out", help="append the record to this JSON Lines file")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--trace-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(simulate(
            args.child, engines=args.engines, batch_size=args.batch_size, inflight=args.inflight,
            latency_s=args.latency_s, jitter=args.jitter, concurrency=args.concurrency,
            trace_memory=args.trace_memory, driver_path=args.driver,
        )))  # fmt: skip
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        row = child(args, n, trace=False)
        if not args.no_trace:
            row["tracemalloc_peak_mb"] = child(args, n, trace=True)["tracemalloc_peak_mb"]
        rows.append(row)
        print(
            f"{n:>9,} trajectories: driver {row['driver_cpu_us_per_trajectory']:.1f} us/trajectory, "
            f"peak RSS {row['peak_rss_mb']:.0f} MB (+{row['rss_growth_mb']:.1f} MB in the run), "
            f"tracemalloc peak {row['tracemalloc_peak_mb']} MB, simulation {row['sim_cpu_s']:.1f} s, "
            f"wall {row['wall_s']:.1f} s",
            file=sys.stderr,
        )
    emit_record({"bench": "farm_scale", "git": git_sha(), "driver": args.driver or "actors/driver.py", "rows": rows}, args.json_out)


if __name__ == "__main__":
    main()
