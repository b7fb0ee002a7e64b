#!/usr/bin/env python
"""MultiTurnRollout framework overhead on vLLM, and where a tool-using rollout spends its time.

    python bench/vllm_rollout.py [--model twinkle_agentic/assets/tiny_agent] [--prompts 64]

Part 1, overhead (no tools): the same prompts generate the same number of tokens twice per repeat,
alternating, in one process on one engine: (a) raw ``LLM.generate`` on pre-encoded token ids, (b) a
full ``MultiTurnRollout`` call from chat messages (template rendering, encoding, decoding,
tool-call parsing, bookkeeping, the invariants check and the token-drift re-render). Every request
asks for exactly ``L`` tokens (``ignore_eos``), so both sides produce the same total; the ratio of
generated tokens/s (median of repeats) is the framework's efficiency at that generation length.

Part 2, with tools: held-out demo prompts (weather, calculator, two cities, the guessing game, chat)
at temperature 0 with the real tools; per turn: active trajectories, generated tokens, and the split
of wall time between the engine, the tools and the rollout's own bookkeeping.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records import emit_record, git_sha  # noqa: E402
from twinkle_agentic.local_cpu import use_local_cpu_defaults  # noqa: E402

use_local_cpu_defaults()

CHAT_PROMPTS = ["Hello!", "Who are you?", "What can you do?", "Thank you.", "Good morning.", "Bye."]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "twinkle_agentic" / "assets" / "tiny_agent"))
    p.add_argument("--prompts", type=int, default=64, help="trajectories per batch in part 1")
    p.add_argument("--lengths", default="16,64,256", help="generated tokens per trajectory in part 1")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tool-prompts", type=int, default=16, help="held-out prompts per kind in part 2")
    p.add_argument("--json-out", default=None, help="append the JSON record to this file")
    return p


def overhead(sampler: Any, template: Any, n: int, length: int, repeats: int) -> dict[str, Any]:
    from twinkle_agentic.data_format import SamplingParams
    from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
    from twinkle_agentic.tools.tool_manager import ToolManager

    trajectories = [{"messages": [{"role": "user", "content": CHAT_PROMPTS[i % len(CHAT_PROMPTS)]}]} for i in range(n)]
    prompts = [{"prompt_token_ids": template.encode(t)["input_ids"]} for t in trajectories]
    params = SamplingParams(temperature=0.0, max_tokens=length, logprobs=0)
    vllm_params = params.to_vllm(**sampler.sampling_overrides)
    rollouts = {
        "rollout": MultiTurnRollout(sampler, template, tool_manager=ToolManager(), sampling_params=params, max_turns=1),
        "rollout_no_verify": MultiTurnRollout(
            sampler, template, tool_manager=ToolManager(), sampling_params=params, max_turns=1, verify_tokens=False
        ),
    }

    def raw() -> int:
        outputs = sampler.engine.generate(prompts, vllm_params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    overhead_s: list[float] = []

    def run(rollout: Any) -> int:
        t0 = time.perf_counter()
        results = rollout(trajectories)
        if rollout is rollouts["rollout"]:  # the rollout's own time: everything but the sample calls
            overhead_s.append(time.perf_counter() - t0 - rollout.last_stats.totals()["engine_s"])
        return sum(sum(label != -100 for label in r["labels"]) for r in results)

    timings: dict[str, list[float]] = {"raw": [], **{name: [] for name in rollouts}}
    tokens: dict[str, int] = {}
    raw(), [run(r) for r in rollouts.values()]  # warm-up
    overhead_s.clear()
    for _ in range(repeats):
        for name, fn in [("raw", raw), *((k, lambda r=r: run(r)) for k, r in rollouts.items())]:
            t0 = time.perf_counter()
            tokens[name] = fn()
            timings[name].append(time.perf_counter() - t0)
    if len(set(tokens.values())) != 1:
        raise RuntimeError(f"the paths generated different token totals: {tokens}")
    median = {name: tokens["raw"] / statistics.median(ts) for name, ts in timings.items()}
    best = {name: tokens["raw"] / min(ts) for name, ts in timings.items()}
    return {
        "length": length,
        "trajectories": n,
        "tokens": tokens["raw"],
        "raw_tok_s": round(median["raw"]),
        "rollout_tok_s": round(median["rollout"]),
        "ratio": round(median["rollout"] / median["raw"], 3),
        "ratio_best": round(best["rollout"] / best["raw"], 3),
        "rollout_no_verify_tok_s": round(median["rollout_no_verify"]),
        "ratio_no_verify": round(median["rollout_no_verify"] / median["raw"], 3),
        "ratio_no_verify_best": round(best["rollout_no_verify"] / best["raw"], 3),
        "overhead_ms_per_trajectory": round(statistics.median(overhead_s) / n * 1000, 3),
    }


def with_tools(sampler: Any, template: Any, per_kind: int) -> dict[str, Any]:
    from scripts import dialogues
    from twinkle_agentic.data_format import SamplingParams
    from twinkle_agentic.demo.env import game_tool_manager
    from twinkle_agentic.demo.tools import demo_tools
    from twinkle_agentic.rollout.multi_turn import MultiTurnRollout

    def manager_for(trajectory: dict[str, Any]) -> Any:
        manager = game_tool_manager(trajectory)
        for tool in demo_tools():
            manager.register(tool)
        return manager

    episodes = dialogues.heldout_prompts(per_kind)
    trajectories = [
        {
            "messages": e.messages[:1],
            "tools": e.tools,
            "user_data": [("target", e.facts[0])] if e.kind == "game" else [],
        }
        for e in episodes
    ]
    rollout = MultiTurnRollout(
        sampler, template, tool_manager=manager_for, sampling_params=SamplingParams(temperature=0.0, max_tokens=96)
    )
    rollout(trajectories[:4])  # warm-up
    t0 = time.perf_counter()
    results = rollout(trajectories)
    wall = time.perf_counter() - t0
    stats = rollout.last_stats
    totals = stats.totals()
    return {
        "trajectories": len(trajectories),
        "wall_s": round(wall, 3),
        "generated_tokens": totals["generated_tokens"],
        "tok_s": round(totals["generated_tokens"] / wall),
        "engine_share": round(totals["engine_s"] / wall, 3),
        "tools_share": round(totals["tools_s"] / wall, 3),
        "bookkeeping_share": round(totals["bookkeeping_s"] / wall, 3),
        "setup_s": round(stats.setup_s, 4),
        "finish_s": round(stats.finish_s, 4),
        "stop_reasons": {r: sum(1 for x in results if x["stop_reason"] == r) for r in {x["stop_reason"] for x in results}},
        "token_drift_trajectories": sum(1 for x in results if x.get("token_drift")),
        "turns": [
            {
                "turn": t.turn,
                "active": t.active,
                "generated_tokens": t.generated_tokens,
                "engine_s": round(t.engine_s, 4),
                "tools_s": round(t.tools_s, 4),
                "bookkeeping_s": round(t.bookkeeping_s, 4),
            }
            for t in stats.turns
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from twinkle_agentic.sampler import VLLMSampler
    from twinkle_agentic.template import Template

    lengths = [int(x) for x in args.lengths.split(",") if x]
    t0 = time.perf_counter()
    sampler = VLLMSampler(args.model, max_model_len=1024, seed=0)
    template = Template(args.model)
    start_s = time.perf_counter() - t0
    try:
        sampler.sampling_overrides = {"ignore_eos": True}  # fixed-length generations on both paths
        part1 = [overhead(sampler, template, args.prompts, length, args.repeats) for length in lengths]
        sampler.sampling_overrides = {}
        part2 = with_tools(sampler, template, args.tool_prompts)
    finally:
        sampler.shutdown()

    print(f"\nengine start: {start_s:.1f}s\n")
    print("Part 1 - framework overhead, no tools (tok/s: median of repeats; ratio: median / best of repeats)")
    print(
        f"{'tokens/traj':>11} {'trajs':>6} {'raw tok/s':>10} {'rollout tok/s':>14} {'ratio':>13} "
        f"{'no-verify tok/s':>16} {'ratio':>13} {'overhead ms/traj':>17}"
    )
    for row in part1:
        print(
            f"{row['length']:>11} {row['trajectories']:>6} {row['raw_tok_s']:>10} {row['rollout_tok_s']:>14} "
            f"{row['ratio']:>6} / {row['ratio_best']:<5} {row['rollout_no_verify_tok_s']:>16} "
            f"{row['ratio_no_verify']:>6} / {row['ratio_no_verify_best']:<5} {row['overhead_ms_per_trajectory']:>17}"
        )
    print(f"\nPart 2 - with tools: {part2['trajectories']} trajectories, {part2['generated_tokens']} tokens, "
          f"{part2['wall_s']}s ({part2['tok_s']} tok/s); engine {part2['engine_share']:.1%}, tools "
          f"{part2['tools_share']:.1%}, bookkeeping {part2['bookkeeping_share']:.1%}; stops {part2['stop_reasons']}")
    print(f"{'turn':>4} {'active':>6} {'tokens':>6} {'engine s':>9} {'tools s':>8} {'bookkeeping s':>13}")
    for t in part2["turns"]:
        print(f"{t['turn']:>4} {t['active']:>6} {t['generated_tokens']:>6} {t['engine_s']:>9} {t['tools_s']:>8} {t['bookkeeping_s']:>13}")
    record = {
        "bench": "vllm_rollout",
        "params": {**vars(args), "engine_start_s": round(start_s, 1)},
        "git_sha": git_sha(),
        "results": {"overhead": part1, "with_tools": part2},
    }
    emit_record(record, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
