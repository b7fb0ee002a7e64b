"""OpenEnv adapter steps/s: our ``OpenEnv`` (own blocking websockets client) vs openenv's own
``GenericEnvClient(...).sync()``, on the same real echo server (scaffolded by ``openenv init``).

Each round steps one session ``--steps`` times per client, alternating clients round by round so
machine noise hits both alike; the table shows the median steps/s per client and the ratio
ours / openenv (target >= 0.9). Also measured: ``OpenEnv(env_cls=GenericEnvClient)``, the adapter
driving openenv's client, to show the cost of the adapter layer itself.

Run: python bench/openenv_adapter.py [--steps 500] [--rounds 5] [--record FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.records import emit_record, git_sha  # noqa: E402
from twinkle_agentic.envs.openenv import OpenEnv  # noqa: E402
from twinkle_agentic.net import free_port  # noqa: E402
from twinkle_agentic.testing.openenv_echo import scaffold_echo_env, start_echo_server  # noqa: E402

MESSAGE = "hello from the benchmark"
GENERIC_CLIENT = "openenv.core.generic_client.GenericEnvClient"


def echo_action(tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return arguments


def run_ours(url: str, steps: int, env_cls: str | None = None) -> float:
    env = OpenEnv(url, env_cls=env_cls, action_mapper=echo_action)
    env.reset()
    started = time.perf_counter()
    for _ in range(steps):
        result = env.step("echo", {"message": MESSAGE})
    elapsed = time.perf_counter() - started
    env.close()
    assert result.observation == MESSAGE, result
    return steps / elapsed


def run_openenv(url: str, steps: int) -> float:
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=url).sync() as client:
        client.reset()
        started = time.perf_counter()
        for _ in range(steps):
            result = client.step({"message": MESSAGE})
        elapsed = time.perf_counter() - started
    assert result.observation["echoed_message"] == MESSAGE, result
    return steps / elapsed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--record", type=Path, help="append the JSON record to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-openenv-") as tmp:
        server = start_echo_server(scaffold_echo_env(tmp, max_concurrent_envs=2), free_port())
        try:
            runs: dict[str, list[float]] = {"ours": [], "openenv": [], "ours(env_cls=GenericEnvClient)": []}
            run_ours(server.url, 50)
            run_openenv(server.url, 50)  # warm-up, and openenv's (heavy) import
            for _ in range(args.rounds):
                runs["ours"].append(run_ours(server.url, args.steps))
                runs["openenv"].append(run_openenv(server.url, args.steps))
                runs["ours(env_cls=GenericEnvClient)"].append(run_ours(server.url, args.steps, GENERIC_CLIENT))
        finally:
            server.stop()
    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(f"\n{'client':<34}{'median steps/s':>16}{'vs openenv':>12}")
    for name, value in medians.items():
        print(f"{name:<34}{value:>16.0f}{value / medians['openenv']:>12.2f}")
    record = {"bench": "openenv_adapter", "git_sha": git_sha(), "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
              "params": {"steps": args.steps, "rounds": args.rounds},
              "results": {name: {"median_steps_per_s": round(medians[name], 1), "runs": [round(v, 1) for v in values],
                                 "ratio_vs_openenv": round(medians[name] / medians["openenv"], 3)}
                          for name, values in runs.items()}}
    emit_record(record, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
