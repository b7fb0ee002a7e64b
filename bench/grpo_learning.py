#!/usr/bin/env python
"""Does the reference GRPO loop learn? The example with weight updates against its control, and the
engine/trainer mismatch of a bfloat16 engine against a float32 one.

    python bench/grpo_learning.py [--steps 30] [--seed 0] [--output /tmp/grpo_learning]
                                  [--bf16-steps 8] [--tis-cap 2] [--plot docs/bench/grpo_learning.png]
                                  [--json-out bench/results/grpo_learning.jsonl]

Runs ``examples/grpo/train.py`` as subprocesses, one after the other, each with its own embedded Ray
cluster, engine and Serve deployment:

* ``update``: ``--steps`` steps with the seed, weights pushed to the engine after every step;
* ``control``: the same with ``--no-update`` (the engine keeps the initial weights);
* ``bf16``: ``--bf16-steps`` steps with updates and ``--engine-dtype bfloat16``;
* ``bf16_tis``: the same with ``--tis-cap`` (skipped with ``--tis-cap 0``).

From each run's ``metrics.jsonl``: the mean reward of the first 3 and the last 3 steps and their
change, the mean seconds per step in rollout, train and update, and the medians over steps of
``mismatch_mean_abs`` and ``mismatch_p99_abs``. The criterion (issue 34): the update run's change
is at least 0.10 and at least twice the control's. Writes each run's metrics and log under
``--output``, the plot of mean reward per step (update vs control) to ``--plot``, and the record to
``--output``/grpo_learning.json (and appended to ``--json-out``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records import emit_record, git_sha  # noqa: E402

EXAMPLE = ROOT / "examples" / "grpo" / "train.py"
WINDOW = 3  # steps averaged at each end of a run
MIN_CHANGE = 0.10  # the update run's change must reach this ...
CONTROL_FACTOR = 2.0  # ... and this multiple of the control's change
TIMINGS = ("rollout_s", "train_s", "update_s", "mismatch_s")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="steps of the update and control runs (default 30)")
    p.add_argument("--seed", type=int, default=0, help="seed passed to every run (default 0, the example's)")
    p.add_argument(
        "--bf16-steps", type=int, default=8, help="steps of the bfloat16-engine runs (0: skip them)"
    )
    p.add_argument("--tis-cap", type=float, default=2.0, help="TIS cap of the bf16_tis run (0: skip it)")
    p.add_argument(
        "--output", type=Path, default=Path("/tmp/grpo_learning"), help="directory for runs and record"
    )
    p.add_argument(
        "--plot", type=Path, default=None, help="PNG of the curves (default OUTPUT/grpo_learning.png)"
    )
    p.add_argument(
        "--run-timeout", type=float, default=600, help="seconds before a run is stopped (default 600)"
    )
    p.add_argument("--json-out", default=None, help="also append the record as one line to this file")
    return p


# -- pure helpers ----------------------------------------------------------------------------------


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The lines of one run's ``metrics.jsonl``, in step order."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted(lines, key=lambda line: line["step"])


def summarise(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """First-3 and last-3 mean reward and their change, mean seconds per phase, mismatch medians."""
    if len(lines) < 2 * WINDOW:
        raise ValueError(
            f"{len(lines)} steps; comparing the first and last {WINDOW} needs at least {2 * WINDOW}"
        )
    rewards = [line["mean_reward"] for line in lines]
    if any(math.isnan(r) for r in rewards):
        raise ValueError(
            f"steps without a scored trajectory (mean_reward NaN): {[i for i, r in enumerate(rewards) if math.isnan(r)]}"
        )
    first, last = statistics.fmean(rewards[:WINDOW]), statistics.fmean(rewards[-WINDOW:])
    summary: dict[str, Any] = {
        "steps": len(lines),
        "first3": first,
        "last3": last,
        "change": last - first,
        "failed_groups": sum(line["failed_groups"] for line in lines),
        "groups": sum(line["groups"] for line in lines),
    }
    for key in TIMINGS:
        summary[key] = statistics.fmean(line[key] for line in lines)
    for key in ("mismatch_mean_abs", "mismatch_p99_abs"):
        values = [line[key] for line in lines if key in line and not math.isnan(line[key])]
        summary[key] = statistics.median(values) if values else math.nan
    return summary


def criterion(update: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Issue 34's test: the update run's change >= 0.10 and >= twice the control's change."""
    need = max(MIN_CHANGE, CONTROL_FACTOR * control["change"])
    return {
        "update_change": update["change"],
        "control_change": control["change"],
        "required": need,
        "passed": update["change"] >= need,
    }


def runs_to_do(args: argparse.Namespace) -> dict[str, list[str]]:
    """The example's extra arguments per run, in the order they run."""
    runs = {"update": ["--steps", str(args.steps)], "control": ["--steps", str(args.steps), "--no-update"]}
    if args.bf16_steps > 0:
        runs["bf16"] = ["--steps", str(args.bf16_steps), "--engine-dtype", "bfloat16"]
        if args.tis_cap > 0:
            runs["bf16_tis"] = [*runs["bf16"], "--tis-cap", str(args.tis_cap)]
    return runs


def table(summaries: dict[str, dict[str, Any]]) -> str:
    head = (
        f"{'run':>9} {'steps':>5} {'first3':>7} {'last3':>7} {'change':>7} {'rollout':>8} {'train':>7} "
        f"{'update':>7} {'mismatch mean':>13} {'p99':>9} {'failed':>6}"
    )
    rows = [head]
    for name, s in summaries.items():
        rows.append(
            f"{name:>9} {s['steps']:>5} {s['first3']:>7.3f} {s['last3']:>7.3f} {s['change']:>+7.3f} "
            f"{s['rollout_s']:>7.2f}s {s['train_s']:>6.2f}s {s['update_s']:>6.2f}s "
            f"{s['mismatch_mean_abs']:>13.2e} {s['mismatch_p99_abs']:>9.2e} {s['failed_groups']:>6}"
        )
    return "\n".join(rows)


# -- runs and plot ---------------------------------------------------------------------------------


def run_example(name: str, extra: list[str], args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    """One run of the example in a subprocess; its output goes to ``OUTPUT/name/log.txt``."""
    directory = args.output / name
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(EXAMPLE), "--output", str(directory), "--seed", str(args.seed), *extra]
    print(f"# {name}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    log = directory / "log.txt"
    with log.open("w", encoding="utf-8") as handle:
        try:
            code = subprocess.run(
                command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, timeout=args.run_timeout
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    wall = time.perf_counter() - start
    if code != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
        status = f"ran past {args.run_timeout:.0f} s" if code is None else f"exited with {code}"
        raise SystemExit(
            f"run {name!r} {status} after {wall:.0f} s\ncommand: {' '.join(command)}\nlog {log}:\n{tail}"
        )
    print(f"# {name}: done in {wall:.0f} s", flush=True)
    return read_metrics(directory / "metrics.jsonl"), wall


def plot(
    curves: dict[str, list[dict[str, Any]]], summaries: dict[str, dict[str, Any]], path: Path, seed: int
) -> None:
    """Mean reward per step of the update and control runs, with their first-3 and last-3 means."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 4.2), dpi=110)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    styles = {"update": ("tab:blue", "with weight updates"), "control": ("tab:gray", "control (--no-update)")}
    for name, (color, label) in styles.items():
        lines = curves[name]
        steps = [line["step"] for line in lines]
        ax.plot(steps, [line["mean_reward"] for line in lines], marker="o", markersize=3, color=color,
                label=f"{label}: {summaries[name]['first3']:.3f} -> {summaries[name]['last3']:.3f}")  # fmt: skip
        for window, key in ((steps[:WINDOW], "first3"), (steps[-WINDOW:], "last3")):
            ax.plot([window[0], window[-1]], [summaries[name][key]] * 2, color=color, linewidth=4, alpha=0.35)
    ax.set_xlabel("step (16 prompts x 4 samples)")
    ax.set_ylabel("mean reward (contains_ground_truth)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(
        f"GRPO on the tiny model: exact arithmetic through the calculator (seed {seed})", fontsize=10
    )
    ax.legend(loc="lower right", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(str(path))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 2 * WINDOW:
        raise SystemExit(
            f"--steps {args.steps}: comparing the first and last {WINDOW} steps needs at least {2 * WINDOW}"
        )
    if 0 < args.bf16_steps < 2 * WINDOW:
        raise SystemExit(f"--bf16-steps {args.bf16_steps}: use 0 (skip) or at least {2 * WINDOW}")
    if 0 < args.tis_cap < 1:
        raise SystemExit(f"--tis-cap {args.tis_cap}: use 0 (skip) or a cap >= 1")
    args.output.mkdir(parents=True, exist_ok=True)
    plot_path = args.plot or args.output / "grpo_learning.png"
    load_start = os.getloadavg()
    curves: dict[str, list[dict[str, Any]]] = {}
    walls: dict[str, float] = {}
    for name, extra in runs_to_do(args).items():
        curves[name], walls[name] = run_example(name, extra, args)
    summaries = {name: {**summarise(lines), "wall_s": walls[name]} for name, lines in curves.items()}
    verdict = criterion(summaries["update"], summaries["control"])

    print(table(summaries))
    print(
        f"criterion: update change {verdict['update_change']:+.3f} >= {verdict['required']:.3f} "
        f"(0.10 and 2 x control change {verdict['control_change']:+.3f}): {'PASS' if verdict['passed'] else 'FAIL'}"
    )
    plot(curves, summaries, plot_path, args.seed)
    print(f"# plot written to {plot_path}")
    record = {
        "bench": "grpo_learning",
        "params": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "runs": runs_to_do(args),
            "load_avg_start": load_start,
            "load_avg_end": os.getloadavg(),
        },
        "git_sha": git_sha(),
        "results": {"summaries": summaries, "criterion": verdict, "metrics": curves},
    }
    (args.output / "grpo_learning.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(f"# record written to {args.output / 'grpo_learning.json'}")
    if args.json_out:
        emit_record(record, args.json_out)
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
