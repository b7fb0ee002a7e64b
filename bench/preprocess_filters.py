"""Throughput of the rule-based preprocessing filters, ours against upstream twinkle-kit 0.5.1.

    python -m bench.preprocess_filters --rows 50000 --upstream --upstream-rows 5000

Generates a mixed EN/ZH/JA/KO corpus (``bench/corpus.py``), times every filter alone and the
pipeline Hard -> DeadLoop -> Refuse -> TokenSoup -> MessageNormalizer on one core, and prints
rows/s and MB/s. ``--upstream`` also runs upstream's filters, one at a time, on the first
``--upstream-rows`` rows in a subprocess of the git-ignored ``.upstream/venv`` (its package is also
named ``twinkle_agentic``; ``--setup-upstream`` builds that venv), times ours on the same rows, and
prints the speed ratio and per-filter verdict agreement. One table is printed and one JSON record
``{bench, params, git_sha, results}`` is appended to ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from twinkle_agentic.preprocessor import (
    DeadLoopFilter,
    HardFilter,
    IntentClassifier,
    MessageNormalizer,
    QualityPreprocessor,
    RefuseFilter,
    TokenSoupFilter,
)

from .corpus import generate_rows

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM_DIR = ROOT / ".upstream"
UPSTREAM_PYTHON = UPSTREAM_DIR / "venv" / "bin" / "python"
UPSTREAM_PACKAGE = "twinkle-kit==0.5.1"
# What upstream's preprocessor imports need (installed without their own heavy dependencies;
# torch comes from this interpreter: PyPI's Linux wheel pulls in CUDA).
UPSTREAM_IMPORT_DEPS = (
    "numpy<2.3",
    "datasets",
    "transformers==5.19.0",
    "pillow",
    "pyzmq",
    "typer",
    "omegaconf",
)
PIPELINE = ("HardFilter", "DeadLoopFilter", "RefuseFilter", "TokenSoupFilter", "MessageNormalizer")

# Runs inside the upstream venv with ``python -I -c`` (no cwd on sys.path, so our package never
# shadows upstream's). Upstream code is only imported and run, never read or copied.
UPSTREAM_RUNNER = r"""
import gc, json, logging, sys, time, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
import twinkle_agentic.preprocessor as up

def by_id(rows, kept, dropped, kind):
    out = {d["id"]: (d.get("drop_reason") or "dropped") for d in dropped}
    for r in kept:
        if kind == "mapper":
            out[r["id"]] = {"messages": r.get("messages")}
        elif kind == "intent":
            out[r["id"]] = {"intent": r.get("intent"), "user_data": r.get("user_data")}
        else:
            out[r["id"]] = None
    return [out.get(r["id"], "missing") for r in rows]

def per_row(step, rows, kind):
    res = []
    for r in rows:
        try:
            k, d = step([r]); res.extend(by_id([r], k, d, kind))
        except Exception as exc:
            res.append("EXC:" + type(exc).__name__)
    return res

raw = open(sys.argv[1], encoding="utf-8").read()
job = json.loads(raw)
steps, repeat, results = job["steps"], job.get("repeat", 1), {}
for spec in steps:
    name, kind = spec["name"], spec.get("kind", "filter")
    if kind == "pipeline":
        step = up.QualityPreprocessor([getattr(up, s)(**kw) for s, kw in spec["steps"]])
    else:
        step = getattr(up, name)(**spec.get("kwargs", {}))
    seconds = float("inf")
    for _ in range(repeat):  # best of ``repeat``, like ours
        rows = json.loads(raw)["rows"]  # a fresh copy per run: a step may mutate its input in place
        gc.collect(); gc.freeze()  # the input is long-lived data: keep it out of GC passes, as ours
        start = time.perf_counter()
        try:
            out = step(rows); error = None
        except Exception as exc:
            out, error = None, type(exc).__name__ + ": " + str(exc)[:200]
        seconds = min(seconds, time.perf_counter() - start)
    entry = {"seconds": seconds, "error": error}
    if kind == "pipeline":
        entry["kept"] = len(out) if isinstance(out, list) else None
    elif error is None:
        entry["verdicts"] = by_id(rows, out[0], out[1], kind)
    elif kind != "global":
        entry["verdicts"] = per_row(step, rows, kind)
    results[name] = entry
json.dump(results, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False, default=str)
"""


def _dedup_filter() -> Any:
    try:
        from twinkle_agentic.preprocessor import DedupFilter
    except (ImportError, AttributeError):
        return None
    return DedupFilter()


def our_steps() -> list[tuple[str, Any, str]]:
    """(name, step, kind): kind is filter, mapper, intent or global (whole-dataset step)."""
    steps: list[tuple[str, Any, str]] = [
        ("HardFilter", HardFilter(), "filter"),
        ("DeadLoopFilter", DeadLoopFilter(), "filter"),
        ("RefuseFilter", RefuseFilter(), "filter"),
        ("TokenSoupFilter", TokenSoupFilter(), "filter"),
        ("MessageNormalizer", MessageNormalizer(), "mapper"),
        ("IntentClassifier", IntentClassifier(), "intent"),
    ]
    dedup = _dedup_filter()
    if dedup is not None:
        steps.append(("DedupFilter", dedup, "global"))
    return steps


def row_bytes(rows: list[dict]) -> int:
    return sum(len(json.dumps(r.get("messages"), ensure_ascii=False).encode()) for r in rows)


def time_step(step: Any, rows: list[dict], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = step(rows)
        best = min(best, time.perf_counter() - start)
    return best, out


def our_verdicts(rows: list[dict], kept: list[dict], dropped: list[dict], kind: str) -> list[Any]:
    out: dict[str, Any] = {d["id"]: d.get("drop_reason") for d in dropped}
    for r in kept:
        if kind == "mapper":
            out[r["id"]] = {"messages": r.get("messages")}
        elif kind == "intent":
            out[r["id"]] = {"intent": r.get("intent"), "user_data": r.get("user_data")}
        else:
            out[r["id"]] = None
    return [out.get(r["id"], "missing") for r in rows]


def _mapper_key(value: Any) -> Any:
    """Mapper outputs compared modulo SPEC Decisions (we keep reasoning/name fields upstream drops)."""
    if not isinstance(value, dict):
        return value
    keep = ("role", "content", "tool_calls", "tool_call_id")
    messages = value.get("messages") or []
    return json.dumps(
        [{k: m.get(k) for k in keep if k in m} for m in messages], sort_keys=True, ensure_ascii=False
    )


def _intent_key(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    pairs = value.get("user_data") or []
    data = dict(pairs) if isinstance(pairs, list) else dict(pairs or {})
    return (value.get("intent"), json.loads(data.get("key_rounds", "[]") or "[]"))


def _identity(value: Any) -> Any:
    return value


def agreement(ours: list[Any], theirs: list[Any], kind: str, sources: list[str]) -> dict[str, Any]:
    key = {"mapper": _mapper_key, "intent": _intent_key}.get(kind, _identity)

    def label(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return key(value)[0] if kind == "intent" else "rewritten"

    same = 0
    diffs: Counter = Counter()
    for o, t, s in zip(ours, theirs, sources, strict=True):
        if kind == "intent" and t == "no_key_rounds":  # upstream dropped: compare with 'other'
            t = {"intent": "other", "user_data": [["key_rounds", "[]"]]}
        if key(o) == key(t):
            same += 1
        else:
            diffs[(str(label(t)), str(label(o)), s)] += 1
    return {
        "agreement": same / max(len(ours), 1),
        "disagreements": [
            {"upstream": u, "ours": o, "source": s, "rows": n} for (u, o, s), n in diffs.most_common(8)
        ],
    }


def run_upstream(rows: list[dict], python: Path, timeout_s: int, repeat: int = 1) -> dict[str, Any]:
    steps = [
        {"name": "HardFilter"},
        {"name": "DeadLoopFilter"},
        {"name": "RefuseFilter"},
        {"name": "TokenSoupFilter"},
        {"name": "MessageNormalizer", "kind": "mapper"},
        {"name": "IntentClassifier", "kind": "intent", "kwargs": {"drop_no_key_rounds": False}},
        {"name": "DedupFilter", "kind": "global"},
        {"name": "pipeline", "kind": "pipeline", "steps": [[s, {}] for s in PIPELINE]},
    ]
    with tempfile.TemporaryDirectory() as tmp:
        job, out = Path(tmp, "job.json"), Path(tmp, "out.json")
        job.write_text(
            json.dumps({"rows": rows, "steps": steps, "repeat": repeat}, ensure_ascii=False), encoding="utf-8"
        )
        subprocess.run(
            [str(python), "-I", "-c", UPSTREAM_RUNNER, str(job), str(out)],
            check=True,
            timeout=timeout_s,
            cwd=tmp,
        )
        return json.loads(out.read_text(encoding="utf-8"))


def setup_upstream(python: Path) -> None:
    """Create ``.upstream/venv`` with twinkle-kit 0.5.1 installed --no-deps plus what its imports need."""
    venv = python.parent.parent
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", UPSTREAM_PACKAGE], check=True)
    subprocess.run([*pip, *UPSTREAM_IMPORT_DEPS], check=True)
    try:
        import torch  # the CPU build of this interpreter, linked in (PyPI's torch needs CUDA libraries)
    except ImportError:
        subprocess.run([*pip, "torch"], check=True)
        return
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    source = Path(torch.__file__).parent.parent
    for name in os.listdir(source):
        if name in ("torch", "torchgen", "functorch") or (
            name.startswith("torch-") and name.endswith(".dist-info")
        ):
            target = site / name
            if not target.exists():
                target.symlink_to(source / name)


def git_sha() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.preprocess_filters", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--rows", type=int, default=50_000, help="corpus rows for our filters (default 50000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--repeat", type=int, default=1, help="runs per measurement, ours and upstream's; the best is kept"
    )
    p.add_argument(
        "--dedup-scale",
        type=int,
        default=0,
        metavar="N",
        help="only time DedupFilter on N generated rows in this process (e.g. 1000000) and exit",
    )
    p.add_argument(
        "--upstream", action="store_true", help="also run upstream twinkle-kit 0.5.1 from .upstream/venv"
    )
    p.add_argument(
        "--upstream-rows", type=int, default=5_000, help="rows given to upstream (and to ours for the ratio)"
    )
    p.add_argument("--upstream-python", type=Path, default=UPSTREAM_PYTHON)
    p.add_argument("--upstream-timeout-s", type=int, default=3600)
    p.add_argument("--setup-upstream", action="store_true", help="create .upstream/venv first")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "preprocess_filters.jsonl")
    return p


def dedup_scale(n: int, seed: int, out: Path) -> None:
    """DedupFilter on ``n`` rows at once (rows generated in chunks of distinct seeds); prints rows/s."""
    import resource

    from twinkle_agentic.preprocessor import DedupFilter

    start = time.perf_counter()
    rows: list[dict] = []
    chunk = 100_000
    for k in range(0, n, chunk):
        rows.extend(generate_rows(min(chunk, n - k), seed + k // chunk))
        gc.freeze()
    generated = time.perf_counter() - start
    start = time.perf_counter()
    kept, dropped = DedupFilter()(rows)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"DedupFilter on {n} rows: {seconds:.2f}s ({n / seconds:,.0f} rows/s), kept {len(kept)}, "
        f"dropped {len(dropped)}; rows generated in {generated:.0f}s; peak RSS {peak_mb:,.0f} MB"
    )
    record = {
        "bench": "preprocess_filters/dedup_scale",
        "params": {"rows": n, "seed": seed},
        "git_sha": git_sha(),
        "results": {"seconds": seconds, "rows_s": n / seconds, "kept": len(kept), "peak_rss_mb": peak_mb},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.dedup_scale:
        dedup_scale(args.dedup_scale, args.seed, args.out)
        return 0
    if args.setup_upstream:
        setup_upstream(args.upstream_python)
    t0 = time.perf_counter()
    rows = generate_rows(args.rows, args.seed)
    # The corpus is long-lived input, as a dataset is: keep its objects out of every cyclic GC pass
    # (the upstream runner does the same with its rows), so 50,000 live rows do not slow our steps.
    gc.collect()
    gc.freeze()
    mb = row_bytes(rows) / 1e6
    print(
        f"corpus: {len(rows)} rows, {mb:.1f} MB of messages, generated in {time.perf_counter() - t0:.1f}s",
        flush=True,
    )

    results: dict[str, dict[str, Any]] = {}
    for name, step, _kind in our_steps():
        seconds, _ = time_step(step, rows, args.repeat)
        results[name] = {"ours_rows_s": len(rows) / seconds, "ours_mb_s": mb / seconds}
    pipeline = QualityPreprocessor(
        [HardFilter(), DeadLoopFilter(), RefuseFilter(), TokenSoupFilter(), MessageNormalizer()]
    )
    seconds, _ = time_step(pipeline, rows, args.repeat)
    results["pipeline"] = {"ours_rows_s": len(rows) / seconds, "ours_mb_s": mb / seconds}

    if args.upstream:
        sub = rows[: args.upstream_rows]
        sub_mb = row_bytes(sub) / 1e6
        sources = [r.get("source", "") for r in sub]
        print(f"upstream: {len(sub)} rows ({sub_mb:.1f} MB) in {args.upstream_python}", flush=True)
        theirs = run_upstream(sub, args.upstream_python, args.upstream_timeout_s, args.repeat)
        for name, step, kind in our_steps():
            seconds, out = time_step(step, sub, args.repeat)
            entry = results[name]
            entry["ours_subset_rows_s"] = len(sub) / seconds
            up = theirs.get(name, {})
            if up.get("seconds"):
                entry["upstream_rows_s"] = len(sub) / up["seconds"]
                entry["upstream_mb_s"] = sub_mb / up["seconds"]
                entry["speedup"] = entry["ours_subset_rows_s"] / entry["upstream_rows_s"]
            if up.get("error"):
                entry["upstream_error"] = up["error"]
            if "verdicts" in up:
                entry.update(
                    agreement(our_verdicts(sub, out[0], out[1], kind), up["verdicts"], kind, sources)
                )
        seconds, _ = time_step(pipeline, sub, args.repeat)
        entry = results["pipeline"]
        entry["ours_subset_rows_s"] = len(sub) / seconds
        up = theirs.get("pipeline", {})
        if up.get("seconds"):
            entry["upstream_rows_s"] = len(sub) / up["seconds"]
            entry["upstream_mb_s"] = sub_mb / up["seconds"]
            entry["speedup"] = entry["ours_subset_rows_s"] / entry["upstream_rows_s"]

    print_table(results)
    record = {
        "bench": "preprocess_filters",
        "params": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "git_sha": git_sha(),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"appended to {args.out}")
    return 0


def print_table(results: dict[str, dict[str, Any]]) -> None:
    head = f"{'step':18s} {'ours rows/s':>12s} {'ours MB/s':>10s} {'upstream rows/s':>16s} {'upstream MB/s':>14s} {'speedup':>8s} {'agree':>7s}"
    print(head)
    print("-" * len(head))
    for name, r in results.items():
        up_rows = f"{r['upstream_rows_s']:.0f}" if "upstream_rows_s" in r else "-"
        up_mb = f"{r['upstream_mb_s']:.2f}" if "upstream_mb_s" in r else "-"
        speed = f"{r['speedup']:.1f}x" if "speedup" in r else "-"
        agree = f"{100 * r['agreement']:.1f}%" if "agreement" in r else "-"
        print(
            f"{name:18s} {r['ours_rows_s']:12.0f} {r['ours_mb_s']:10.2f} {up_rows:>16s} {up_mb:>14s} {speed:>8s} {agree:>7s}"
        )
    for name, r in results.items():
        for d in r.get("disagreements", []):
            print(
                f"  {name}: upstream={d['upstream']} ours={d['ours']} source={d['source']} rows={d['rows']}"
            )
        if r.get("upstream_error"):
            print(f"  {name}: upstream raised {r['upstream_error']}")


if __name__ == "__main__":
    sys.exit(main())
