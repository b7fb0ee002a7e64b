"""The checks on a config file's ``template:`` section, before any tokenizer is loaded.

A rollout job builds its ``Template`` on every worker; a misspelt option or an unknown family would
fail there, once per engine, minutes into the run. ``check_template_options`` answers at startup
with the option, what is wrong and what would be accepted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .template import TRUNCATION_STRATEGIES

TEMPLATE_OPTIONS = (
    "renderer",
    "chat_template",
    "chat_template_kwargs",
    "tool_call_parser",
    "max_length",
    "truncation_strategy",
    "end_of_turn",
    "turn_suffix",
    "trust_remote_code",
)


def check_template_options(options: Any) -> dict[str, Any]:
    """``options`` (``Template`` keyword arguments from YAML) as a dict, or ``ValueError`` naming the
    problem: an unknown key, a wrong type, an unknown renderer family or tool parser, template kwargs
    the family does not accept, a chat-template file that does not exist, or a renderer together
    with a chat template."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"template must be a mapping of Template options, got {type(options).__name__}")
    options = dict(options)
    unknown = sorted(set(options) - set(TEMPLATE_OPTIONS))
    if unknown:
        raise ValueError(f"unknown template option(s) {unknown}; the options are {list(TEMPLATE_OPTIONS)}")
    renderer = options.get("renderer", "auto")
    kwargs = options.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ValueError(f"template.chat_template_kwargs must be a mapping, got {type(kwargs).__name__}")
    _check_renderer(renderer, kwargs, options.get("chat_template"))
    _check_chat_template(options.get("chat_template"))
    _check_parser(options.get("tool_call_parser"))
    max_length = options.get("max_length")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise ValueError(f"template.max_length must be an integer >= 1, got {max_length!r}")
    strategy = options.get("truncation_strategy", "raise")
    if strategy not in TRUNCATION_STRATEGIES:
        raise ValueError(f"template.truncation_strategy must be one of {TRUNCATION_STRATEGIES}, got {strategy!r}")
    for name in ("end_of_turn", "turn_suffix"):
        if options.get(name) is not None and not isinstance(options[name], str):
            raise ValueError(f"template.{name} must be a string, got {type(options[name]).__name__}")
    if not isinstance(options.get("trust_remote_code", False), bool):
        raise ValueError("template.trust_remote_code must be true or false")
    return options


def _check_renderer(renderer: Any, kwargs: Mapping[str, Any] | None, chat_template: Any) -> None:
    if renderer is None or renderer == "auto":
        return
    from .renderer_backend import renderer_names

    names = renderer_names()
    if not isinstance(renderer, str) or renderer not in names:
        raise ValueError(f"template.renderer {renderer!r} is not a renderers family; use 'auto', null or one of {names}")
    if chat_template is not None:
        raise ValueError(
            f"template.renderer {renderer!r} renders without a chat template, so template.chat_template would be "
            "ignored; drop one of them (renderer: null for the chat-template path)"
        )
    if kwargs:
        from renderers.base import merge_chat_template_kwargs
        from renderers.configs import config_from_name

        try:
            merge_chat_template_kwargs(config_from_name(renderer), kwargs)
        except Exception as exc:
            raise ValueError(f"template.chat_template_kwargs for renderer {renderer!r}: {exc}") from exc


def _check_chat_template(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"template.chat_template must be template text or a file path, got {value!r}")
    if "{%" not in value and "{{" not in value and not os.path.isfile(value):
        raise ValueError(f"template.chat_template {value!r} is neither Jinja template text nor an existing file")


def _check_parser(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"template.tool_call_parser must be a parser name, got {value!r}")
    from .parsers import registered_parser_names
    from .vllm_parsers import vllm_parser_names

    if value in registered_parser_names():
        return
    if ":" in value:  # an import path: the class or factory must load
        from twinkle_agentic.loading import load_object

        if not callable(load_object(value, what="template.tool_call_parser")):
            raise ValueError(f"template.tool_call_parser {value!r} is not a class or factory of parsers")
        return
    names = vllm_parser_names()
    if value not in names:
        raise ValueError(
            f"template.tool_call_parser {value!r} is unknown; registered: {registered_parser_names()}"
            + (f", vLLM's: {sorted(names)}" if names else " (vLLM's tool parsers need vllm installed)")
        )
