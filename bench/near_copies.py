"""Near-copies of chat rows for the near-dedup benchmark and tests: a share of the words edited
(replaced, deleted or inserted), then one surface variant (whitespace, punctuation or case)."""

from __future__ import annotations

import copy
import random
import re

VARIANTS = ("none", "whitespace", "punctuation", "case")
FILLER = ["alpha", "river", "seven", "window", "quietly", "orange", "market", "signal", "thunder", "paper"]


def edit_words(text: str, share: float, rng: random.Random) -> str:
    """``text`` with about ``share`` of its words replaced, deleted or followed by an inserted word
    (at least one edit when it has words and ``share`` > 0)."""
    words = text.split()
    if not words or share <= 0:
        return text
    count = max(1, round(share * len(words)))
    for index in sorted(rng.sample(range(len(words)), min(count, len(words))), reverse=True):
        action = rng.random()
        if action < 0.5:
            words[index] = rng.choice(FILLER)
        elif action < 0.75:
            del words[index]
        else:
            words.insert(index + 1, rng.choice(FILLER))
    return " ".join(words)


def surface_variant(text: str, variant: str, rng: random.Random) -> str:
    """``text`` changed only in how it looks: spacing, punctuation or letter case."""
    if variant == "whitespace":
        return re.sub(r" ", lambda _: rng.choice([" ", "  ", "\n", " \t"]), text)
    if variant == "punctuation":
        text = re.sub(r"[,.;:!?]", lambda _: rng.choice(["", ",", ".", " -"]), text)
        return text + rng.choice(["!", "...", "?!"])
    if variant == "case":
        return rng.choice([str.upper, str.lower, str.title])(text)
    return text


def near_copy(row: dict, share: float, variant: str, rng: random.Random) -> dict:
    """A copy of ``row`` whose string message contents are edited (``share`` of the words) and then
    given the surface ``variant``."""
    out = copy.deepcopy(row)
    for message in out.get("messages") or []:
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            message["content"] = surface_variant(edit_words(message["content"], share, rng), variant, rng)
    return out
