"""MessageNormalizer: strip heartbeats, rewrite tool calls written as text, merge same-role runs.

Pass 0 removes heartbeat exchanges and leading messages before the first user/system turn. Pass 1
turns Hermes/Qwen ``<tool_call>``, Cline XML, VCP and ReAct calls written in assistant text into
structured ``tool_calls`` and the following user turns into tool results. Pass 2 merges runs of
consecutive same-role messages. A mapper: it never drops a row.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import Mapper
from .text import REASONING_FIELDS, has_media, message_text, text_of, tool_call_dicts
from .vocab.normalizer import (
    CLINE_DENY_TAGS,
    HEARTBEAT_ASSISTANT,
    HEARTBEAT_GATES,
    HEARTBEAT_HEAD_CHARS,
    HEARTBEAT_USER,
)

# --- tool calls written as text --------------------------------------------------------------
# Each parser returns ``(calls, remaining_text)`` with calls as ``(name, arguments)``, or None when
# its format is absent; the first parser that finds calls wins.

Call = tuple[str, Any]

_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_HERMES_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_HERMES_PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
_CLINE_BLOCK = re.compile(r"<([a-z][a-z0-9_]*)>(.*?)</\1>", re.DOTALL)
_CLINE_PARAM = re.compile(r"<([A-Za-z_][\w-]*)>(.*?)</\1>", re.DOTALL)
CLINE_RESULT_PREFIX = re.compile(r"\A\s*\[[^\]\n]*? for '[^\n]*?'\] Result:\s*")
_VCP_BLOCK = re.compile(r"<<<\[TOOL_REQUEST\]>>>(.*?)<<<\[END_TOOL_REQUEST\]>>>", re.DOTALL)
_VCP_PAIR = re.compile(r"([\w-]+)\s*:\s*「始」(.*?)「末」", re.DOTALL)
_REACT_ACTION = re.compile(r"^[ \t]*Action:[ \t]*([\w.\-]+)[ \t]*\[(.*?)\][ \t]*$\n?", re.MULTILINE)


def _maybe_json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _remove_spans(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in spans:
        out.append(text[pos:start])
        pos = end
    out.append(text[pos:])
    return "".join(out).rstrip()


def parse_hermes(text: str) -> tuple[list[Call], str] | None:
    if "<tool_call>" not in text:
        return None
    calls: list[Call] = []
    spans = []
    for m in _HERMES_BLOCK.finditer(text):
        body = m.group(1).strip()
        fn = _HERMES_FUNCTION.match(body)
        if fn:
            args = {k: _maybe_json(v.strip()) for k, v in _HERMES_PARAMETER.findall(fn.group(2))}
            calls.append((fn.group(1), args))
            spans.append(m.span())
            continue
        obj = _maybe_json(body)
        if not isinstance(obj, dict):
            continue
        name = obj.get("name") or obj.get("tool_name")
        if not isinstance(name, str) or not name:
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):
            args = _maybe_json(args)
        calls.append((name, {} if args is None else args))
        spans.append(m.span())
    return (calls, _remove_spans(text, spans)) if calls else None


def parse_cline(text: str) -> tuple[list[Call], str] | None:
    if "</" not in text:
        return None
    calls: list[Call] = []
    spans = []
    for m in _CLINE_BLOCK.finditer(text):
        if m.group(1) in CLINE_DENY_TAGS:
            continue
        params = _CLINE_PARAM.findall(m.group(2))
        if not params:
            continue
        calls.append((m.group(1), {k: v.strip() for k, v in params}))
        spans.append(m.span())
    return (calls, _remove_spans(text, spans)) if calls else None


def parse_vcp(text: str) -> tuple[list[Call], str] | None:
    if "<<<[TOOL_REQUEST]>>>" not in text:
        return None
    calls: list[Call] = []
    spans = []
    for m in _VCP_BLOCK.finditer(text):
        pairs = dict(_VCP_PAIR.findall(m.group(1)))
        name = pairs.pop("tool_name", None)
        if not name:
            continue
        calls.append((name.strip(), pairs))
        spans.append(m.span())
    return (calls, _remove_spans(text, spans)) if calls else None


def parse_react(text: str) -> tuple[list[Call], str] | None:
    if "Action:" not in text:
        return None
    matches = list(_REACT_ACTION.finditer(text))
    if not matches:
        return None
    calls = [(m.group(1), {"input": m.group(2).strip()}) for m in matches]
    return calls, _remove_spans(text, [m.span() for m in matches])


PARSERS = (("hermes", parse_hermes), ("cline", parse_cline), ("vcp", parse_vcp), ("react", parse_react))


def parse_tool_text(text: str) -> tuple[str, list[Call], str] | None:
    """``(parser_name, calls, remaining_text)`` from the first parser that finds calls, or None."""
    for name, parser in PARSERS:
        found = parser(text)
        if found:
            return name, found[0], found[1]
    return None


# --- the mapper ------------------------------------------------------------------------------

_HEARTBEAT_USER_RE = re.compile(HEARTBEAT_USER, re.IGNORECASE)
_HEARTBEAT_ASSISTANT_RE = re.compile(HEARTBEAT_ASSISTANT, re.IGNORECASE)
TOOL_CALLS_FORMATS = ("json", "list")


def _has_calls(message: dict) -> bool:
    """Whether the message carries tool calls ('' and missing, the common case, answered at once)."""
    calls = message.get("tool_calls")
    return bool(calls) and tool_call_dicts(calls) is not None


def _is_blank(message: dict) -> bool:
    """No text, no media, no reasoning and no tool calls: nothing worth keeping."""
    content = message.get("content")
    if message_text(message).strip() or has_media(content):
        return False
    if any(isinstance(message.get(k), str) and message[k].strip() for k in REASONING_FIELDS):
        return False
    return not _has_calls(message)


def _is_atomic(message: dict) -> bool:
    """Tool messages and assistant messages with tool calls are never merged."""
    role = message.get("role")
    return role == "tool" or (role == "assistant" and _has_calls(message))


# --- a cheap test for rows that need no change ---------------------------------------------

_CLOSING_TAG = re.compile(r"</([a-z][a-z0-9_]*)>")
# Non-ASCII letters re.IGNORECASE equates with a letter of the heartbeat words (I, i, k).
_CASE_EQUIVALENTS = ("\u0130", "\u0131", "\u212a")


def _heartbeat_possible(head: str, gates: tuple[tuple[str, ...], ...]) -> bool:
    """False only when the heartbeat regex cannot match ``head``."""
    if head.isascii():
        folded = head.lower()
    elif any(c in head for c in _CASE_EQUIVALENTS):
        return True
    else:  # the words are ASCII: other characters can only separate them
        folded = head.encode("ascii", "ignore").decode("ascii").lower()
    return any(all(word in folded for word in group) for group in gates)


def _tool_text_possible(text: str) -> bool:
    """False only when no parser can find a call in ``text`` (a cheap literal pre-check)."""
    if "<" in text:
        if "<tool_call>" in text or "<<<[TOOL_REQUEST]>>>" in text:
            return True
        # a Cline call needs a closing tag whose name is not on the deny list
        if "</" in text and not CLINE_DENY_TAGS.issuperset(_CLOSING_TAG.findall(text)):
            return True
    return "Action:" in text


def unchanged(messages: list[dict]) -> bool:
    """True when normalising would return ``messages`` as they are (a cheap, conservative test).

    No developer role, a user/system first message, no two neighbours with the same role (nothing to
    merge), no blank message (nothing to remove), no head that may be a heartbeat, no assistant text
    that may hold a tool call. The text checks run once over the row's texts joined by newlines
    (no gate word spans a newline, so joining can only add candidates).
    """
    previous = None
    heads, replies = [], []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == previous or role == "developer" or (i == 0 and role not in ("user", "system")):
            return False
        previous = role
        text = message_text(m)
        if not text or text.isspace():
            return False
        if role == "user":
            heads.append(text[:HEARTBEAT_HEAD_CHARS])
        elif role == "assistant":
            heads.append(text[:HEARTBEAT_HEAD_CHARS])
            replies.append(text)
    return not (
        _heartbeat_possible("\n".join(heads), HEARTBEAT_GATES) or _tool_text_possible("\n".join(replies))
    )


class MessageNormalizer(Mapper):
    """Normalises each row's ``messages``; never drops a row (a mapper).

    Rows whose ``messages`` is empty, missing, not a list or holds non-dict entries pass through
    untouched; other rows get a new message list (the input row and messages are not mutated).

    Unlike upstream, a rewritten assistant message keeps all its fields (``reasoning_content``,
    ``thinking``, ``name``...; only ``content``, ``tool_calls`` and ``tool_call_id`` are replaced), and
    a merge joins the reasoning fields of the merged messages with newlines. A message counts as
    blank only when it has no text, media, reasoning or tool calls. ``tool_calls_format='json'``
    writes rewritten calls as a JSON string (Arrow-stable), ``'list'`` as a list of dicts.
    """

    def __init__(self, tool_calls_format: str = "json") -> None:
        if tool_calls_format not in TOOL_CALLS_FORMATS:
            raise ValueError(
                f"tool_calls_format must be one of {TOOL_CALLS_FORMATS}, got {tool_calls_format!r}"
            )
        self.tool_calls_format = tool_calls_format

    # Pass 0 ------------------------------------------------------------------------------------
    @staticmethod
    def strip_heartbeats(messages: list[dict]) -> list[dict]:
        out: list[dict] = []
        armed = False
        for m in messages:
            role = m.get("role")
            if role == "developer":
                m = {**m, "role": "system"}
                role = "system"
            if role == "user" and _HEARTBEAT_USER_RE.search(message_text(m)[:HEARTBEAT_HEAD_CHARS]):
                armed = True
                continue
            if (
                role == "assistant"
                and not _has_calls(m)
                and (armed or _HEARTBEAT_ASSISTANT_RE.search(message_text(m)[:HEARTBEAT_HEAD_CHARS]))
            ):
                continue
            armed = False
            out.append(m)
        start = 0
        while start < len(out) and out[start].get("role") not in ("user", "system"):
            start += 1
        return out[start:]

    # Pass 1 ------------------------------------------------------------------------------------
    def rewrite_tool_calls(self, messages: list[dict]) -> list[dict]:
        out: list[dict] = []
        counter = 0
        i = 0
        while i < len(messages):
            m = messages[i]
            i += 1
            parsed = None
            if m.get("role") == "assistant" and not _has_calls(m):
                text = message_text(m)
                if text:
                    parsed = parse_tool_text(text)
            if parsed is None:
                out.append(m)
                continue
            parser, calls, remaining = parsed
            ids = []
            structured = []
            for name, args in calls:
                counter += 1
                call_id = f"call_norm_{counter:04d}"
                ids.append(call_id)
                arguments = json.dumps(args, ensure_ascii=False)
                structured.append(
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                )
            tool_calls: Any = (
                json.dumps(structured, ensure_ascii=False) if self.tool_calls_format == "json" else structured
            )
            out.append({**m, "content": remaining, "tool_calls": tool_calls, "tool_call_id": ""})
            # Consume the following user turns as the calls' results.
            for k, call_id in enumerate(ids):
                if i >= len(messages) or messages[i].get("role") != "user":
                    break
                text = text_of(messages[i].get("content"))
                if not text.strip():
                    break
                prefix = CLINE_RESULT_PREFIX.match(text) if parser == "cline" else None
                if prefix:
                    body = text[prefix.end() :].strip()
                elif k == 0 and len(ids) == 1:
                    body = text
                else:
                    break
                out.append({"role": "tool", "content": body, "tool_calls": "", "tool_call_id": call_id})
                i += 1
        return out

    # Pass 2 ------------------------------------------------------------------------------------
    @staticmethod
    def merge_runs(messages: list[dict]) -> list[dict]:
        out: list[dict] = []
        i = 0
        while i < len(messages):
            m = messages[i]
            if _is_atomic(m):
                if not (
                    m.get("role") == "tool"
                    and not message_text(m).strip()
                    and not has_media(m.get("content"))
                ):
                    out.append(m)
                i += 1
                continue
            j = i + 1
            while (
                j < len(messages) and messages[j].get("role") == m.get("role") and not _is_atomic(messages[j])
            ):
                j += 1
            run = [x for x in messages[i:j] if not _is_blank(x)]
            i = j
            if len(run) <= 1:
                out.extend(run)
                continue
            contents = [x.get("content") for x in run]
            if all(isinstance(c, list) for c in contents):
                merged = {**run[0], "content": [part for c in contents for part in c]}
            elif all(isinstance(c, str) for c in contents):
                merged = {**run[0], "content": "\n".join(c.strip() for c in contents)}
            else:
                out.extend(run)
                continue
            for key in REASONING_FIELDS:
                values = [x[key] for x in run if isinstance(x.get(key), str) and x[key].strip()]
                if len(values) > 1:
                    merged[key] = "\n".join(values)
                elif values:
                    merged[key] = values[0]
            out.append(merged)
        return out

    def map_row(self, row: dict) -> dict:
        messages = row.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return row
        if unchanged(messages):
            return row
        normalised = self.merge_runs(self.rewrite_tool_calls(self.strip_heartbeats(messages)))
        if len(normalised) == len(messages) and all(
            a is b for a, b in zip(normalised, messages, strict=True)
        ):
            return row  # nothing changed: no copy
        return {**row, "messages": normalised}

    def __repr__(self) -> str:
        return f"MessageNormalizer(tool_calls_format={self.tool_calls_format!r})"
