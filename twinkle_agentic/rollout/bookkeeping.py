"""Token bookkeeping for engine rollouts: the one place where input ids, labels and logprobs are built.

A trajectory's tokens are its prompt (never trainable) followed by turns. A ``Turn`` is what the
policy generated (trainable, with one logprob per token) followed by the bridge the rollout inserted
after it (tool results and the next generation prompt: never trainable, no logprobs). A
``TokenLedger`` only appends turns, so alignment holds by construction; ``check_aligned`` verifies it
on every output anyway (SPEC 17.2 invariants), and tests call it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

IGNORE_INDEX = -100


def chosen_logprobs(tokens: Sequence[int], logprobs: Sequence[Any] | None) -> list[float] | None:
    """One float per token from a sampler's logprobs (SPEC 17.2 step 2).

    Each entry may be a float, or ``(token_id, logprob)`` pairs: the pair for the sampled token is
    used, else the first pair. None when the sampler gave none, or gave them for only some tokens.
    """
    if logprobs is None or len(logprobs) != len(tokens):
        return None
    out = []
    for token, entry in zip(tokens, logprobs, strict=True):
        if entry is None:
            return None
        if isinstance(entry, (int, float)) and not isinstance(entry, bool):
            out.append(float(entry))
            continue
        pairs = list(entry)
        if not pairs:
            return None
        match = next((lp for tid, lp in pairs if tid == token), pairs[0][1])
        out.append(float(match))
    return out


@dataclass(frozen=True)
class Turn:
    """Tokens one assistant turn added: what was generated, then the bridge to the next prompt."""

    generated_ids: tuple[int, ...]
    generated_logprobs: tuple[float, ...] | None
    bridge_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.generated_logprobs is not None and len(self.generated_logprobs) != len(self.generated_ids):
            raise ValueError(
                f"Turn has {len(self.generated_logprobs)} logprobs for {len(self.generated_ids)} generated tokens"
            )

    @classmethod
    def of(cls, generated_ids: Sequence[int], logprobs: Sequence[float] | None, bridge_ids: Sequence[int] = ()) -> Turn:
        return cls(tuple(generated_ids), None if logprobs is None else tuple(logprobs), tuple(bridge_ids))

    def input_ids(self) -> list[int]:
        return [*self.generated_ids, *self.bridge_ids]

    def labels(self) -> list[int]:
        """Generated tokens label themselves; bridge tokens are ``-100``."""
        return [*self.generated_ids, *([IGNORE_INDEX] * len(self.bridge_ids))]

    def logprobs(self) -> list[float] | None:
        """One logprob per generated (trainable) token; bridge tokens have none."""
        return None if self.generated_logprobs is None else list(self.generated_logprobs)

    def __len__(self) -> int:
        return len(self.generated_ids) + len(self.bridge_ids)


class TokenLedger:
    """A trajectory's token stream: an untrainable prompt, then appended ``Turn`` objects."""

    def __init__(self, prompt_ids: Sequence[int]):
        self.prompt_ids = tuple(prompt_ids)
        self.turns: list[Turn] = []
        self._length = len(self.prompt_ids)

    def append(self, turn: Turn) -> None:
        self.turns.append(turn)
        self._length += len(turn)

    def __len__(self) -> int:
        return self._length

    def input_ids(self) -> list[int]:
        ids = list(self.prompt_ids)
        for turn in self.turns:
            ids += turn.input_ids()
        return ids

    def labels(self) -> list[int]:
        labels = [IGNORE_INDEX] * len(self.prompt_ids)
        for turn in self.turns:
            labels += turn.labels()
        return labels

    def logprobs(self) -> list[float] | None:
        """Flat logprobs of every trainable token, or None if any turn lacked them."""
        out: list[float] = []
        for turn in self.turns:
            lps = turn.logprobs()
            if lps is None:
                return None
            out += lps
        return out

    def generated_count(self) -> int:
        return sum(len(turn.generated_ids) for turn in self.turns)

    def feature(self) -> dict[str, Any]:
        """``input_ids``, unshifted ``labels``, ``attention_mask``, ``position_ids``, ``length``, ``logprobs``."""
        ids = self.input_ids()
        return {
            "input_ids": ids,
            "labels": self.labels(),
            "attention_mask": [1] * len(ids),
            "position_ids": list(range(len(ids))),
            "length": len(ids),
            "logprobs": self.logprobs(),
        }


def check_aligned(trajectory: Mapping[str, Any], generated_tokens: int | None = None) -> None:
    """Raise ``RuntimeError`` unless the token fields are mutually consistent (SPEC 17.2 invariants).

    ``len(input_ids) == len(labels)`` (and ``attention_mask``/``position_ids``/``length`` when present);
    every label is -100 or its input id; the trainable count equals ``len(logprobs)`` when logprobs are
    present, and ``generated_tokens`` when given.
    """
    ids, labels = trajectory.get("input_ids"), trajectory.get("labels")
    if ids is None or labels is None:
        raise RuntimeError("trajectory has no input_ids/labels to check")
    if len(ids) != len(labels):
        raise RuntimeError(f"len(input_ids)={len(ids)} != len(labels)={len(labels)}")
    for key in ("attention_mask", "position_ids"):
        if key in trajectory and len(trajectory[key]) != len(ids):
            raise RuntimeError(f"len({key})={len(trajectory[key])} != len(input_ids)={len(ids)}")
    if "length" in trajectory and trajectory["length"] != len(ids):
        raise RuntimeError(f"length={trajectory['length']} != len(input_ids)={len(ids)}")
    trainable = 0
    for position, (token, label) in enumerate(zip(ids, labels, strict=True)):
        if label == IGNORE_INDEX:
            continue
        if label != token:
            raise RuntimeError(f"label {label} at position {position} is neither -100 nor its input id {token}")
        trainable += 1
    logprobs = trajectory.get("logprobs")
    if logprobs is not None and len(logprobs) != trainable:
        raise RuntimeError(f"{len(logprobs)} logprobs for {trainable} trainable tokens")
    if generated_tokens is not None and generated_tokens != trainable:
        raise RuntimeError(f"{trainable} trainable tokens but {generated_tokens} were generated")
