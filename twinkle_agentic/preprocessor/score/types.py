"""The scorer interface: what a scorer receives (``ScoreContext``) and returns (``ScoreResult``).

A scorer is any object with ``name``, ``requires_logprobs``, ``requires_backend`` and
``score_batch(contexts) -> list[ScoreResult]`` (one result per context, in order). ``ScoreFilter``
owns everything around it: choosing rounds, tokenising, fetching logprobs once for every scorer that
needs them, aggregation, traces and logs. A ``score`` of None means "could not be measured" and
always comes with ``passed=True``: a missing measurement never drops data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Rounds whose answer has fewer tokens than this get ``score=None, passed=True`` from token scorers.
MIN_ANSWER_TOKENS = 6


@dataclass
class ScoreResult:
    score: float | None
    passed: bool = True
    extras: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "passed": self.passed, "extras": self.extras}


def unmeasured(why: str, **extras: Any) -> ScoreResult:
    """A round a scorer could not measure: no score, passes, and says why in ``extras['skipped']``."""
    return ScoreResult(None, True, {"skipped": why, **extras})


@dataclass
class ScoreContext:
    """One candidate round of one row.

    ``messages`` is the whole history before the answer (``tools`` the row's tool schemas); ``prompt_messages`` is what remains after
    dropping the oldest non-system messages to fit ``max_prompt_tokens`` (equal to ``messages`` when
    nothing was tokenised). ``prompt_ids`` is that history chat-encoded with a generation prompt and
    ``asst_ids`` the raw tokens of ``answer``; both are None when no scorer needs tokens or when
    encoding failed (``error`` then says why). ``deltas`` (aligned with ``asst_ids``, None where a
    logprob was missing) are the per-token logprob gains from the context, filled by the filter when
    some scorer ``requires_logprobs``.
    """

    row_index: int
    row_id: str
    round: int
    intent: str
    messages: list[dict]
    answer: str
    row: dict
    tools: list[dict] | None = None
    prompt_messages: list[dict] | None = None
    prompt_ids: list[int] | None = None
    asst_ids: list[int] | None = None
    deltas: list[float | None] | None = None
    error: str | None = None

    @property
    def n_prompt(self) -> int | None:
        return None if self.prompt_ids is None else len(self.prompt_ids)

    @property
    def history(self) -> list[dict]:
        """The history a model should see: the truncated one when truncation ran."""
        return self.prompt_messages if self.prompt_messages is not None else self.messages


class Scorer:
    """Base class for the built-in scorers (any object with the same attributes works too).

    Scorers that need a model get the filter's backend through ``attach``; a scorer constructed with
    its own backend keeps it.
    """

    name: str = ""
    requires_logprobs: bool = False
    requires_backend: bool = False

    def __init__(self) -> None:
        self.backend: Any = None
        #: True when the backend is the filter's, so the contexts' token ids are in its vocabulary.
        self.shares_filter_backend = False

    def attach(self, backend: Any) -> None:
        if self.backend is None and backend is not None:
            self.backend = backend
            self.shares_filter_backend = True

    def warmup(self) -> None:
        """Load whatever the scorer loads lazily (models, clients); called once per actor."""

    def score_batch(self, contexts: list[ScoreContext]) -> list[ScoreResult]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
