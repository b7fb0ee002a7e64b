#!/usr/bin/env python
"""Training steps per hour of the reference GRPO loop, synchronous vs overlapped, with heavy-tailed
tool latency; and whether the learning curve per step is worse with the overlap.

    python bench/grpo_overlap.py [--rounds 3] [--steps 10] [--seed 0] [--max-staleness 1]
                                 [--tool-latency lognormal:median=0.3,sigma=1.0] [--mode async] [--run-steps 1]
                                 [--on-update abort_and_resume]
                                 [--output /tmp/grpo_overlap] [--json-out bench/results/grpo_overlap.jsonl]

Each round runs ``examples/grpo/train.py`` twice as subprocesses, one after the other, with the same
seed and the same latency model (each call's delay is fixed by the seed and the call, so both runs
wait the same for the same call): ``sync`` (roll out, train, push, in turn) and ``overlap``
(``--overlap --max-staleness N --run-steps K --on-update MODE``). The order alternates between rounds so neither run always goes
first on a machine whose load drifts.

From each run's ``metrics.jsonl``: **steps per hour** = 3600 x (steps after the first two) / (their
wall time, ``rollout_s + train_s + update_s + mismatch_s``), the steady rate: the first two steps are left out
because the overlapped run puts both into its farm run at the start (its step 1 then costs no wait) and
both runs wait for the whole first rollout; and the mean reward per step (its first-3 / last-3
means and their change).
Per round the ratio overlap / sync of steps per hour; the figures reported are the medians over the
rounds, and the pooled ratio (all timed steps over all their time, per run kind). ``tool max`` is the
mean over a run's timed steps of its slowest call's delay: the two runs of a round sample different
calls after the first step, so their delays are drawn apart. The goal (issue 34): ratio >= 1.5 at
staleness <= 1, with the overlapped run's reward change not below the synchronous run's by more than the noise of a step (``--noise``, 0.065: one standard
deviation of a first-3 to last-3 change, measured in docs/bench/grpo.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.grpo_learning import WINDOW, run_example  # noqa: E402
from bench.records import emit_record, git_sha  # noqa: E402

GOAL_RATIO = 1.5
WARMUP = 2  # steps left out of the rate: the overlap starts steps 0 and 1 together
NOISE = 0.065  # one standard deviation of a first-3 to last-3 change (docs/bench/grpo.md)
PHASES = ("rollout_s", "train_s", "update_s", "mismatch_s")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="paired rounds (default 3)")
    p.add_argument("--steps", type=int, default=10, help="steps per run (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of every run (default 0)")
    p.add_argument("--max-staleness", type=int, default=1, help="of the overlapped runs (default 1)")
    p.add_argument(
        "--tool-latency",
        default="lognormal:median=0.3,sigma=1.0",
        help="the example's --tool-latency (default lognormal:median=0.3,sigma=1.0)",
    )
    p.add_argument("--run-steps", type=int, default=1, help="of the overlapped runs (default 1)")
    p.add_argument(
        "--on-update",
        choices=("abort_and_resume", "finish"),
        default="abort_and_resume",
        help="of the overlapped runs: what a weight update does to trajectories in flight (default abort_and_resume)",
    )
    p.add_argument(
        "--mode", choices=("sync", "async"), default="async", help="the example's --mode (default async)"
    )
    p.add_argument(
        "--overlap-trainer-threads",
        type=int,
        default=None,
        help="the overlapped runs' --trainer-threads (default: torch's; the synchronous runs always use it)",
    )
    p.add_argument(
        "--overlap-nice",
        type=int,
        default=None,
        help="the overlapped runs' --trainer-nice (default: the example's, 10; the synchronous runs' is 0)",
    )
    for mode in ("sync", "overlap"):
        p.add_argument(
            f"--{mode}-omp-wait",
            choices=("auto", "active", "passive", "bounded"),
            default="auto",
            help=f"the {mode} runs' --trainer-omp-wait (default auto: the example's, bounded for sync, passive "
            "for overlap)",
        )
    p.add_argument("--noise", type=float, default=NOISE, help="allowed shortfall of the reward change")
    p.add_argument("--output", type=Path, default=Path("/tmp/grpo_overlap"), help="runs and record")
    p.add_argument("--run-timeout", type=float, default=600, help="seconds before a run is stopped")
    p.add_argument("--json-out", default=None, help="also append the record as one line to this file")
    return p


# -- pure helpers ----------------------------------------------------------------------------------


def steps_per_hour(lines: list[dict[str, Any]]) -> float:
    """3600 x steps / their wall time, over the steps after the first ``WARMUP``."""
    timed = lines[WARMUP:]
    if not timed:
        raise ValueError(f"steps per hour needs more than {WARMUP} steps (the first {WARMUP} are left out)")
    wall = sum(sum(line[key] for key in PHASES) for line in timed)
    return 3600.0 * len(timed) / wall


def summarise(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps per hour, mean seconds per phase, the reward curve and its first-3 / last-3 change."""
    if len(lines) < 2 * WINDOW:
        raise ValueError(f"{len(lines)} steps; the reward change needs at least {2 * WINDOW}")
    rewards = [line["mean_reward"] for line in lines]
    if any(math.isnan(r) for r in rewards):
        raise ValueError("a step without a scored trajectory (mean_reward NaN)")
    first, last = statistics.fmean(rewards[:WINDOW]), statistics.fmean(rewards[-WINDOW:])
    return {
        "steps": len(lines),
        "steps_per_hour": steps_per_hour(lines),
        **{key: statistics.fmean(line[key] for line in lines[WARMUP:]) for key in PHASES},
        "tool_wait_max_s": statistics.fmean(line.get("tool_wait_max_s", 0.0) for line in lines[WARMUP:]),
        "timed_steps": len(lines) - WARMUP,
        "timed_s": sum(sum(line[key] for key in PHASES) for line in lines[WARMUP:]),
        "rewards": rewards,
        "mean_reward": statistics.fmean(rewards),
        "first3": first,
        "last3": last,
        "change": last - first,
        "max_staleness_seen": max((line.get("staleness", 0) for line in lines), default=0),
        "stale_groups": sum(line.get("stale_groups", 0) for line in lines),
        "failed_groups": sum(line["failed_groups"] for line in lines),
    }


def pooled_step_s(rounds: list[dict[str, dict[str, Any]]], mode: str) -> float:
    """Seconds per timed step of one run kind, over all the rounds' timed steps."""
    return sum(r[mode]["timed_s"] for r in rounds) / sum(r[mode]["timed_steps"] for r in rounds)


def equal_delay_ratio(rounds: list[dict[str, dict[str, Any]]], max_staleness: int) -> float:
    """The pooled ratio as if both kinds had drawn the same tool delays (an estimate: their runs sample
    different calls). A synchronous step waits for its slowest call; with the farm ``max_staleness``
    steps ahead a step's wait on it is shared by ``max_staleness + 1`` steps. Each kind's mean step is
    moved by that share of the gap between its mean tool max and the two kinds' mean."""
    step, tool = {}, {}
    for mode in ("sync", "overlap"):
        step[mode] = pooled_step_s(rounds, mode)
        steps = sum(r[mode]["timed_steps"] for r in rounds)
        tool[mode] = sum(r[mode]["tool_wait_max_s"] * r[mode]["timed_steps"] for r in rounds) / steps
    common = statistics.fmean(tool.values())
    sync = step["sync"] + common - tool["sync"]
    overlap = step["overlap"] + (common - tool["overlap"]) / (max_staleness + 1)
    return sync / overlap


def verdict(rounds: list[dict[str, dict[str, Any]]], max_staleness: int, noise: float) -> dict[str, Any]:
    """Medians over the rounds and the goal: ratio >= 1.5 at staleness <= 1, change not worse."""
    ratios = [r["overlap"]["steps_per_hour"] / r["sync"]["steps_per_hour"] for r in rounds]
    median = {
        mode: {
            key: statistics.median(r[mode][key] for r in rounds)
            for key in ("steps_per_hour", "change", "tool_wait_max_s", *PHASES)
        }
        for mode in ("sync", "overlap")
    }
    ratio = statistics.median(ratios)
    learning_ok = median["overlap"]["change"] >= median["sync"]["change"] - noise
    return {
        "ratios": ratios,
        "ratio": ratio,
        "pooled_ratio": pooled_step_s(rounds, "sync") / pooled_step_s(rounds, "overlap"),
        "equal_delay_ratio": equal_delay_ratio(rounds, max_staleness),
        "median": median,
        "learning_not_worse": learning_ok,
        "goal_met": ratio >= GOAL_RATIO and max_staleness <= 1 and learning_ok,
    }


def curves(rounds: list[dict[str, dict[str, Any]]]) -> str:
    """Mean reward per step of each run kind, averaged over the rounds."""
    rows = []
    for mode in ("sync", "overlap"):
        per_step = zip(*(r[mode]["rewards"] for r in rounds), strict=True)
        rows.append(f"{mode:>8} " + " ".join(f"{statistics.fmean(values):.3f}" for values in per_step))
    return "mean reward per step (mean over the rounds):\n" + "\n".join(rows)


def table(rounds: list[dict[str, dict[str, Any]]]) -> str:
    rows = [
        f"{'round':>5} {'run':>8} {'steps/h':>8} {'rollout':>8} {'train':>7} {'update':>7} {'mismatch':>8} "
        f"{'tool max':>8} {'first3':>7} {'last3':>7} {'change':>7} {'stale':>5} {'ratio':>6}"
    ]
    for i, r in enumerate(rounds):
        ratio = r["overlap"]["steps_per_hour"] / r["sync"]["steps_per_hour"]
        for mode in ("sync", "overlap"):
            s = r[mode]
            rows.append(
                f"{i:>5} {mode:>8} {s['steps_per_hour']:>8.0f} {s['rollout_s']:>7.2f}s {s['train_s']:>6.2f}s "
                f"{s['update_s']:>6.2f}s {s['mismatch_s']:>7.2f}s {s['tool_wait_max_s']:>7.2f}s {s['first3']:>7.3f} {s['last3']:>7.3f} {s['change']:>+7.3f} "
                f"{s['max_staleness_seen']:>5} {ratio if mode == 'overlap' else math.nan:>6.2f}"
            )
    return "\n".join(rows)


def omp_wait(wait: str) -> list[str]:
    """The example's ``--trainer-omp-wait`` argument, none for its own default (``auto``)."""
    return [] if wait == "auto" else ["--trainer-omp-wait", wait]


def option(name: str, value: int | None) -> list[str]:
    """The example's ``name value`` argument, none for its own default (``None``)."""
    return [] if value is None else [name, str(value)]


def runs_of_round(index: int, args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """The two runs of round ``index`` (their order alternates between rounds)."""
    common = ["--steps", str(args.steps), "--tool-latency", args.tool_latency, "--mode", args.mode]
    runs = [
        ("sync", [*common, *omp_wait(args.sync_omp_wait)]),
        (
            "overlap",
            [
                *common,
                "--overlap",
                "--max-staleness",
                str(args.max_staleness),
                "--run-steps",
                str(args.run_steps),
                "--on-update",
                args.on_update,
                *omp_wait(args.overlap_omp_wait),
                *option("--trainer-threads", args.overlap_trainer_threads),
                *option("--trainer-nice", args.overlap_nice),
            ],
        ),
    ]
    return runs if index % 2 == 0 else runs[::-1]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 2 * WINDOW:
        raise SystemExit(f"--steps {args.steps}: the reward change needs at least {2 * WINDOW} steps")
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    args.output.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    rounds: list[dict[str, dict[str, Any]]] = []
    for index in range(args.rounds):
        summaries: dict[str, dict[str, Any]] = {}
        for mode, extra in runs_of_round(index, args):
            lines, wall = run_example(f"round{index}/{mode}", extra, args)
            summaries[mode] = {**summarise(lines), "wall_s": wall, "metrics": lines}
        rounds.append(summaries)
        print(table(rounds), flush=True)
    result = verdict(rounds, args.max_staleness, args.noise)
    print(table(rounds))
    print(curves(rounds))
    med = result["median"]
    print(
        f"median over {args.rounds} rounds: sync {med['sync']['steps_per_hour']:.0f} steps/h, overlap "
        f"{med['overlap']['steps_per_hour']:.0f} steps/h, ratio {result['ratio']:.2f} (goal {GOAL_RATIO}; "
        f"pooled over the rounds {result['pooled_ratio']:.2f}, at equal tool delays {result['equal_delay_ratio']:.2f}); "
        f"reward change sync {med['sync']['change']:+.3f}, overlap {med['overlap']['change']:+.3f} "
        f"(not worse: {result['learning_not_worse']}); goal {'MET' if result['goal_met'] else 'NOT MET'}"
    )
    record = {
        "bench": "grpo_overlap",
        "params": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "load_avg_start": load_start,
            "load_avg_end": os.getloadavg(),
        },
        "git_sha": git_sha(),
        "results": {"rounds": rounds, **result},
    }
    (args.output / "grpo_overlap.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(f"# record written to {args.output / 'grpo_overlap.json'}")
    if args.json_out:
        emit_record(record, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
