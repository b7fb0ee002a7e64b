"""MultiTurnRollout's bookkeeping with a scripted sampler: every SPEC 17.2 rule, no engine.

The tiny model's real tokenizer and chat template are used, so the bridge, the end-of-turn marker and
the drift check run exactly as they do on vLLM.
"""

from __future__ import annotations

import json
import logging

import pytest

from tests.support.scripted_sampler import ScriptedSampler, call_text
from tests.support.trajectory_checks import assert_trajectory_tokens
from twinkle_agentic.data_format import SampledSequence, SamplingParams
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.rollout.bookkeeping import TokenLedger, Turn, check_aligned, chosen_logprobs
from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
from twinkle_agentic.rollout.trajectory_state import TrajectoryState, run_tool_calls
from twinkle_agentic.sampler.base import DeviceMesh
from twinkle_agentic.tools.tool_manager import ToolManager

WEATHER = call_text("get_weather", '{"city": "Paris"}')
CALC = call_text("calculator", '{"expression": "2 + 3"}')
SCRIPT = {
    "Paris": [WEATHER, "It is sunny and 24 C in Paris."],
    "2 + 3": [CALC, "The answer is 5."],
    "Hello": ["Hello! I can check the weather or do math for you."],
    "Both": [f"Checking both.\n{WEATHER}\n{CALC}", "Done: 24 C and 5."],
}


def traj(text: str, **extra):
    return {"messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture
def manager():
    return ToolManager(demo_tools())


def rollout(template, manager, script=SCRIPT, **kw):
    sampler_kw = {k: kw.pop(k) for k in ("end_with_eot", "with_logprobs", "logprob_pairs", "stop_reason", "device_mesh") if k in kw}
    sampler = ScriptedSampler(template, script, **sampler_kw)
    return MultiTurnRollout(sampler, template, tool_manager=manager, **kw), sampler


# -- Turn / TokenLedger / check_aligned ---------------------------------------------------------------


def test_turn_labels_and_logprobs():
    turn = Turn.of([5, 6], [-0.1, -0.2], [7, 8, 9])
    assert turn.input_ids() == [5, 6, 7, 8, 9]
    assert turn.labels() == [5, 6, -100, -100, -100]
    assert turn.logprobs() == [-0.1, -0.2]
    with pytest.raises(ValueError, match="1 logprobs for 2"):
        Turn.of([5, 6], [-0.1])


def test_ledger_only_appends_and_stays_aligned():
    ledger = TokenLedger([1, 2, 3])
    ledger.append(Turn.of([4], [-0.5], [8, 9]))
    ledger.append(Turn.of([5, 6], [-0.1, -0.2]))
    feature = ledger.feature()
    assert feature["input_ids"] == [1, 2, 3, 4, 8, 9, 5, 6]
    assert feature["labels"] == [-100, -100, -100, 4, -100, -100, 5, 6]
    assert feature["logprobs"] == [-0.5, -0.1, -0.2]
    assert len(ledger) == feature["length"] == 8
    check_aligned(feature, generated_tokens=3)
    ledger.append(Turn.of([7], None))
    assert ledger.logprobs() is None


@pytest.mark.parametrize(
    "feature, message",
    [
        ({"input_ids": [1, 2], "labels": [1]}, "len\\(input_ids\\)=2 != len\\(labels\\)=1"),
        ({"input_ids": [1, 2], "labels": [-100, 3]}, "neither -100 nor its input id 2"),
        ({"input_ids": [1, 2], "labels": [-100, 2], "logprobs": [-0.1, -0.2]}, "2 logprobs for 1 trainable"),
        ({"input_ids": [1], "labels": [1], "attention_mask": [1, 1]}, "len\\(attention_mask\\)"),
        ({"input_ids": [1], "labels": [1], "length": 3}, "length=3"),
    ],
)
def test_check_aligned_names_the_violation(feature, message):
    with pytest.raises(RuntimeError, match=message):
        check_aligned(feature)


@pytest.mark.parametrize(
    "tokens, logprobs, expected",
    [
        ([1, 2], [-0.1, -0.2], [-0.1, -0.2]),
        ([1, 2], [[(9, -5.0), (1, -0.1)], [(2, -0.2)]], [-0.1, -0.2]),  # the matching pair
        ([1], [[(9, -5.0), (8, -6.0)]], [-5.0]),  # else the first pair
        ([1, 2], [-0.1], None),  # partial
        ([1], None, None),
        ([1], [None], None),
    ],
)
def test_chosen_logprobs(tokens, logprobs, expected):
    assert chosen_logprobs(tokens, logprobs) == expected


# -- the rollout with a scripted sampler -----------------------------------------------------------------


def test_multi_turn_tool_use_bookkeeping(tiny_template, manager):
    ro, sampler = rollout(tiny_template, manager)
    inputs = [traj("Weather in Paris?", user_data=[("id", '"p1"')]), traj("What is 2 + 3?"), traj("Hello")]
    out = ro(inputs)
    assert [t["stop_reason"] for t in out] == ["stop", "stop", "stop"]
    assert [t["turns"] for t in out] == [2, 2, 1]
    assert [t["truncated"] for t in out] == [False, False, False]
    assert [n for n, _ in sampler.calls] == [3, 2]  # one batched call per turn over active trajectories
    for t in out:
        assert_trajectory_tokens(t, tiny_template, n_input_messages=1)
    weather = out[0]
    assert weather["user_data"] == [("id", '"p1"')]  # unrelated keys pass through
    assert [m["role"] for m in weather["messages"]] == ["user", "assistant", "tool", "assistant"]
    call = weather["messages"][1]["tool_calls"][0]
    assert call == {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}, "id": "call_1_0"}
    assert weather["messages"][2] == {"role": "tool", "tool_call_id": "call_1_0", "content": "Paris: sunny, 24 C"}
    assert weather["tools"] == manager.tool_infos()
    assert inputs[0]["messages"] == [{"role": "user", "content": "Weather in Paris?"}]  # inputs untouched


def test_two_calls_in_one_turn_and_content_kept(tiny_template, manager):
    ro, _ = rollout(tiny_template, manager)
    [out] = ro([traj("Both please")])
    assistant = out["messages"][1]
    assert assistant["content"] == "Checking both."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1_0", "call_1_1"]
    assert [m["content"] for m in out["messages"][2:4]] == ["Paris: sunny, 24 C", "5"]
    assert_trajectory_tokens(out, tiny_template, n_input_messages=1)


def test_bridge_adds_end_of_turn_when_generation_lacks_it(tiny_template, manager):
    """A stop-string stop leaves no <|im_end|> in the generated tokens: the bridge supplies it."""
    ro, _ = rollout(tiny_template, manager, end_with_eot=False)
    [out] = ro([traj("Weather in Paris?")])
    first_gen = tiny_template.encode_text(WEATHER)
    start = out["labels"].index(first_gen[0])
    bridge_start = start + len(first_gen)
    assert out["input_ids"][bridge_start] == tiny_template.end_of_turn_id
    assert out["labels"][bridge_start] == -100
    assert_trajectory_tokens(out, tiny_template, n_input_messages=1)


def test_max_turns_does_not_execute_tools(tiny_template):
    calls = []

    class Recording(ToolManager):
        def __call__(self, tool_call):
            calls.append(tool_call)
            return super().__call__(tool_call)

    ro, _ = rollout(tiny_template, Recording(demo_tools()), max_turns=1)
    [out] = ro([traj("Weather in Paris?")])
    assert (out["stop_reason"], out["truncated"], out["turns"]) == ("max_turns", True, 1)
    assert calls == [] and out["messages"][-1]["role"] == "assistant"
    assert_trajectory_tokens(out, tiny_template, n_input_messages=1)


def test_sampler_length_stop_is_length_and_truncated(tiny_template, manager):
    ro, _ = rollout(tiny_template, manager, sampling_params=SamplingParams(max_tokens=5))
    [out] = ro([traj("Weather in Paris?")])
    assert (out["stop_reason"], out["truncated"], out["turns"]) == ("length", True, 1)
    assert sum(label != -100 for label in out["labels"]) == 5
    assert_trajectory_tokens(out, tiny_template, n_input_messages=1)


def test_trajectory_budget_caps_generation_and_stops(tiny_template, manager):
    probe, _ = rollout(tiny_template, manager)
    prompt_len = len(tiny_template.encode({"messages": traj("Weather in Paris?")["messages"], "tools": manager.tool_infos()})["input_ids"])
    budget = prompt_len + 10
    ro, sampler = rollout(tiny_template, manager, max_trajectory_tokens=budget, sampling_params=SamplingParams(max_tokens=64))
    [out] = ro([traj("Weather in Paris?")])
    assert sampler.calls == [(1, [10])]  # max_tokens capped at the room left
    assert (out["stop_reason"], out["truncated"], out["length"]) == ("length", True, budget)
    assert_trajectory_tokens(out, tiny_template, n_input_messages=1)


def test_bridge_over_budget_ends_with_length_and_keeps_bridge(tiny_template, manager):
    prompt_len = len(tiny_template.encode({"messages": traj("Weather in Paris?")["messages"], "tools": manager.tool_infos()})["input_ids"])
    generated = len(tiny_template.encode_text(WEATHER)) + 1
    budget = prompt_len + generated + 3  # room for the call, not for the tool result
    ro, _ = rollout(tiny_template, manager, max_trajectory_tokens=budget)
    [out] = ro([traj("Weather in Paris?")])
    assert (out["stop_reason"], out["turns"]) == ("length", 1)
    assert out["length"] > budget and out["messages"][-1]["role"] == "tool"
    assert_trajectory_tokens(out, tiny_template, n_input_messages=1)


def test_prompt_longer_than_budget_never_samples(tiny_template, manager):
    ro, sampler = rollout(tiny_template, manager, max_trajectory_tokens=8)
    [out] = ro([traj("Weather in Paris?")])
    assert (out["stop_reason"], out["turns"], sampler.calls) == ("length", 0, [])
    assert all(label == -100 for label in out["labels"]) and out["logprobs"] == []


def test_prompt_over_template_max_length_is_length(tiny_template, manager):
    from twinkle_agentic.template import Template

    short = Template(tokenizer=tiny_template.tokenizer, max_length=16)
    ro = MultiTurnRollout(ScriptedSampler(short, SCRIPT), short, tool_manager=manager)
    [out] = ro([traj("Weather in Paris?")])
    assert (out["stop_reason"], out["turns"], out["input_ids"], out["logprobs"]) == ("length", 0, [], [])


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_engine_abort_or_error_is_error(tiny_template, manager, reason):
    ro, _ = rollout(tiny_template, manager, stop_reason=reason)
    [out] = ro([traj("Weather in Paris?")])
    assert (out["stop_reason"], out["truncated"]) == ("error", True)
    assert reason in out["error"]


def test_tool_manager_exception_fails_only_that_trajectory(tiny_template, manager):
    class Broken(ToolManager):
        def __call__(self, tool_call):
            raise OSError("disk on fire")

    ro, _ = rollout(tiny_template, manager)
    out = ro([traj("Weather in Paris?"), traj("What is 2 + 3?")], tool_manager=[Broken(demo_tools()), manager])
    assert (out[0]["stop_reason"], out[0]["error"]) == ("error", "ToolExecution OSError: disk on fire")
    assert out[1]["stop_reason"] == "stop"
    check_aligned(out[0])


def test_tool_manager_factory_failure_fails_only_that_trajectory(tiny_template, manager):
    def factory(trajectory):
        if "Paris" in trajectory["messages"][0]["content"]:
            raise ConnectionError("env server down")
        return manager

    ro, _ = rollout(tiny_template, factory)
    out = ro([traj("Weather in Paris?"), traj("What is 2 + 3?")])
    assert (out[0]["stop_reason"], out[0]["turns"], out[0]["error"]) == ("error", 0, "ToolManager ConnectionError: env server down")
    assert out[1]["stop_reason"] == "stop"
    check_aligned(out[0])


def test_bridge_failure_fails_only_that_trajectory(tiny_template, manager, monkeypatch):
    ro, _ = rollout(tiny_template, manager)
    real_render = tiny_template.render

    def render(messages, tools=None, add_generation_prompt=False):
        text = real_render(messages, tools, add_generation_prompt)
        if any(m.get("content") == "Paris: sunny, 24 C" for m in messages):
            return "<rewritten>" + text
        return text

    monkeypatch.setattr(tiny_template, "render", render)
    out = ro([traj("Weather in Paris?"), traj("What is 2 + 3?")])
    assert out[0]["stop_reason"] == "error" and out[0]["error"].startswith("BridgeError")
    assert out[1]["stop_reason"] == "stop"


def test_missing_logprobs_give_none_and_a_warning(tiny_template, manager, caplog):
    ro, _ = rollout(tiny_template, manager, with_logprobs=False)
    with caplog.at_level(logging.WARNING):
        [out] = ro([traj("Hello")])
    assert out["logprobs"] is None and "no logprobs" in caplog.text
    check_aligned(out)


def test_logprob_pairs_pick_the_sampled_token(tiny_template, manager):
    ro, _ = rollout(tiny_template, manager, logprob_pairs=True)
    [out] = ro([traj("Hello")])
    n = sum(label != -100 for label in out["labels"])
    assert out["logprobs"] == pytest.approx([-0.01 * (k + 1) for k in range(n)])


def test_data_parallel_padding_repeats_last_and_trims(tiny_template, manager):
    ro, sampler = rollout(tiny_template, manager, device_mesh=DeviceMesh(data_world_size=4))
    out = ro([traj("Weather in Paris?"), traj("What is 2 + 3?"), traj("Hello")])
    assert [n for n, _ in sampler.calls] == [4, 4]  # 3 -> 4, then 2 -> 4
    assert [t["stop_reason"] for t in out] == ["stop"] * 3


def test_wrong_response_count_is_runtime_error(tiny_template, manager):
    class Short(ScriptedSampler):
        def sample(self, inputs, sampling_params=None):
            return super().sample(inputs, sampling_params)[:-1]

    ro = MultiTurnRollout(Short(tiny_template, SCRIPT), tiny_template, tool_manager=manager)
    with pytest.raises(RuntimeError, match="1 responses for 2 inputs"):
        ro([traj("Hello"), traj("Weather in Paris?")])


def test_traces_and_global_step(tiny_template, manager, tmp_path):
    trace_dir = tmp_path / "traces"
    ro, _ = rollout(tiny_template, manager, trace_dir=str(trace_dir), success_callback=lambda t: t["stop_reason"] == "stop")
    assert trace_dir.is_dir()  # created eagerly
    ro([traj("Weather in Paris?", user_data=[("id", '"hotpot/42"')])], global_step=42)
    [path] = list(trace_dir.iterdir())
    assert path.name == "step000042-ok-hotpot_42.json"
    record = json.loads(path.read_text())
    assert record["turns"] == 2 and "input_ids" not in record and "logprobs" not in record


def test_per_call_arguments_and_input_checks(tiny_template, manager):
    ro, sampler = rollout(tiny_template, None)
    with pytest.raises(ValueError, match="no tool_manager"):
        ro([traj("Hello")])
    with pytest.raises(ValueError, match="2 entries for 1"):
        ro([traj("Hello")], tool_manager=[manager, manager])
    with pytest.raises(TypeError, match="single dict"):
        ro(traj("Hello"), tool_manager=manager)
    assert ro([], tool_manager=manager) == []
    [out] = ro([traj("Hello")], tool_manager=manager, sampling_params={"max_tokens": 3})
    assert out["stop_reason"] == "length" and sampler.calls[-1] == (1, [3])


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"template": None}, "needs a template"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_trajectory_tokens": 0}, "max_trajectory_tokens"),
        ({"sampling_params": SamplingParams(num_samples=2)}, "num_samples"),
    ],
)
def test_construction_checks(tiny_template, kwargs, error):
    args = {"sampler": ScriptedSampler(tiny_template, SCRIPT), "template": tiny_template, **kwargs}
    with pytest.raises(ValueError, match=error):
        MultiTurnRollout(**args)


def test_split_truncation_is_refused(tiny_template):
    class SplitTemplate:
        truncation_strategy = "split"

    with pytest.raises(ValueError, match="split"):
        MultiTurnRollout(ScriptedSampler(tiny_template, SCRIPT), SplitTemplate())


def test_state_machine_driven_alone_matches_the_batched_loop(tiny_template, manager):
    """What an asynchronous driver does: one trajectory, start/on_generation/on_tools by hand."""
    sampler = ScriptedSampler(tiny_template, SCRIPT)
    params = SamplingParams(logprobs=0)
    state = TrajectoryState(traj("Weather in Paris?"), tiny_template, tools=manager.tool_infos())
    ids = state.start()
    while ids is not None:
        seq = sampler.reply(ids, params.replace(max_tokens=state.max_new_tokens(None)))
        calls = state.on_generation(seq)
        if calls is None:
            break
        ids = state.on_tools(run_tool_calls(manager, calls))
    alone = state.result()
    ro, _ = rollout(tiny_template, manager)
    [batched] = ro([traj("Weather in Paris?")])
    for key in ("input_ids", "labels", "logprobs", "messages", "stop_reason", "turns", "token_drift"):
        assert alone[key] == batched[key], key
    with pytest.raises(RuntimeError, match="not running"):
        state.on_generation(SampledSequence(tokens=[1]))
