"""Token bookkeeping for engine rollouts: the one place where input ids, labels and logprobs are built.

A trajectory's tokens are its prompt (never trainable) followed by turns. A ``Turn`` is what the
policy generated (trainable, with one logprob per token) followed by the bridge the rollout inserted
after it (tool results and the next generation prompt: never trainable, no logprobs). A turn also
carries which policy versions generated its tokens, so a trainer can tell stale tokens from fresh
ones after a weight update. A ``TokenLedger`` only appends turns, so alignment holds by
construction; ``check_aligned`` verifies it on every output anyway (SPEC 17.2 invariants), and tests
call it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twinkle_agentic.data_format import PolicySpan, check_policy_version_runs

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
    """Tokens one assistant turn added: what was generated, then the bridge to the next prompt.

    ``policy_versions`` are the sampler's ``(version, token_count)`` runs over ``generated_ids``
    (None: unknown).
    """

    generated_ids: tuple[int, ...]
    generated_logprobs: tuple[float, ...] | None
    bridge_ids: tuple[int, ...] = ()
    policy_versions: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.generated_logprobs is not None and len(self.generated_logprobs) != len(self.generated_ids):
            raise ValueError(
                f"Turn has {len(self.generated_logprobs)} logprobs for {len(self.generated_ids)} generated tokens"
            )
        runs = check_policy_version_runs(self.policy_versions, len(self.generated_ids))
        object.__setattr__(self, "policy_versions", None if runs is None else tuple(runs))

    @classmethod
    def of(
        cls,
        generated_ids: Sequence[int],
        logprobs: Sequence[float] | None,
        bridge_ids: Sequence[int] = (),
        policy_versions: Sequence[tuple[int, int]] | None = None,
    ) -> Turn:
        return cls(
            tuple(generated_ids),
            None if logprobs is None else tuple(logprobs),
            tuple(bridge_ids),
            policy_versions,  # checked and made a tuple of pairs by __post_init__
        )

    def last_version(self) -> int | None:
        """The version that generated this turn's last token (None: no token, or unknown)."""
        for version, count in reversed(self.policy_versions or ()):
            if count:
                return version
        return None

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

    def policy_versions(self) -> list[PolicySpan] | None:
        """Which version generated which trainable tokens: ``{"version", "start", "end"}`` spans over
        ``input_ids`` (half-open), one per turn, or more where an update landed inside a turn (runs
        of one version inside a turn merged). None if any turn lacked versions."""
        spans: list[PolicySpan] = []
        position = len(self.prompt_ids)
        for turn in self.turns:
            if turn.policy_versions is None:
                return None
            first = len(spans)
            for version, count in turn.policy_versions:
                if not count:
                    continue
                if len(spans) > first and spans[-1]["version"] == version:
                    spans[-1]["end"] += count
                else:
                    spans.append({"version": version, "start": position, "end": position + count})
                position += count
            position += len(turn.bridge_ids)
        return spans

    def policy_version(self) -> int | None:
        """The version that generated the last generated token (None: no token, or its version unknown)."""
        for turn in reversed(self.turns):
            if turn.generated_ids:
                return turn.last_version()
        return None

    def feature(self) -> dict[str, Any]:
        """``input_ids``, unshifted ``labels``, ``attention_mask``, ``position_ids``, ``length``, ``logprobs``,
        ``policy_version`` and ``policy_versions``."""
        ids = self.input_ids()
        return {
            "input_ids": ids,
            "labels": self.labels(),
            "attention_mask": [1] * len(ids),
            "position_ids": list(range(len(ids))),
            "length": len(ids),
            "logprobs": self.logprobs(),
            "policy_version": self.policy_version(),
            "policy_versions": self.policy_versions(),
        }


def check_aligned(trajectory: Mapping[str, Any], generated_tokens: int | None = None) -> None:
    """Raise ``RuntimeError`` unless the token fields are mutually consistent (SPEC 17.2 invariants).

    ``len(input_ids) == len(labels)`` (and ``attention_mask``/``position_ids``/``length`` when present);
    every label is -100 or its input id; the trainable count equals ``len(logprobs)`` when logprobs are
    present, and ``generated_tokens`` when given; ``policy_versions`` (when present) cover exactly the
    trainable positions, in order, and ``policy_version`` is the last span's version.
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
    trainable: list[int] = []
    for position, (token, label) in enumerate(zip(ids, labels, strict=True)):
        if label == IGNORE_INDEX:
            continue
        if label != token:
            raise RuntimeError(f"label {label} at position {position} is neither -100 nor its input id {token}")
        trainable.append(position)
    logprobs = trajectory.get("logprobs")
    if logprobs is not None and len(logprobs) != len(trainable):
        raise RuntimeError(f"{len(logprobs)} logprobs for {len(trainable)} trainable tokens")
    if generated_tokens is not None and generated_tokens != len(trainable):
        raise RuntimeError(f"{len(trainable)} trainable tokens but {generated_tokens} were generated")
    spans = trajectory.get("policy_versions")
    if spans is not None:
        _check_spans(spans, trainable, len(ids))
        last = spans[-1]["version"] if spans else None
        if "policy_version" in trajectory and trajectory["policy_version"] != last:
            raise RuntimeError(
                f"policy_version={trajectory['policy_version']!r} but the last generated token's span has version "
                f"{last!r}"
            )


def _check_spans(spans: Sequence[Mapping[str, Any]], trainable: list[int], length: int) -> None:
    """The spans, in order, cover exactly the trainable positions of ``input_ids`` (``length`` long)."""
    if isinstance(spans, (str, bytes, Mapping)) or not isinstance(spans, Sequence):
        raise RuntimeError(f"policy_versions must be a list of spans or None, got {type(spans).__name__}")
    covered: list[int] = []
    for span in spans:
        values = [span.get(key) if isinstance(span, Mapping) else None for key in ("version", "start", "end")]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values) or values[1] >= values[2]:
            raise RuntimeError(f"policy_versions span {span!r} is not {{version, start < end}} of integers >= 0")
        if values[2] > length:
            raise RuntimeError(f"policy_versions span {span!r} ends past input_ids (length {length})")
        if covered and values[1] < covered[-1] + 1:
            raise RuntimeError(f"policy_versions span {span!r} overlaps or precedes the span before it")
        covered += range(values[1], values[2])
    if covered != trainable:
        stray = sorted(set(covered) ^ set(trainable))[:5]
        raise RuntimeError(
            f"policy_versions cover {len(covered)} positions but {len(trainable)} tokens are trainable; they differ at "
            f"positions {stray} (every generated token needs exactly one span)"
        )
