"""What a scorer backend offers, and the helpers every backend shares.

A backend turns chats and texts into token ids, returns prompt logprobs for batches of token ids,
samples chat completions and embeds texts. Failures are values, not exceptions: a batch call that
fails is retried item by item, and the items that still fail come back as None (logged), so one bad
round (too long for the engine, say) never costs the other rounds of the batch their scores.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

TokenLogprobs = list[float | None]


class BackendError(RuntimeError):
    """A backend call returned something that cannot be read (wrong length, missing fields)."""


class ScoreBackend:
    """Interface of scorer backends. Methods a backend cannot serve raise ``NotImplementedError``."""

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """Token ids of ``messages`` (and ``tools``) rendered by the chat template, with a generation prompt."""
        raise NotImplementedError

    def encode_text(self, text: str) -> list[int]:
        """Raw token ids of ``text`` (no special tokens)."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def prompt_logprobs(self, ids_batch: list[list[int]]) -> list[TokenLogprobs | None]:
        """Per sequence: the logprob of each token given its prefix (None first), or None on failure."""
        raise NotImplementedError

    def chat(
        self, batch: list[list[dict]], n: int, temperature: float, max_tokens: int
    ) -> list[list[str] | None]:
        """Per conversation: ``n`` sampled assistant texts, or None on failure."""
        raise NotImplementedError

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        raise NotImplementedError

    def warmup(self) -> None:
        """Build engines and clients now rather than on the first batch."""


def logprob_at(entry: Any, token_id: int) -> float | None:
    """Read one position of a prompt-logprobs list at the actual token, else at its first entry.

    Accepts what engines and servers return: None, a float, a dict keyed by int or str token id whose
    values are floats, ``Logprob``-like objects or ``{"logprob": x}`` dicts, or a list of
    ``(id, logprob)`` pairs.
    """
    if entry is None:
        return None
    if isinstance(entry, (int, float)) and not isinstance(entry, bool):
        return float(entry)
    if isinstance(entry, dict):
        if not entry:
            return None
        value = entry.get(token_id, entry.get(str(token_id)))
        if value is None:
            value = next(iter(entry.values()))
        return _as_float(value)
    if isinstance(entry, (list, tuple)):
        pairs = [p for p in entry if isinstance(p, (list, tuple)) and len(p) == 2]
        for tok, value in pairs:
            if tok == token_id:
                return _as_float(value)
        return _as_float(pairs[0][1]) if pairs else None
    return _as_float(entry)


def _as_float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("logprob")
    else:
        value = getattr(value, "logprob", value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_prompt_logprobs(entries: Sequence[Any] | None, ids: Sequence[int]) -> TokenLogprobs:
    """One logprob per token of ``ids`` from an engine's prompt-logprobs list (first entry None)."""
    if entries is None:
        raise BackendError("the response carries no prompt logprobs")
    if len(entries) != len(ids):
        raise BackendError(f"got {len(entries)} prompt logprobs for a prompt of {len(ids)} tokens")
    out: TokenLogprobs = [None]
    out.extend(logprob_at(entry, tok) for entry, tok in zip(entries[1:], ids[1:], strict=True))
    return out


def read_or_none(entries: Sequence[Any] | None, ids: Sequence[int], what: str) -> TokenLogprobs | None:
    """``read_prompt_logprobs``, or None (logged) when one response cannot be read: the others stand."""
    return call_or_none(lambda: read_prompt_logprobs(entries, ids), what)


def covering_sequences(batch: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """The fewest sequences whose prompt logprobs hold those of every sequence in ``batch``.

    A causal model's logprob of a token depends only on the tokens before it, so a sequence that
    equals, or is a token prefix of, another sequence of the batch can be read off the longer one.
    Rounds of one conversation (and rows cut from one trajectory) share long histories, so this often
    halves the tokens a batch sends to the engine. Returns the sequences to fetch and, per input, the
    index of the fetched sequence that starts with it.
    """
    keys = [tuple(int(t) for t in seq) for seq in batch]
    # In lexicographic order, the sequences that start with s follow s directly; so walking from the
    # end, s is a prefix of some sequence exactly when it is a prefix of the last one kept.
    fetch: list[list[int]] = []
    slot: dict[tuple[int, ...], int] = {}
    for key in sorted(set(keys), reverse=True):
        if not fetch or tuple(fetch[-1][: len(key)]) != key:
            fetch.append(list(key))
        slot[key] = len(fetch) - 1
    return fetch, [slot[key] for key in keys]


def pad_batch(items: list[T], multiple: int) -> list[T]:
    """``items`` padded by repeating the last one to a multiple of ``multiple`` (data-parallel size)."""
    if multiple <= 1 or not items or len(items) % multiple == 0:
        return items
    return items + [items[-1]] * (multiple - len(items) % multiple)


def chunks(items: list[T], size: int | None) -> list[list[T]]:
    if not size or size >= len(items):
        return [items] if items else []
    return [items[i : i + size] for i in range(0, len(items), size)]


def call_or_none(call: Callable[[], R], what: str) -> R | None:
    """``call()``, or None when it raises (logged with ``what``)."""
    try:
        return call()
    except Exception as exc:  # any engine or server failure becomes None for the rounds it affects
        logger.warning("[ScoreFilter] %s failed: %s: %s", what, type(exc).__name__, exc)
        return None


def isolate_failures(call: Callable[[list[T]], list[R]], items: list[T], what: str) -> list[R | None]:
    """``call(items)``; if it raises, retry one item at a time so only failing items become None."""
    if not items:
        return []
    if len(items) == 1:
        return [call_or_none(lambda: call(items)[0], what)]
    try:
        results = call(items)
        if len(results) != len(items):
            raise BackendError(f"{what} returned {len(results)} results for {len(items)} inputs")
        return list(results)
    except Exception as exc:  # retried item by item below, so one bad item costs only itself
        logger.warning(
            "[ScoreFilter] %s failed for a batch of %d (%s: %s); retrying one at a time",
            what,
            len(items),
            type(exc).__name__,
            exc,
        )
    return [call_or_none(lambda item=item: call([item])[0], what) for item in items]
