"""The one decoder of a message's ``tool_calls`` field, and the id given to a call that has none.

Rows carry tool calls as a list, a single call object, or the Arrow-stable JSON string (``''`` and
``'[]'`` mean none). Every layer that reads the field (cleaning filters, the chat template, the
chat-completions payload, the rollout) decodes it here, so they agree on what counts as a call list.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ToolCallsError(ValueError):
    """A ``tool_calls`` value that is not a list of calls (nor a JSON string or single call object)."""


def decode_tool_calls(value: Any) -> list[Any]:
    """``value`` as a list of calls, entries as they are: None, ``''`` and ``'[]'`` are ``[]``, a JSON
    string is decoded, a single call object becomes a one-element list.

    Raises ``ToolCallsError`` for a string that is not a JSON list or object, and for any other type.
    """
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text or text == "[]":  # the Arrow-stable "none" forms, answered without parsing
            return []
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ToolCallsError(f"tool_calls is a string but not JSON: {exc}") from exc
    if isinstance(value, Mapping):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise ToolCallsError(
            f"tool_calls must be a list of calls (or its JSON string), got {type(value).__name__}"
        )
    return list(value)


def tool_call_id(turn: int, index: int) -> str:
    """The id given to a call that arrived without one: ``call_{turn}_{index}``, turn 1-based."""
    return f"call_{turn}_{index}"
