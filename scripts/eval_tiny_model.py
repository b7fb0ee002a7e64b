#!/usr/bin/env python
"""Measure the tiny model on held-out prompts with vLLM, through MultiTurnRollout and the real tools.

    python scripts/eval_tiny_model.py [--model twinkle_agentic/assets/tiny_agent] [--per-kind 40]

Held-out prompts (``dialogues.heldout_prompts``) use phrasings, fillers and entity combinations that
training never saw. Each is rolled out at temperature 0 with the demo tools and a fresh guessing game
per trajectory. Reported per kind and overall:

- ``valid_tool_call``: the first turn of a tool-needing prompt parses into a call of an offered tool
  whose arguments carry every required parameter;
- ``correct_tool_call``: that first call equals the reference call exactly;
- ``answer_uses_result``: the trajectory ended naturally and its final answer states what its tool
  results returned (weather condition and temperature, the calculator's result, the found number);
- ``correct_answer``: the final answer states the reference facts (right call and right answer);
- ``no_tool_for_chat``: small talk is answered without a tool call;
- ``token_drift`` (trajectories with drift > 0) and the stop reasons.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twinkle_agentic.local_cpu import use_local_cpu_defaults  # noqa: E402

use_local_cpu_defaults()

from twinkle_agentic.rollout.base import DEFAULT_MAX_TURNS  # noqa: E402

TOOL_KINDS = ("weather", "calculator", "two_city", "game")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "twinkle_agentic" / "assets" / "tiny_agent"))
    p.add_argument("--per-kind", type=int, default=40, help="held-out prompts per tool kind")
    p.add_argument("--max-turns", type=int, default=DEFAULT_MAX_TURNS)
    p.add_argument("--max-tokens", type=int, default=96, help="per-turn generation limit")
    p.add_argument("--json-out", default=None, help="also write the figures here")
    p.add_argument("--show-failures", type=int, default=3, help="print this many failures per kind")
    return p


def manager_for(trajectory: dict[str, Any]) -> Any:
    """Demo tools plus a fresh guessing game for this trajectory."""
    from twinkle_agentic.demo.env import game_tool_manager
    from twinkle_agentic.demo.tools import demo_tools

    manager = game_tool_manager(trajectory)
    for tool in demo_tools():
        manager.register(tool)
    return manager


def mentions(text: str, fact: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(fact)}(?![\w])", text or "") is not None


def required_ok(call: dict[str, Any], tools: list[dict[str, Any]]) -> bool:
    function = call.get("function") or {}
    schema = next((t["function"] for t in tools if t["function"]["name"] == function.get("name")), None)
    if schema is None:
        return False
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return False
    required = schema.get("parameters", {}).get("required", [])
    return isinstance(arguments, dict) and all(name in arguments for name in required)


WEATHER_RESULT = re.compile(r"^\w+: (\w+), (-?\d+) C$")
NUMBER_RESULT = re.compile(r"^-?\d+(\.\d+)?$")


def result_facts(messages: list[dict[str, Any]]) -> list[str]:
    """What the tool results of a trajectory established, as the strings an answer should state."""
    facts: list[str] = []
    calls = {c["id"]: c["function"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])}
    for message in messages:
        if message["role"] != "tool":
            continue
        content = str(message["content"]).strip()
        if match := WEATHER_RESULT.match(content):
            facts += [match.group(1), f"{match.group(2)} C"]
        elif NUMBER_RESULT.match(content):
            facts.append(content)
        elif content == "Correct!":
            facts.append(str(json.loads(calls[message["tool_call_id"]]["arguments"])["number"]))
    return facts


def score(episode: Any, out: dict[str, Any]) -> dict[str, bool]:
    generated = [m for m in out["messages"][1:] if m["role"] == "assistant"]
    first_calls = generated[0].get("tool_calls", []) if generated else []
    if episode.kind == "chat":
        return {"no_tool_for_chat": not first_calls}
    reference = episode.messages[1]["tool_calls"][0]["function"]
    first = first_calls[0]["function"] if first_calls else {}
    final = generated[-1].get("content", "") if generated and out["stop_reason"] == "stop" else ""
    facts = result_facts(out["messages"])
    return {
        "valid_tool_call": bool(first_calls) and required_ok(first_calls[0], episode.tools),
        "correct_tool_call": first.get("name") == reference["name"]
        and json.loads(first.get("arguments") or "null") == reference["arguments"],
        "answer_uses_result": bool(facts) and all(mentions(final, fact) for fact in facts),
        "correct_answer": all(mentions(final, fact) for fact in episode.facts),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from scripts import dialogues
    from twinkle_agentic.data_format import SamplingParams
    from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
    from twinkle_agentic.sampler import VLLMSampler
    from twinkle_agentic.template import Template

    episodes = dialogues.heldout_prompts(args.per_kind)
    trajectories = [
        {
            "messages": episode.messages[:1],
            "tools": episode.tools,
            "user_data": [("kind", json.dumps(episode.kind))]
            + ([("target", episode.facts[0])] if episode.kind == "game" else []),
        }
        for episode in episodes
    ]
    t0 = time.time()
    sampler = VLLMSampler(args.model, max_model_len=1024, seed=0)
    template = Template(args.model)
    start_s = time.time() - t0
    rollout = MultiTurnRollout(
        sampler,
        template,
        tool_manager=manager_for,
        sampling_params=SamplingParams(temperature=0.0, max_tokens=args.max_tokens),
        max_turns=args.max_turns,
    )
    t1 = time.time()
    outputs = rollout(trajectories)
    rollout_s = time.time() - t1

    per_kind: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    failures: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for episode, out in zip(episodes, outputs, strict=True):
        for metric, ok in score(episode, out).items():
            per_kind[episode.kind][metric].append(ok)
            if not ok:
                failures[episode.kind].append({"metric": metric, "messages": out["messages"], "stop": out["stop_reason"]})
    overall: dict[str, list[bool]] = defaultdict(list)
    for kind in TOOL_KINDS:
        for metric, values in per_kind[kind].items():
            overall[metric] += values
    figures = {
        "model": args.model,
        "prompts": len(episodes),
        "overall": {m: round(sum(v) / len(v), 4) for m, v in overall.items()},
        "per_kind": {k: {m: round(sum(v) / len(v), 4) for m, v in ms.items()} for k, ms in per_kind.items()},
        "no_tool_for_chat": round(sum(per_kind["chat"]["no_tool_for_chat"]) / max(1, len(per_kind["chat"]["no_tool_for_chat"])), 4),
        "stop_reasons": dict(Counter(o["stop_reason"] for o in outputs)),
        "trajectories_with_token_drift": sum(1 for o in outputs if o.get("token_drift")),
        "mean_turns": round(sum(o["turns"] for o in outputs) / len(outputs), 2),
        "engine_start_s": round(start_s, 1),
        "rollout_s": round(rollout_s, 1),
    }
    for kind, items in failures.items():
        for item in items[: args.show_failures]:
            print(f"FAIL {kind} {item['metric']} ({item['stop']}): " + json.dumps(item["messages"], ensure_ascii=False)[:600])
    print(json.dumps(figures, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2) + "\n")
    sampler.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
