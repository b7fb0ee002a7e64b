"""Tool-call parsers: model text -> OpenAI tool calls, and the text with those calls removed.

A parser is registered by name (``register_tool_call_parser``) so a ``Template`` can be configured
with a string; a name registered nowhere here is looked up among vLLM's tool parsers
(``vllm.tool_parsers``: ``llama3_json``, ``mistral``, ``deepseek_v3``, ...; see ``vllm_parsers.py``),
and ``"package.module:Name"`` imports a parser class or factory (so a config file can name one). ``clean`` removes exactly the blocks ``parse`` turned into calls: a malformed block
stays in the assistant's content, so re-rendering the message reproduces what the model generated
and nothing it said is silently lost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from twinkle_agentic.data_format import ToolCall


class ToolCallParser(Protocol):
    name: str

    def parse(self, text: str) -> list[ToolCall]:
        """The well-formed tool calls in ``text``, in order; ids are left to the caller."""

    def clean(self, text: str) -> str:
        """``text`` without the blocks ``parse`` accepted, whitespace-trimmed; unchanged when there are none."""


def canonical_arguments(arguments: Any) -> str:
    """The JSON-string form the chat template renders back unchanged (``json.dumps``, unicode kept)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


class HermesToolCallParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen2.5, Qwen3)."""

    name = "hermes"
    BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

    def _calls(self, text: str) -> list[tuple[re.Match[str], ToolCall]]:
        found = []
        for match in self.BLOCK.finditer(text or ""):
            try:
                body = json.loads(match.group(1))
            except ValueError:
                continue
            if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
                continue
            arguments = body.get("arguments", body.get("parameters", {}))
            call: ToolCall = {
                "type": "function",
                "function": {"name": body["name"], "arguments": canonical_arguments(arguments)},
            }
            found.append((match, call))
        return found

    def parse(self, text: str) -> list[ToolCall]:
        return [call for _, call in self._calls(text)]

    def clean(self, text: str) -> str:
        text = text or ""
        calls = self._calls(text)
        if not calls:  # nothing to remove: the text stays exactly as generated
            return text
        pieces, last = [], 0
        for match, _ in calls:
            pieces.append(text[last : match.start()])
            last = match.end()
        pieces.append(text[last:])
        return "".join(pieces).strip()


_PARSERS: dict[str, Callable[[], ToolCallParser]] = {"hermes": HermesToolCallParser}


def register_tool_call_parser(name: str, factory: Callable[[], ToolCallParser]) -> None:
    """Make ``Template(tool_call_parser=name)`` build parsers with ``factory()``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool-call parser name must be a non-empty string, got {name!r}")
    _PARSERS[name] = factory


def get_tool_call_parser(parser: str | ToolCallParser, tokenizer: Any = None) -> ToolCallParser:
    """A parser instance from a registered name, a vLLM tool parser's name (it needs ``tokenizer``), or
    ``parser`` itself when it already is one."""
    if not isinstance(parser, str):
        if not (hasattr(parser, "parse") and hasattr(parser, "clean")):
            raise TypeError(f"tool_call_parser must be a name or have parse() and clean(), got {type(parser).__name__}")
        return parser
    factory = _PARSERS.get(parser)
    if factory is not None:
        return factory()
    if ":" in parser:  # "package.module:Name" from a config file: a parser class or factory
        return _imported_parser(parser, tokenizer)
    from .vllm_parsers import VLLMToolCallParser, vllm_parser_names

    names = vllm_parser_names()
    if parser in names:
        return VLLMToolCallParser(parser, tokenizer)
    raise ValueError(
        f"unknown tool_call_parser {parser!r}; registered: {sorted(_PARSERS)}"
        + (f"; vLLM's: {sorted(names)}" if names else " (vLLM's tool parsers need vllm installed)")
        + " (add one with register_tool_call_parser)"
    )


def _imported_parser(spec: str, tokenizer: Any) -> ToolCallParser:
    from twinkle_agentic.loading import load_object

    factory = load_object(spec, what="tool_call_parser")
    if not callable(factory):
        raise ValueError(f"tool_call_parser {spec!r} is not a class or factory of parsers")
    try:
        parser = factory()
    except TypeError:  # a factory that takes the tokenizer
        parser = factory(tokenizer)
    if not (hasattr(parser, "parse") and hasattr(parser, "clean")):
        raise ValueError(f"tool_call_parser {spec!r} built a {type(parser).__name__}, which lacks parse() and clean()")
    return parser


def registered_parser_names() -> list[str]:
    """The parser names registered in this process (vLLM's are listed by ``vllm_parser_names``)."""
    return sorted(_PARSERS)
