"""Rollouts on real model families (offline vocabularies, scripted real-format completions).

Both ``MultiTurnRollout`` and ``AsyncMultiTurnRollout`` must produce ``input_ids`` equal to the
stream rebuilt here straight from the family's renderer (prompt, then each sampled completion and
``bridge_to_next_turn``), with labels on exactly the sampled tokens, one logprob per sampled token,
tool calls parsed into messages, the renderer's stop tokens sent to the engine, and the right stop
reasons.
"""

from __future__ import annotations

import pytest

from tests.support.family_sampler import FamilySampler
from tests.support.real_tokenizers import (
    deepseek_tokenizer,
    glm45_tokenizer,
    llama3_tokenizer,
    qwen3_tokenizer,
    qwen36_tokenizer,
)
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.rollout import AsyncMultiTurnRollout, MultiTurnRollout
from twinkle_agentic.rollout.bookkeeping import IGNORE_INDEX, check_aligned
from twinkle_agentic.template import Template, messages_for_template
from twinkle_agentic.tools.tool_manager import ToolManager

pytest.importorskip("renderers")

TOOLS = [t.tool_info() for t in demo_tools()]


def qwen_call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


QWEN3_SCRIPT = {
    "KW": [
        "<think>\nI need the weather tool.\n</think>\n\n" + qwen_call("get_weather", '{"city": "Paris"}') + "<|im_end|>",
        "<think>\nThe tool answered.\n</think>\n\nIt is sunny and 24 C in Paris.<|im_end|>",
    ],
    "KP": [
        "<think>\nTwo tools at once.\n</think>\n\nChecking both.\n"
        + qwen_call("get_weather", '{"city": "Rome"}')
        + "\n"
        + qwen_call("calculator", '{"expression": "2 + 3"}')
        + "<|im_end|>",
        "<think>\nDone.\n</think>\n\nRome is sunny and 2 + 3 = 5.<|im_end|>",
    ],
    "KM": ["<think>\nOops.\n</think>\n\n<tool_call>\n{not json}\n</tool_call><|im_end|>"],
}
QWEN3_CUT = {"KC": ["<think>\nA long plan that goes on and on before the call.\n</think>\n\n" + qwen_call("get_weather", '{"city": "Oslo"}')]}

LLAMA3_SCRIPT = {
    "KW": [
        '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
        "It is sunny and 24 C in Paris.<|eot_id|>",
    ],
    "KM": ['{"name": "get_weather", "parameters": {"city": <|eot_id|>'],
}
DEEPSEEK_SCRIPT = {
    "KW": [
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
        "It is sunny and 24 C in Paris.<｜end▁of▁sentence｜>",
    ],
}

GLM45_SCRIPT = {  # a built vocabulary: GLM-4.5's format and markers over Qwen's BPE
    "KW": [
        "\n<think>I need the tool.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        "<arg_value>Paris</arg_value>\n</tool_call><|observation|>",
        "\n<think>Done.</think>\nIt is sunny and 24 C in Paris.<|user|>",
    ],
}

QWEN36_SCRIPT = {  # the generation prompt opens <think>: completions start inside the reasoning
    "KW": [
        "I need the tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n</function>\n</tool_call><|im_end|>",
        "Done.\n</think>\n\nIt is sunny and 24 C in Paris.<|im_end|>",
    ],
}

FAMILIES = {
    "qwen3": (qwen3_tokenizer, "qwen3", QWEN3_SCRIPT),
    "llama-3": (llama3_tokenizer, "llama-3", LLAMA3_SCRIPT),
    "deepseek-v3": (deepseek_tokenizer, "deepseek-v3", DEEPSEEK_SCRIPT),
    "glm-4.5": (glm45_tokenizer, "glm-4.5", GLM45_SCRIPT),
    "qwen3.6": (qwen36_tokenizer, "qwen3.6", QWEN36_SCRIPT),
}
# what each family's messages store as arguments: the wire JSON text, or a dict where the format
# serializes arguments itself (GLM's XML key/value pairs)
ARGUMENTS = {"llama-3": '{"city": "Paris"}', "deepseek-v3": '{"city": "Paris"}', "glm-4.5": {"city": "Paris"}, "qwen3.6": {"city": "Paris"}}


def trajectory(key: str) -> dict:
    return {"messages": [{"role": "user", "content": f"[{key}] Please help."}]}


def run(kind: str, template: Template, sampler: FamilySampler, keys: list[str], **params) -> list[dict]:
    manager = ToolManager(demo_tools())
    sampling = {"max_tokens": 200, **params}
    if kind == "sync":
        return MultiTurnRollout(sampler, template, manager, sampling_params=sampling)([trajectory(k) for k in keys])
    rollout = AsyncMultiTurnRollout(sampler, template, manager, sampling_params=sampling)
    try:
        return rollout([trajectory(k) for k in keys])
    finally:
        rollout.close()


def expected_stream(template: Template, sampler: FamilySampler, out: dict, key: str) -> tuple[list[int], list[int], list[float]]:
    """The stream rebuilt from the renderer alone: prompt, then completion + bridge per turn."""
    renderer = template.renderer.renderer
    messages = messages_for_template(out["messages"])
    stream = renderer.render_ids(messages[:1], tools=TOOLS, add_generation_prompt=True)
    labels, logprobs = [IGNORE_INDEX] * len(stream), []
    requests = [r for r in sampler.requests if r[0] == key]
    assistants = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    assert len(requests) == len(assistants) == out["turns"]
    for n, ((_, prompt, completion, _, _), at) in enumerate(zip(requests, assistants, strict=True)):
        assert prompt == stream, f"turn {n + 1}'s prompt is not the bridged stream"
        labels += completion
        logprobs += [-0.01 * (k + 1) for k in range(len(completion))]
        if n + 1 < len(requests):
            new = messages[at + 1 : assistants[n + 1]]
            bridged = renderer.bridge_to_next_turn(stream, completion, new, tools=TOOLS).token_ids
            assert bridged[: len(stream) + len(completion)] == stream + completion
            labels += [IGNORE_INDEX] * (len(bridged) - len(stream) - len(completion))
            stream = bridged
        else:
            stream = stream + completion
    return stream, labels, logprobs


def check_stream(template: Template, sampler: FamilySampler, out: dict, key: str) -> None:
    ids, labels, logprobs = expected_stream(template, sampler, out, key)
    assert out["input_ids"] == ids
    assert out["labels"] == labels
    assert out["logprobs"] == pytest.approx(logprobs)
    check_aligned(out)
    assert isinstance(out["token_drift"], int)
    stops = template.stop_token_ids()
    assert all(set(stops) <= set(r[4].stop_token_ids) for r in sampler.requests)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_qwen3_rollouts_follow_the_sampled_stream(kind):
    template = Template(tokenizer=qwen3_tokenizer(), renderer="qwen3")
    sampler = FamilySampler(template, QWEN3_SCRIPT)
    weather, parallel, malformed = run(kind, template, sampler, ["KW", "KP", "KM"])
    for out, key in ((weather, "KW"), (parallel, "KP"), (malformed, "KM")):
        check_stream(template, sampler, out, key)

    assert (weather["stop_reason"], weather["turns"], weather["truncated"]) == ("stop", 2, False)
    first, tool, final = weather["messages"][1:]
    assert first["reasoning_content"] == "I need the weather tool." and first["content"] == ""
    assert first["tool_calls"] == [
        {"id": "call_1_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]
    assert tool == {"role": "tool", "tool_call_id": "call_1_0", "content": "Paris: sunny, 24 C"}
    assert final == {"role": "assistant", "content": "It is sunny and 24 C in Paris.", "reasoning_content": "The tool answered."}
    assert weather["token_drift"] == 0  # within one tool cycle Qwen3's re-render keeps the reasoning

    calls = parallel["messages"][1]["tool_calls"]
    assert [(c["id"], c["function"]["name"]) for c in calls] == [("call_1_0", "get_weather"), ("call_1_1", "calculator")]
    assert [(m["tool_call_id"], m["content"]) for m in parallel["messages"][2:4]] == [
        ("call_1_0", "Rome: sunny, 28 C"),
        ("call_1_1", "5"),
    ]
    assert parallel["messages"][1]["content"] == "Checking both."

    assert (malformed["stop_reason"], malformed["turns"]) == ("stop", 1)
    assert "tool_calls" not in malformed["messages"][1]
    assert malformed["messages"][1]["content"] == "<tool_call>\n{not json}\n</tool_call>"  # the block as generated
    assert parallel["token_drift"] == malformed["token_drift"] == 0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_qwen3_a_completion_cut_by_length_ends_the_trajectory(kind):
    template = Template(tokenizer=qwen3_tokenizer(), renderer="qwen3")
    sampler = FamilySampler(template, QWEN3_CUT)
    (out,) = run(kind, template, sampler, ["KC"], max_tokens=30)
    check_stream(template, sampler, out, "KC")
    assert (out["stop_reason"], out["truncated"], out["turns"]) == ("length", True, 1)
    assert len(out["logprobs"]) == 30 and "tool_calls" not in out["messages"][1]
    assert out["messages"][1]["reasoning_content"].startswith("A long plan")
    assert out["token_drift"] == 0  # the cut turn re-renders without its close


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("family", ["llama-3", "deepseek-v3", "glm-4.5", "qwen3.6"])
def test_other_families_follow_the_sampled_stream(kind, family):
    build, name, script = FAMILIES[family]
    template = Template(tokenizer=build(), renderer=name)
    sampler = FamilySampler(template, script)
    results = run(kind, template, sampler, list(script))
    for out, key in zip(results, script, strict=True):
        check_stream(template, sampler, out, key)
    weather = results[0]
    assert (weather["stop_reason"], weather["turns"]) == ("stop", 2)
    assert weather["messages"][1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ARGUMENTS[family]}
    if family in ("glm-4.5", "qwen3.6"):  # reasoning families: the <think> block is reasoning_content
        assert weather["messages"][1]["reasoning_content"].strip() == "I need the tool."
    assert weather["messages"][2]["content"] == "Paris: sunny, 24 C"
    assert weather["messages"][3]["content"].strip() == "It is sunny and 24 C in Paris."  # GLM keeps its leading newline
    assert weather["token_drift"] == 0  # the re-render of a tool cycle equals the stream
    if family == "llama-3":  # a malformed JSON call is the assistant's content; nothing runs
        malformed = results[1]
        assert (malformed["stop_reason"], malformed["turns"]) == ("stop", 1)
        assert malformed["messages"][1]["content"].startswith('{"name": "get_weather"')
        assert "tool_calls" not in malformed["messages"][1]
        assert malformed["token_drift"] == 1  # Llama 3's template trims content: the space before <|eot_id|>
