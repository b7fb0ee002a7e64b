"""Where text lives in a row, and rebuilding a row with rewritten text (inputs never mutated).

Visited, for messages of the configured roles, in message order: str content; the text of
``{type: 'text'}`` parts of list content; ``reasoning_content`` / ``thinking``; and every string
leaf of tool-call ``arguments``. Tool calls may be a list or a JSON string, a call or its
``function`` may itself be a JSON string, and ``arguments`` may be a dict or a JSON string: each is
written back in the form it came in (JSON text keeps its compactness, indentation and ASCII
escaping). Anything unchanged is returned as the very same object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from ..text import REASONING_FIELDS

TextFn = Callable[[str], str]
ROLE_ALIASES = {"developer": "system"}
_LOOSE_SEPARATOR = re.compile(r'"\s*:\s|,\s"')


def dumps_like(original: str, value: Any) -> str:
    """JSON text for ``value`` in the style of ``original``."""
    ensure_ascii = original.isascii() and "\\u" in original
    indent = None
    if "\n" in original:
        for line in original.splitlines()[1:]:
            stripped = line.lstrip(" ")
            if stripped:
                indent = len(line) - len(stripped) or None
                break
    if indent is not None:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)
    loose = bool(_LOOSE_SEPARATOR.search(original))
    return json.dumps(value, ensure_ascii=ensure_ascii, separators=(", ", ": ") if loose else (",", ":"))


def _json_text(value: str, rewrite: Callable[[Any], Any]) -> str:
    """Rewrite JSON text through ``rewrite`` of its parsed value; non-JSON text is returned as is."""
    try:
        parsed = json.loads(value)
    except (ValueError, TypeError):
        return value
    new = rewrite(parsed)
    return value if new is parsed else dumps_like(value, new)


def rewrite_leaves(value: Any, fn: TextFn) -> Any:
    """Every string leaf (not keys) of a JSON value through ``fn``; same object when unchanged."""
    if isinstance(value, str):
        new = fn(value)
        return value if new == value else new
    if isinstance(value, dict):
        items = {k: rewrite_leaves(v, fn) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    if isinstance(value, list):
        items = [rewrite_leaves(v, fn) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def rewrite_arguments(arguments: Any, fn: TextFn) -> Any:
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return rewrite_leaves(arguments, fn)  # plain-text arguments
        if isinstance(parsed, (dict, list, str)):
            new = rewrite_leaves(parsed, fn)
            return arguments if new is parsed else dumps_like(arguments, new)
        return arguments
    return rewrite_leaves(arguments, fn)


def _rewrite_function(function: Any, fn: TextFn) -> Any:
    if isinstance(function, str):
        return _json_text(function, lambda parsed: _rewrite_function(parsed, fn))
    if not isinstance(function, dict) or "arguments" not in function:
        return function
    arguments = rewrite_arguments(function["arguments"], fn)
    return function if arguments is function["arguments"] else {**function, "arguments": arguments}


def _rewrite_call(call: Any, fn: TextFn) -> Any:
    if isinstance(call, str):
        return _json_text(call, lambda parsed: _rewrite_call(parsed, fn))
    if not isinstance(call, dict) or "function" not in call:
        return call
    function = _rewrite_function(call["function"], fn)
    return call if function is call["function"] else {**call, "function": function}


def rewrite_tool_calls(value: Any, fn: TextFn) -> Any:
    if isinstance(value, str):
        return _json_text(value, lambda parsed: rewrite_tool_calls(parsed, fn)) if value.strip() else value
    if isinstance(value, list):
        calls = [_rewrite_call(c, fn) for c in value]
        return value if all(a is b for a, b in zip(calls, value, strict=True)) else calls
    if isinstance(value, dict):
        return _rewrite_call(value, fn)
    return value


def rewrite_message(message: dict, fn: TextFn) -> dict:
    updates: dict[str, Any] = {}
    content = message.get("content")
    if isinstance(content, str):
        new = fn(content)
        if new != content:
            updates["content"] = new
    elif isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                new_part: Any = fn(part)
                parts.append(part if new_part == part else new_part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                text = fn(part["text"])
                parts.append(part if text == part["text"] else {**part, "text": text})
            else:
                parts.append(part)
        if any(a is not b for a, b in zip(parts, content, strict=True)):
            updates["content"] = parts
    for key in REASONING_FIELDS:
        value = message.get(key)
        if isinstance(value, str) and value:
            new = fn(value)
            if new != value:
                updates[key] = new
    if "tool_calls" in message:
        calls = rewrite_tool_calls(message["tool_calls"], fn)
        if calls is not message["tool_calls"]:
            updates["tool_calls"] = calls
    return {**message, **updates} if updates else message


def rewrite_row(row: dict, roles: Iterable[str], fn: TextFn) -> dict:
    """A shallow copy of ``row`` whose messages of ``roles`` went through ``fn`` in order."""
    roles = frozenset(roles)
    out = dict(row)
    messages = row.get("messages")
    if not isinstance(messages, list):
        return out
    new_messages = None
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if ROLE_ALIASES.get(role, role) not in roles:
            continue
        new = rewrite_message(message, fn)
        if new is not message:
            if new_messages is None:
                new_messages = list(messages)
            new_messages[i] = new
    if new_messages is not None:
        out["messages"] = new_messages
    return out
