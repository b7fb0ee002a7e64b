"""Text helpers shared by every filter: projection of message content, scripts, think blocks, tool calls.

All helpers accept arbitrary values (rows come from untrusted data) and never raise.
"""

from __future__ import annotations

import json
import re
from typing import Any

from twinkle_agentic.data_format.tool_calls import ToolCallsError, decode_tool_calls

_CJK_RUN = re.compile("[\u4e00-\u9fff\u3040-\u30ff\uac00-\ud7a3]+")
THINK_BLOCK = re.compile(r"<(think|thinking)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
THINK_OPEN = re.compile(r"<(think|thinking)>", re.IGNORECASE)
THINK_CLOSE = re.compile(r"</(think|thinking)>", re.IGNORECASE)
REASONING_FIELDS = ("reasoning_content", "thinking")


def text_of(content: Any) -> str:
    """Project message content to text: a str as is, text parts joined by one space, else ''."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        text = content.get("text") if content.get("type") == "text" else None
        return text if isinstance(text, str) else ""
    if isinstance(content, (list, tuple)):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return " ".join(parts)
    return ""


def messages_of(row: Any) -> list[dict] | None:
    """The row's messages: missing or None counts as ``[]``; None when it is not a list of dicts.

    Filters drop a None result as ``invalid_messages``; mappers pass such rows through.
    """
    messages = row.get("messages") if isinstance(row, dict) else None
    if messages is None:
        return []
    if not isinstance(messages, list):
        return None
    for m in messages:
        if not isinstance(m, dict):
            return None
    return messages


def message_text(message: Any) -> str:
    return text_of(message.get("content")) if isinstance(message, dict) else ""


def has_media(content: Any) -> bool:
    """True when some content part has a type other than text (or None)."""
    if not isinstance(content, (list, tuple)):
        return False
    return any(isinstance(p, dict) and p.get("type") not in (None, "text") for p in content)


def cjk_ratio(text: str) -> float:
    """Share of CJK ideographs, kana and Hangul syllables, ignoring spaces, newlines and tabs."""
    if not text or text.isascii():
        return 0.0
    n = len(text) - text.count(" ") - text.count("\n") - text.count("\t")
    if n <= 0:
        return 0.0
    # Summing run lengths allocates one string per run instead of one per character.
    return sum(map(len, _CJK_RUN.findall(text))) / n


def _json_object(value: Any) -> Any:
    """A JSON-object string decoded (anything else, or text that does not parse, as it is)."""
    if isinstance(value, str) and value.lstrip()[:1] == "{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def tool_call_dicts(value: Any) -> list[dict] | None:
    """The only test for "has tool calls": the message's call dicts, or None when there are none.

    The field is decoded by ``decode_tool_calls``; a value it refuses counts as no calls (rows are
    untrusted data). Entries that are JSON-object strings, and a ``function`` given as a JSON string,
    are decoded too; entries that are not call objects are left out.
    """
    try:
        items = decode_tool_calls(value)
    except ToolCallsError:
        return None
    calls = []
    for item in items:
        item = _json_object(item)
        if not isinstance(item, dict):
            continue
        function = item.get("function")
        if isinstance(function, str):
            decoded = _json_object(function)
            if isinstance(decoded, dict):
                item = {**item, "function": decoded}
        calls.append(item)
    return calls or None


def is_agent_row(messages: Any) -> bool:
    """Some message is a tool message or carries tool calls."""
    if not isinstance(messages, list):
        return False
    for m in messages:
        if isinstance(m, dict) and (
            m.get("role") == "tool" or (m.get("tool_calls") and tool_call_dicts(m["tool_calls"]))
        ):
            return True
    return False


def reasoning_of(message: Any) -> str:
    """The separate reasoning field (``reasoning_content``, else ``thinking``), or ''."""
    if not isinstance(message, dict):
        return ""
    for key in REASONING_FIELDS:
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def split_think(text: str) -> tuple[str, str]:
    """Split text into (think, response).

    Think is the inner text of every ``<think>``/``<thinking>`` block, unstripped and joined by
    newlines (whitespace-only blocks skipped); an unclosed opening tag makes the rest think; a bare
    closing tag makes the text before it think. Response is all text outside
    the blocks, joined by newlines and stripped.
    """
    if not text or "<" not in text:
        return "", text.strip() if text else ""
    think_parts: list[str] = []
    outside: list[str] = []
    pos = 0
    first_close = THINK_CLOSE.search(text)
    first_open = THINK_OPEN.search(text)
    if first_close and (first_open is None or first_close.start() < first_open.start()):
        think_parts.append(text[: first_close.start()])
        pos = first_close.end()
    while True:
        opening = THINK_OPEN.search(text, pos)
        if opening is None:
            outside.append(text[pos:])
            break
        outside.append(text[pos : opening.start()])
        closing = THINK_CLOSE.search(text, opening.end())
        if closing is None:
            think_parts.append(text[opening.end() :])
            break
        think_parts.append(text[opening.end() : closing.start()])
        pos = closing.end()
    think = "\n".join(p for p in think_parts if p.strip())
    response = "\n".join(p.strip() for p in outside if p.strip())
    return think, response


def strip_think(text: str) -> str:
    """Text with think blocks removed, stripped."""
    return split_think(text)[1]
