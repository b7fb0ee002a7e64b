"""ScoreFilter scorers on the tiny model: rounds/s per scorer, and batched vs one-round-at-a-time logprobs.

Data: single-round rows cut from the seeded synthetic dialogues the tiny model was trained on
(``scripts/dialogues.py``): every assistant round becomes one row whose history is
everything before it. Paraphrase needs answers of 50+ tokens, so its rows join several answers.

* per scorer: one ``ScoreFilter([scorer])`` call over all rows (after one warm-up batch), rounds/s
  (best of ``--repeats`` runs for the logprob scorers, one run for the sampling ones);
* batching: ``ScoreFilter(['chr_min', 'sifd'])`` over all rows in one call (one batched engine call
  for conditional + unconditional logprobs of every round, each shared token prefix sent once)
  versus a loop calling it on one row (one round) at a time, on the same rows and in the same
  process; a third mode batches without prefix sharing, to show what each part buys. The modes
  alternate ``--repeats`` times and each keeps its fastest run (the machine is shared); the scores
  of all modes are compared.

Run: python bench/scorers.py [--rows 64] [--model PATH] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.records import git_sha  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=64, help="single-round rows per measurement")
    p.add_argument("--model", default=None, help="model directory (default: the committed tiny model)")
    p.add_argument("--dtype", default="float32", help="vLLM dtype (float32 is safe on every CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pass-n", type=int, default=4, help="samples per round for PassNScorer")
    p.add_argument(
        "--repeats", type=int, default=3, help="alternating runs of each batching mode (best kept)"
    )
    p.add_argument("--json-out", default=None, help="append the JSON record to this file")
    return p


def single_round_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """One row per assistant round of seeded training dialogues: the history before it, and
    ``key_rounds`` naming that round only."""
    from scripts.dialogues import sample_dialogue
    from twinkle_agentic.data_format import pack_value

    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        dialogue = sample_dialogue(rng)
        messages = dialogue["messages"]
        for idx, message in enumerate(messages):
            if message.get("role") == "assistant" and idx > 0 and len(rows) < n:
                rows.append(
                    {
                        "id": f"d{len(rows)}",
                        "messages": messages[: idx + 1],
                        "tools": dialogue["tools"],
                        "user_data": [("key_rounds", pack_value([idx]))],
                    }
                )
    return rows


def long_answer_rows(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Rows whose answer joins several plain-text answers (paraphrase needs 50+ reference tokens)."""
    texts = [r["messages"][-1]["content"] for r in rows if r["messages"][-1].get("content")]
    out = []
    for i in range(n):
        answer = " ".join(texts[(i * 6 + k) % len(texts)] for k in range(6))
        out.append(
            {
                "id": f"p{i}",
                "messages": [
                    {"role": "user", "content": "Summarise what you found."},
                    {"role": "assistant", "content": answer},
                ],
            }
        )
    return out


def with_tests(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PassN exec rows: the test asks the program to print the dataset's answer."""
    return [{**r, "tests": [{"input": "", "output": r["messages"][-1].get("content") or "ok"}]} for r in rows]


def timed(f: Any, rows: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    f(rows)
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and every child (vLLM's engine core and workers).

    Unlike wall time it barely moves when other jobs share the machine, so the batching comparison
    reports both.
    """
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def scores_of(f: Any, rows: list[dict[str, Any]], one_at_a_time: bool) -> tuple[float, float, list[dict]]:
    """(wall seconds, CPU seconds, trace records) of scoring ``rows`` in one call or one row per call."""
    records: list[dict] = []
    f.trace_callback = records.append
    cpu = cpu_seconds()
    start = time.perf_counter()
    if one_at_a_time:
        for row in rows:
            f([row])
    else:
        f(rows)
    seconds = time.perf_counter() - start
    cpu = cpu_seconds() - cpu
    f.trace_callback = None
    return seconds, cpu, records


def max_score_gap(a: list[dict], b: list[dict]) -> float:
    gap = 0.0
    for ra, rb in zip(a, b, strict=True):
        for name in ("sifd", "chr_min"):
            sa, sb = ra["scores"][name]["score"], rb["scores"][name]["score"]
            if sa is not None and sb is not None:
                gap = max(gap, abs(sa - sb))
    return gap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from twinkle_agentic.demo import tiny_model_path
    from twinkle_agentic.preprocessor import (
        CharStatsScorer,
        ChrMinScorer,
        ParaphraseScorer,
        PassNScorer,
        ScoreFilter,
        SIFDScorer,
    )
    from twinkle_agentic.preprocessor.score import SamplerBackend

    model = args.model or tiny_model_path()
    backend = SamplerBackend.from_config(model, max_model_len=1024, dtype=args.dtype, seed=args.seed)
    start = time.perf_counter()
    backend.warmup()
    print(f"engine ready in {time.perf_counter() - start:.1f}s ({model})", flush=True)

    rows = single_round_rows(args.rows, args.seed)
    warm = single_round_rows(8, args.seed + 1)
    cases = [
        ("char_stats", CharStatsScorer(), rows),
        ("chr_min", ChrMinScorer(), rows),
        ("sifd", SIFDScorer(), rows),
        ("paraphrase", ParaphraseScorer(), long_answer_rows(rows, max(8, args.rows // 4))),
        ("pass_n", PassNScorer(n=args.pass_n, sample_max_tokens=48, exec_timeout_s=5), with_tests(rows)),
    ]
    results: dict[str, Any] = {"per_scorer": {}, "batching": {}}
    print(f"\n{'scorer':<12}{'rounds':>8}{'seconds':>10}{'rounds/s':>11}")
    for name, scorer, data in cases:
        f = ScoreFilter([scorer], backend=backend, max_prompt_tokens=512)
        f.warmup()
        sampling = name in ("paraphrase", "pass_n")  # minutes per run on a busy machine: one run
        f(data[:2] if sampling else warm)
        seconds = min(timed(f, data) for _ in range(1 if sampling else args.repeats))
        rate = len(data) / seconds
        results["per_scorer"][name] = {
            "rounds": len(data),
            "seconds": round(seconds, 3),
            "rounds_per_s": round(rate, 2),
        }
        print(f"{name:<12}{len(data):>8}{seconds:>10.2f}{rate:>11.1f}", flush=True)

    f = ScoreFilter(["chr_min", "sifd"], backend=backend, max_prompt_tokens=512)
    f(warm)
    # mode -> (one row per call, share prefixes): the loop, the batch as shipped, and the batch without
    # prefix sharing (what batching alone buys, without reading shared histories once)
    modes = {"one_at_a_time": (True, True), "batched": (False, True), "batched_no_sharing": (False, False)}
    runs: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    records: dict[str, list[dict]] = {}
    tokens: dict[str, tuple[int, int]] = {}
    for _ in range(args.repeats):  # alternate the modes; the fastest run of each is the least disturbed
        for mode, (one_at_a_time, share) in modes.items():
            f.share_prefixes = share
            wall, cpu, records[mode] = scores_of(f, rows, one_at_a_time)
            runs[mode].append((wall, cpu))
            tokens[mode] = f.last_logprob_tokens
    f.share_prefixes = True
    best = {mode: (min(w for w, _ in r), min(c for _, c in r)) for mode, r in runs.items()}
    (loop_s, loop_cpu), (batch_s, batch_cpu) = best["one_at_a_time"], best["batched"]
    plain_s, plain_cpu = best["batched_no_sharing"]
    gap = max(max_score_gap(records["batched"], records[mode]) for mode in modes)
    requested, sent = tokens["batched"]
    results["batching"] = {
        "rounds": len(rows),
        "one_at_a_time_s": round(loop_s, 3),
        "batched_s": round(batch_s, 3),
        "batched_no_sharing_s": round(plain_s, 3),
        "speedup": round(loop_s / batch_s, 2),
        "speedup_no_sharing": round(loop_s / plain_s, 2),
        "one_at_a_time_cpu_s": round(loop_cpu, 3),
        "batched_cpu_s": round(batch_cpu, 3),
        "batched_no_sharing_cpu_s": round(plain_cpu, 3),
        "cpu_speedup": round(loop_cpu / batch_cpu, 2),
        "cpu_speedup_no_sharing": round(loop_cpu / plain_cpu, 2),
        "batch_tokens_requested": requested,
        "batch_tokens_sent": sent,
        "runs_wall_cpu_s": {mode: [[round(w, 3), round(c, 3)] for w, c in r] for mode, r in runs.items()},
        "max_score_gap": gap,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(f"\nchr_min+sifd over {len(rows)} rounds (best of {args.repeats} alternating runs):")
    print(f"{'mode':<20}{'wall s':>8}{'rounds/s':>10}{'CPU s':>8}{'rounds/CPU s':>14}{'speedup':>9}")
    for mode, (wall, cpu) in best.items():
        print(
            f"{mode:<20}{wall:>8.2f}{len(rows) / wall:>10.1f}{cpu:>8.2f}{len(rows) / cpu:>14.1f}"
            f"{loop_s / wall:>8.2f}x"
        )
    print(
        f"batched: x{loop_s / batch_s:.2f} (wall), x{loop_cpu / batch_cpu:.2f} (CPU); prompt-logprob tokens "
        f"{requested} requested, {sent} sent after prefix sharing; without sharing x{loop_s / plain_s:.2f}; "
        f"largest score difference {gap:.2e}; load average {os.getloadavg()[0]:.1f}"
    )

    record = {
        "bench": "scorers",
        "params": vars(args) | {"model": model},
        "git_sha": git_sha(),
        "results": results,
    }
    print(json.dumps(record))
    if args.json_out:
        with open(args.json_out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
