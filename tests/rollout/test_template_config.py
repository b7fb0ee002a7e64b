"""The rollout job's ``template:`` section: checked once at startup with the option and the fix named."""

from __future__ import annotations

import pytest
from twinkle_agentic.jobs.rollout.config import ConfigError, config_from_mapping

from twinkle_agentic.template.options import check_template_options

pytest.importorskip("renderers")


def validate(template):
    return config_from_mapping({"prompts": "p.jsonl", "output": "out", "template": template}).validate()


def test_a_family_and_its_template_kwargs_pass():
    cfg = validate({"renderer": "qwen3", "chat_template_kwargs": {"enable_thinking": True}})
    assert cfg.rollout.template == {"renderer": "qwen3", "chat_template_kwargs": {"enable_thinking": True}}
    validate({"renderer": "auto", "tool_call_parser": "hermes", "max_length": 4096})
    validate({})


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ({"renderr": "qwen3"}, r"unknown template option\(s\) \['renderr'\]; the options are \['renderer'"),
        ({"renderer": "qwen9"}, r"template.renderer 'qwen9' is not a renderers family; use 'auto', null or one of .*qwen3"),
        ({"renderer": "qwen3", "chat_template_kwargs": {"thinking": True}}, r"chat_template_kwargs for renderer 'qwen3'.*enable_thinking"),
        ({"renderer": "qwen3", "chat_template": "{{ messages }}"}, "drop one of them"),
        ({"chat_template": "no/such/template.jinja"}, "neither Jinja template text nor an existing file"),
        ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs must be a mapping"),
        ({"truncation_strategy": "split"}, "truncation_strategy must be one of"),
        ({"max_length": 0}, "max_length must be an integer >= 1"),
    ],
)
def test_bad_template_options_are_refused_at_startup(template, message):
    with pytest.raises(ConfigError, match=message):
        validate(template)


def test_a_chat_template_file_passes(tmp_path):
    path = tmp_path / "chat.jinja"
    path.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert check_template_options({"renderer": None, "chat_template": str(path)})["chat_template"] == str(path)


def test_an_unknown_tool_parser_lists_vllms():
    pytest.importorskip("vllm")
    with pytest.raises(ValueError, match=r"tool_call_parser 'nope' is unknown; registered: \[.*'hermes'.*\], vLLM's: .*llama3_json"):
        check_template_options({"tool_call_parser": "nope"})
    check_template_options({"renderer": None, "tool_call_parser": "llama3_json"})


def test_a_parser_named_by_import_path():
    spec = "twinkle_agentic.template.parsers:HermesToolCallParser"
    validate({"renderer": None, "tool_call_parser": spec})
    with pytest.raises(ConfigError, match="cannot import module 'no_such_pkg.parsers'"):
        validate({"renderer": None, "tool_call_parser": "no_such_pkg.parsers:Mine"})
