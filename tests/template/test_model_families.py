"""Template on real model families: real vocabularies built offline, the family's renderer, its
parsing of real-format completions, the chat-template path with vLLM's parsers, and options."""

from __future__ import annotations

import json

import pytest

from tests.support.real_tokenizers import deepseek_tokenizer, llama3_tokenizer, qwen3_tokenizer
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.template import IGNORE_INDEX, BridgeError, Template, renderer_names

pytest.importorskip("renderers")

TOOLS = [t.tool_info() for t in demo_tools()]
USER = [{"role": "user", "content": "Weather in Paris?"}]
QWEN_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def qwen3():
    return Template(tokenizer=qwen3_tokenizer(), renderer="qwen3")


def ids(template: Template, text: str) -> list[int]:
    return template.encode_text(text)


# -- the vocabularies ---------------------------------------------------------------------------------


def test_real_vocabularies_match_the_models_ids():
    qwen = qwen3_tokenizer()
    assert qwen.encode("Hello", add_special_tokens=False) == [9707]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "<tool_response>", "<think>", "</think>"]
    assert qwen.convert_tokens_to_ids(specials) == [151643, 151644, 151645, 151657, 151665, 151667, 151668]
    assert len(qwen) == 151669
    llama = llama3_tokenizer()
    assert llama.encode("Hello", add_special_tokens=False) == [9906]
    assert llama.convert_tokens_to_ids(["<|begin_of_text|>", "<|eom_id|>", "<|eot_id|>"]) == [128000, 128008, 128009]
    deepseek = deepseek_tokenizer()
    assert deepseek.encode("Hello!", add_special_tokens=False) == [19923, 3]
    assert deepseek.convert_tokens_to_ids(["<｜tool▁calls▁begin｜>", "<｜end▁of▁sentence｜>"]) == [128806, 1]


# -- choosing the path --------------------------------------------------------------------------------


def test_auto_resolves_the_family_from_the_model_name():
    assert Template(tokenizer=qwen3_tokenizer()).renderer_name == "qwen3"
    assert Template(tokenizer=llama3_tokenizer()).renderer_name == "llama-3"
    assert Template(tokenizer=deepseek_tokenizer()).renderer_name == "deepseek-v3"
    # a local directory named like the hub repository resolves too
    assert Template(tokenizer=qwen3_tokenizer("/models/Qwen3-8B")).renderer_name == "qwen3"


def test_a_model_no_renderer_covers_needs_a_chat_template(tmp_path, tiny_template):
    with pytest.raises(ValueError, match="no chat_template and no renderer covers it"):
        Template(tokenizer=qwen3_tokenizer("my-org/finetune"))
    assert tiny_template.renderer is None and tiny_template.parser.name == "hermes"  # the tiny model: unchanged
    path = tmp_path / "chatml.jinja"
    path.write_text(tiny_template.tokenizer.chat_template)
    from_file = Template(tokenizer=qwen3_tokenizer("my-org/finetune"), chat_template=str(path))
    assert from_file.renderer is None
    assert from_file.render(USER, add_generation_prompt=True) == tiny_template.render(USER, add_generation_prompt=True)
    with pytest.raises(ValueError, match="neither Jinja template text nor an existing file"):
        Template(tokenizer=qwen3_tokenizer("my-org/finetune"), chat_template=str(tmp_path / "missing.jinja"))


def test_bad_renderer_options_are_refused_with_the_fix():
    tok = qwen3_tokenizer()
    with pytest.raises(ValueError, match=r"unknown renderer 'qwen9'.*qwen3"):
        Template(tokenizer=tok, renderer="qwen9")
    with pytest.raises(ValueError, match="Unsupported chat_template_kwargs.*enable_thinking"):
        Template(tokenizer=tok, renderer="qwen3", chat_template_kwargs={"reasoning_effort": "high"})
    with pytest.raises(ValueError, match="drop one of them"):
        Template(tokenizer=tok, renderer="qwen3", chat_template="{{ messages }}")
    with pytest.raises(ValueError, match="does not fit this tokenizer"):
        Template(tokenizer=llama3_tokenizer(), renderer="qwen3")
    assert "glm-4.5" in renderer_names() and "default" not in renderer_names()


def test_chat_template_kwargs_reach_the_renderer():
    off = Template(tokenizer=qwen3_tokenizer(), renderer="qwen3", chat_template_kwargs={"enable_thinking": False})
    assert off.render(USER, add_generation_prompt=True).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    on = Template(tokenizer=qwen3_tokenizer(), renderer="qwen3")
    assert on.render(USER, add_generation_prompt=True).endswith("<|im_start|>assistant\n")


# -- Qwen3: parsing real completions ------------------------------------------------------------------


def test_qwen3_reasoning_and_a_tool_call_become_a_message_that_re_renders_exactly(qwen3):
    prompt = qwen3.encode({"messages": USER, "tools": TOOLS})["input_ids"]
    completion = ids(qwen3, "<think>\nI should look it up.\n</think>\n\n" + QWEN_CALL + "<|im_end|>")
    turn = qwen3.parse_turn(completion, prompt, TOOLS)
    assert turn.message["content"] == "" and turn.message["reasoning_content"] == "I should look it up."
    assert turn.tool_calls == [{"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert turn.malformed == 0
    call = dict(turn.tool_calls[0], id="call_1_0")
    rerendered = qwen3.encode({"messages": [*USER, {**turn.message, "tool_calls": [call]}], "tools": TOOLS}, False)
    assert rerendered["input_ids"] == prompt + completion + ids(qwen3, "\n")
    trained = [t for t, lab in zip(rerendered["input_ids"], rerendered["labels"], strict=True) if lab != IGNORE_INDEX]
    assert trained == completion  # exactly the sampled tokens (through <|im_end|>) are trainable


def test_qwen3_keeps_the_wire_arguments_text(qwen3):
    completion = ids(qwen3, '<tool_call>\n{"name": "calculator", "arguments": {"expression":"2+3"}}\n</tool_call><|im_end|>')
    turn = qwen3.parse_turn(completion, None, TOOLS)
    assert turn.tool_calls[0]["function"]["arguments"] == '{"expression":"2+3"}'  # as generated, not re-dumped


def test_qwen3_parallel_malformed_and_cut_calls(qwen3):
    parallel = ids(
        qwen3,
        "Two lookups.\n" + QWEN_CALL + "\n<tool_call>\n{not json}\n</tool_call>\n"
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 1"}}\n</tool_call><|im_end|>',
    )
    turn = qwen3.parse_turn(parallel, None, TOOLS)
    assert [c["function"]["name"] for c in turn.tool_calls] == ["get_weather", "calculator"]
    assert turn.malformed == 1 and "{not json}" in turn.message["content"] and "Two lookups." in turn.message["content"]
    cut = qwen3.parse_turn(ids(qwen3, '<think>\nok\n</think>\n\n<tool_call>\n{"name": "get_weather", "argu'), None, TOOLS)
    assert cut.tool_calls == [] and cut.malformed == 1 and '"argu' in cut.message["content"]
    thinking = qwen3.parse_turn(ids(qwen3, "<think>\nstill going"), None, TOOLS)
    assert thinking.tool_calls == [] and "still going" in thinking.message["reasoning_content"]


def test_qwen3_bridge_extends_the_sampled_stream_and_drift_shows_the_template_is_not_prefix_stable(qwen3):
    prompt = qwen3.encode({"messages": USER, "tools": TOOLS})["input_ids"]
    completion = ids(qwen3, "<think>\nLook it up.\n</think>\n\n" + QWEN_CALL + "<|im_end|>")
    turn = qwen3.parse_turn(completion, prompt, TOOLS)
    assistant = {**turn.message, "tool_calls": [dict(turn.tool_calls[0], id="c1")]}
    before = [*USER, assistant]
    after = [*before, {"role": "tool", "tool_call_id": "c1", "content": "Paris: sunny, 24 C"}]
    bridge = qwen3.bridge_ids(prompt, completion, before, after, TOOLS)
    assert qwen3.decode(bridge, False) == (
        "\n<|im_start|>user\n<tool_response>\nParis: sunny, 24 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    stream = prompt + completion + bridge
    assert qwen3.token_drift(stream, after, TOOLS) == 0  # within the tool cycle the re-render agrees
    # a new user query: Qwen3's template drops the earlier <think> block from the history it renders
    later = [*after, {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "And tomorrow?"}]
    final_turn = ids(qwen3, "Sunny.<|im_end|>")
    sampled = stream + final_turn + ids(qwen3, "\n<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n")
    assert qwen3.token_drift(sampled, later, TOOLS) > 0
    with pytest.raises(BridgeError, match="thinking-retention"):  # Qwen3 re-renders at a new user query
        qwen3.bridge_ids(stream, final_turn, later[:-1], later, TOOLS)


# -- two other families -------------------------------------------------------------------------------


def test_llama3_json_tool_call_with_the_renderer():
    llama = Template(tokenizer=llama3_tokenizer())
    prompt = llama.encode({"messages": USER, "tools": TOOLS})["input_ids"]
    assert prompt[0] == 128000 and llama.decode(prompt[-4:], False) == "<|start_header_id|>assistant<|end_header_id|>\n\n"
    completion = ids(llama, '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>')
    turn = llama.parse_turn(completion, prompt, TOOLS)
    assert turn.tool_calls == [{"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert llama.stop_token_ids() == [128009, 128001, 128008] and llama.ends_turn(completion)
    assistant = {**turn.message, "tool_calls": [dict(turn.tool_calls[0], id="c1")]}
    after = [*USER, assistant, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    bridge = llama.bridge_ids(prompt, completion, after[:2], after, TOOLS)
    assert llama.decode(bridge, False) == (
        '<|start_header_id|>ipython<|end_header_id|>\n\n"sunny"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'
    )
    assert llama.token_drift(prompt + completion + bridge, after, TOOLS) == 0  # Llama 3 is prefix-stable


def test_deepseek_v3_tool_call_with_the_renderer():
    ds = Template(tokenizer=deepseek_tokenizer(), renderer="deepseek-v3")
    prompt = ds.encode({"messages": USER, "tools": TOOLS})["input_ids"]
    completion = ids(
        ds,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
    )
    turn = ds.parse_turn(completion, prompt, TOOLS)
    assert turn.tool_calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assistant = {**turn.message, "tool_calls": [dict(turn.tool_calls[0], id="c1")]}
    after = [*USER, assistant, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    bridge = ds.bridge_ids(prompt, completion, after[:2], after, TOOLS)
    assert ds.decode(bridge, False) == "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
    assert ds.token_drift(prompt + completion + bridge, after, TOOLS) == 0


# -- the chat-template path ---------------------------------------------------------------------------


def test_chat_template_path_with_a_vllm_tool_parser(tiny_template):
    pytest.importorskip("vllm")
    chatml = tiny_template.tokenizer.chat_template
    template = Template(tokenizer=llama3_tokenizer(), renderer=None, chat_template=chatml, tool_call_parser="llama3_json")
    assert template.parser.name == "llama3_json"
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    turn = template.parse_turn(template.encode_text(text + "<|eot_id|>"))
    assert turn.tool_calls == [{"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert turn.message["content"] == ""
    assert template.parse_turn(template.encode_text("no call here")).message == {"role": "assistant", "content": "no call here"}
    with pytest.raises(ValueError, match=r"unknown tool_call_parser 'nope'.*llama3_json"):
        Template(tokenizer=tiny_template.tokenizer, renderer=None, tool_call_parser="nope")
    with pytest.raises(ValueError, match="'llama3_json' does not fit this tokenizer.*python_tag"):
        Template(tokenizer=tiny_template.tokenizer, renderer=None, tool_call_parser="llama3_json")


def test_a_template_that_tojsons_arguments_gets_dict_arguments(tiny_template):
    source = tiny_template.tokenizer.chat_template
    printed = "{%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- (fn.arguments or {}) | tojson -}}{%- endif -%}"
    assert printed in source
    tojson = source.replace(printed, "{{- fn.arguments | tojson -}}")  # as Qwen2.5's template writes it
    template = Template(tokenizer=tiny_template.tokenizer, renderer=None, chat_template=tojson)
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    turn = template.parse_turn(template.encode_text(text))
    assert turn.tool_calls[0]["function"]["arguments"] == {"city": "Paris"}
    assert template.render([*USER, {**turn.message, "tool_calls": turn.tool_calls}]).endswith(text + "<|im_end|>\n")
    plain = tiny_template.parse_turn(tiny_template.encode_text(text))  # the tiny model's template prints strings
    assert plain.tool_calls[0]["function"]["arguments"] == json.dumps({"city": "Paris"})


def test_a_parser_class_named_by_import_path(tiny_template):
    template = Template(
        tokenizer=tiny_template.tokenizer, renderer=None, tool_call_parser="twinkle_agentic.template.parsers:HermesToolCallParser"
    )
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert template.parse_turn(template.encode_text(text)).tool_calls == tiny_template.parse_turn(tiny_template.encode_text(text)).tool_calls
    with pytest.raises(ValueError, match="lacks parse"):
        Template(tokenizer=tiny_template.tokenizer, renderer=None, tool_call_parser="collections:OrderedDict")
