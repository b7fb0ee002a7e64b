"""Which rounds of a row get scored, and what each scorer sees of them.

Candidate rounds are the row's ``key_rounds`` (from ``IntentClassifier``'s ``user_data``) when that
list is non-empty, else every assistant message. A candidate is skipped when its index is not an
int naming an assistant message, its intent is outside the filter's ``intents``, its text is empty,
or nothing precedes it. A round's text is its content without think blocks, followed by its tool
calls in Hermes form (``<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>``), so tool-call
rounds, the key rounds of agent data, are scored rather than skipped.

For token scorers the history is chat-encoded with a generation prompt and fitted to
``max_prompt_tokens``: the oldest non-system messages are dropped (cutting at user turns when that
fits, so the prompt still starts with a question), and a lone over-long message keeps its tail.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Collection
from typing import Any

from ...data_format import user_data_get
from ..text import message_text, strip_think, text_of, tool_call_dicts
from .types import ScoreContext

KEY_ROUNDS = "key_rounds"
INTENTS = "intents"
#: Intent of a round the classifier did not label.
DEFAULT_INTENT = "other"
#: Upper bound on characters per token, used to bound the tail search of an over-long message.
MAX_CHARS_PER_TOKEN = 8


def key_rounds_of(row: dict) -> list | None:
    """The row's non-empty ``key_rounds`` list, else None (an empty list means "all rounds")."""
    value = user_data_get(row.get("user_data"), KEY_ROUNDS)
    return value if isinstance(value, list) and value else None


def round_intents(row: dict) -> dict[str, Any]:
    value = user_data_get(row.get("user_data"), INTENTS)
    return value if isinstance(value, dict) else {}


def tools_of(row: dict) -> list[dict] | None:
    tools = row.get("tools")
    if isinstance(tools, str) and tools.strip():
        try:
            tools = json.loads(tools)
        except ValueError:
            return None
    return tools if isinstance(tools, list) and tools else None


def answer_text(message: dict) -> str:
    """Content without think blocks, then each tool call as a Hermes ``<tool_call>`` block."""
    parts = [strip_think(message_text(message))]
    for call in tool_call_dicts(message.get("tool_calls")) or []:
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        body = json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
        parts.append(f"<tool_call>\n{body}\n</tool_call>")
    return "\n".join(p for p in parts if p)


def is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def build_contexts(
    row_index: int, row: dict, intents: Collection[str] | None
) -> tuple[list[ScoreContext], bool]:
    """The scoreable rounds of ``row`` and whether it had non-empty ``key_rounds``."""
    messages = row.get("messages")
    messages = messages if isinstance(messages, list) else []
    key_rounds = key_rounds_of(row)
    if key_rounds is not None:
        candidates = key_rounds
    else:
        candidates = [
            i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"
        ]
    labels = round_intents(row)
    tools = tools_of(row)
    row_id = str(row["id"]) if row.get("id") is not None else str(row_index)
    contexts: list[ScoreContext] = []
    seen: set[int] = set()
    for idx in candidates:
        if not is_index(idx) or idx in seen or not 0 < idx < len(messages):
            continue
        message = messages[idx]
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        intent = str(labels.get(str(idx)) or DEFAULT_INTENT)
        if intents is not None and intent not in intents:
            continue
        answer = answer_text(message)
        if not answer:
            continue
        seen.add(idx)
        history = [m for m in messages[:idx] if isinstance(m, dict)]
        contexts.append(ScoreContext(row_index, row_id, idx, intent, history, answer, row, tools))
    return contexts, key_rounds is not None


def _search_min(candidates: list[Any], fits: Callable[[Any], bool]) -> Any:
    """The first candidate that fits, given that fitting is monotone along the list (None if none)."""
    lo, hi, found = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(candidates[mid]):
            found, hi = candidates[mid], mid - 1
        else:
            lo = mid + 1
    return found


def fit_prompt(
    encode_chat: Callable[[list[dict]], list[int]], messages: list[dict], max_tokens: int
) -> tuple[list[dict], list[int]]:
    """(kept messages, their prompt ids) with at most ``max_tokens`` ids; see the module docstring.

    ``encode_chat(messages)`` renders with a generation prompt (tools, if any, already bound).
    """
    ids = encode_chat(messages)
    if len(ids) <= max_tokens:
        return messages, ids
    cache: dict[int, list[int]] = {}
    system = [i for i, m in enumerate(messages) if m.get("role") in ("system", "developer")]
    others = [i for i in range(len(messages)) if i not in set(system)]

    def kept(n_dropped: int) -> list[dict]:
        dropped = set(others[:n_dropped])
        return [m for i, m in enumerate(messages) if i not in dropped]

    def fits(n_dropped: int) -> bool:
        if n_dropped not in cache:
            cache[n_dropped] = encode_chat(kept(n_dropped))
        return len(cache[n_dropped]) <= max_tokens

    cuts = list(range(1, len(others)))
    at_user = [k for k in cuts if messages[others[k]].get("role") == "user"]
    best = _search_min(at_user, fits) if at_user else None
    if best is None:
        best = _search_min(cuts, fits)
    if best is not None:
        return kept(best), cache[best]
    return _fit_lone_message(encode_chat, kept(len(others) - 1), max_tokens)


def _fit_lone_message(
    encode_chat: Callable[[list[dict]], list[int]], messages: list[dict], max_tokens: int
) -> tuple[list[dict], list[int]]:
    """Keep the longest tail of the last message's text that fits; cut the ids if nothing fits."""
    last = messages[-1]
    text = text_of(last.get("content"))

    def with_tail(n_chars: int) -> list[dict]:
        return messages[:-1] + [{**last, "content": text[len(text) - n_chars :] if n_chars else ""}]

    cache: dict[int, list[int]] = {}

    def fits(n_chars: int) -> bool:
        cache[n_chars] = encode_chat(with_tail(n_chars))
        return len(cache[n_chars]) <= max_tokens

    longest = min(len(text), max_tokens * MAX_CHARS_PER_TOKEN)
    # Search the largest fitting tail: candidates in decreasing length, fitting is monotone.
    best = _search_min(list(range(longest, -1, -1)), fits)
    if best is None:
        ids = encode_chat(with_tail(0))
        return with_tail(0), ids[-max_tokens:]
    return with_tail(best), cache[best]


def tokenize_contexts(contexts: list[ScoreContext], backend: Any, max_prompt_tokens: int) -> None:
    """Fill ``prompt_messages``, ``prompt_ids`` and ``asst_ids``; an encoding failure sets ``error``."""
    for ctx in contexts:
        try:
            encode = functools.partial(backend.encode_chat, tools=ctx.tools)
            ctx.prompt_messages, ctx.prompt_ids = fit_prompt(encode, ctx.messages, max_prompt_tokens)
            ctx.asst_ids = list(backend.encode_text(ctx.answer))
        except Exception as exc:  # a row the template cannot render must not stop the batch
            ctx.prompt_ids = ctx.asst_ids = None
            ctx.error = f"encode failed: {type(exc).__name__}: {exc}"
