"""vLLM's tool-call parsers behind the project's ``ToolCallParser`` protocol.

vLLM ships a parser per model family (``llama3_json``, ``mistral``, ``deepseek_v3``, ``glm45``, ...);
a ``Template`` on the chat-template path names one with ``tool_call_parser=`` and gets the same
``parse``/``clean`` contract as the project's hermes parser. vLLM is imported only when such a name
is asked for, so the library imports without it.
"""

from __future__ import annotations

import functools
from typing import Any

from twinkle_agentic.data_format import ToolCall

from .parsers import canonical_arguments


@functools.cache
def vllm_parser_names() -> frozenset[str]:
    """The tool parsers vLLM registers (empty when vllm is not installed)."""
    try:
        from vllm.tool_parsers import ToolParserManager
    except ImportError:
        return frozenset()
    return frozenset(ToolParserManager.tool_parsers) | frozenset(ToolParserManager.lazy_parsers)


class VLLMToolCallParser:
    """One vLLM tool parser (by its registered name) applied to a whole completion's text.

    A parser that raises on odd text yields no calls (the text stays the assistant's content): a
    malformed completion is data to train on, never a crash of the rollout.
    """

    def __init__(self, name: str, tokenizer: Any):
        if tokenizer is None:
            raise ValueError(f"vLLM tool parser {name!r} needs the tokenizer; build it through Template")
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager

        self.name = name
        try:
            self._parser = ToolParserManager.get_tool_parser(name)(tokenizer)
        except Exception as exc:  # e.g. the family's marker tokens are missing from this vocabulary
            raise ValueError(f"vLLM tool parser {name!r} does not fit this tokenizer: {exc}") from exc
        self._request = ChatCompletionRequest(model="twinkle-agentic", messages=[{"role": "user", "content": ""}])

    def _extract(self, text: str) -> tuple[list[ToolCall], str | None]:
        try:
            info = self._parser.extract_tool_calls(text or "", self._request)
        except Exception:  # a parser tripping on malformed text: no calls, the text is content
            return [], None
        if not info.tools_called:
            return [], None
        calls: list[ToolCall] = []
        for call in info.tool_calls:
            function = call.function
            if not function.name:
                continue
            calls.append(
                {"type": "function", "function": {"name": function.name, "arguments": canonical_arguments(function.arguments)}}
            )
        return calls, info.content

    def parse(self, text: str) -> list[ToolCall]:
        return self._extract(text)[0]

    def clean(self, text: str) -> str:
        calls, content = self._extract(text)
        if not calls:
            return text or ""
        return (content or "").strip()
