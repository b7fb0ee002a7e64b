"""``ScoreFilter``: score assistant rounds with pluggable scorers and keep the rows (and rounds) that pass.

``ScoreFilter()`` scores every assistant round with ``CharStatsScorer`` and needs no model. Model
scorers (``ChrMinScorer``, ``SIFDScorer``, ``PassNScorer``, ``ParaphraseScorer``) need a backend:
a ``ScoreBackend``, the project's sampler (with ``template``), or a config dict that builds one in
the process that uses it::

    ScoreFilter(scorers=[{"type": "sifd"}, {"type": "chr_min", "threshold": 0.5}],
                backend={"type": "sampler", "model": "/models/qwen", "max_model_len": 4096})
    ScoreFilter(scorers=["chr_min"], backend={"type": "openai", "base_url": "http://vllm:8000", "model": "qwen"})

Such a filter sets ``needs_actor = True``: the preprocess job runs it as an actor pool whose actors
build the engine once (``warmup()``) and score many batches. In the job's YAML::

    steps:
      - IntentClassifier
      - ScoreFilter:
          scorers: [sifd, {type: chr_min, threshold: 0.47}]
          backend: {type: sampler, model: /models/qwen, max_model_len: 4096, dtype: bfloat16}
          max_prompt_tokens: 1024
        actors: 2          # one engine per actor
        batch_size: 256    # all rounds of a batch of rows share one engine call

The filter object is built in the driver without touching the model (config backends are lazy)
and pickles as its configuration.

A batch is processed as a whole: every round of every row is tokenised, then each scorer sees all
eligible rounds in one call, and the logprobs that ``ChrMinScorer``/``SIFDScorer`` share are
fetched once, in one batched engine call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ...data_format import user_data_set
from ...traces import TraceWriter
from ..base import INVALID_ROW, drop
from ..batch import to_rows
from .backends import build_backend
from .backends.base import TokenLogprobs, covering_sequences
from .char_stats import CharStatsScorer
from .contexts import KEY_ROUNDS, build_contexts, key_rounds_of, tokenize_contexts
from .logprob import ChrMinScorer, SIFDScorer, answer_deltas
from .paraphrase import ParaphraseScorer
from .pass_n import PassNScorer
from .traces import round_trace_names
from .types import MIN_ANSWER_TOKENS, ScoreContext, ScoreResult, unmeasured

logger = logging.getLogger(__name__)

SCORE_ROUND_FAILED = "score_round_failed"
SCORE_ALL_ROUNDS_FAILED = "score_all_rounds_failed"
SCORE_NO_CONTEXT = "score_no_context"

SCORER_TYPES: dict[str, type] = {
    cls.name: cls for cls in (CharStatsScorer, ChrMinScorer, SIFDScorer, PassNScorer, ParaphraseScorer)
}
SCORER_TYPES.update({cls.__name__: cls for cls in list(SCORER_TYPES.values())})


def build_scorer(spec: Any) -> Any:
    """A scorer from an instance, a name (``'chr_min'`` or ``'ChrMinScorer'``) or ``{'type': name, **kwargs}``."""
    if isinstance(spec, str):
        spec = {"type": spec}
    if isinstance(spec, dict):
        config = dict(spec)
        kind = config.pop("type", None)
        if kind not in SCORER_TYPES:
            raise ValueError(f"unknown scorer type {kind!r}; known: {sorted(SCORER_TYPES)}")
        return SCORER_TYPES[kind](**config)
    missing = [
        a for a in ("name", "requires_logprobs", "requires_backend", "score_batch") if not hasattr(spec, a)
    ]
    if missing:
        raise TypeError(f"{type(spec).__name__} is not a scorer: it lacks {missing}")
    return spec


def _rewrite_key_rounds(row: dict, rounds: list[int]) -> dict:
    user_data = row.get("user_data")
    if isinstance(user_data, dict):
        user_data = {**user_data, KEY_ROUNDS: rounds}
    else:
        user_data = user_data_set(user_data, KEY_ROUNDS, rounds)
    return {**row, "user_data": user_data}


def _summary(results: list[ScoreResult]) -> dict[str, Any]:
    scores = [r.score for r in results if r.score is not None]
    extras: dict[str, list[float]] = {}
    for r in results:
        for key, value in r.extras.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                extras.setdefault(key, []).append(float(value))
    return {
        "n": len(results),
        "scored": len(scores),
        "mean": sum(scores) / len(scores) if scores else None,
        "min": min(scores) if scores else None,
        "max": max(scores) if scores else None,
        "passed": sum(r.passed for r in results),
        "extras": {k: sum(v) / len(v) for k, v in sorted(extras.items())},
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


class ScoreFilter:
    """Filter step: rows in, ``(kept, dropped)`` out; see the module docstring and SPEC section 10.

    Drop reasons: ``score_round_failed`` (a row without key rounds has a failing round and
    ``drop_row_on_any_fail``), ``score_all_rounds_failed`` (no key round passed), ``score_no_context``
    (nothing scoreable in a row that had key rounds or under an ``intents`` filter, unless
    ``keep_if_no_key_rounds``). Rows with key rounds keep only the key rounds that passed.

    ``trace_dir`` receives one JSON file per scored round (never cleared); ``trace_callback(record)``
    sees every round's record and ``success_callback(record)`` those of passing rounds.
    """

    name = "ScoreFilter"
    #: True on instances with a model backend: run them as an actor pool that holds the engine.
    needs_actor = False
    #: Fetch the prompt logprobs of a sequence that is a token prefix of another one in the same batch
    #: from the longer one (exact for causal models). Off only to measure what sharing saves.
    share_prefixes = True

    def __init__(
        self,
        scorers: Iterable[Any] | None = None,
        backend: Any = None,
        template: Any = None,
        intents: Iterable[str] | str | None = None,
        keep_if_no_key_rounds: bool = False,
        drop_row_on_any_fail: bool = True,
        max_prompt_tokens: int = 1024,
        trace_dir: str | None = None,
        trace_callback: Callable[[dict], Any] | None = None,
        success_callback: Callable[[dict], Any] | None = None,
    ) -> None:
        self.scorers = [build_scorer(s) for s in scorers] if scorers is not None else [CharStatsScorer()]
        if not self.scorers:
            raise ValueError("ScoreFilter needs at least one scorer (scorers=None gives CharStatsScorer)")
        names = [s.name for s in self.scorers]
        if len(set(names)) != len(names):
            raise ValueError(f"ScoreFilter scorers need distinct names, got {names}")
        if not isinstance(max_prompt_tokens, int) or max_prompt_tokens < 1:
            raise ValueError(
                f"ScoreFilter.max_prompt_tokens must be an integer >= 1, got {max_prompt_tokens!r}"
            )
        self.backend = build_backend(backend, template)
        for scorer in self.scorers:
            attach = getattr(scorer, "attach", None)
            if callable(attach):
                attach(self.backend)
            if scorer.requires_backend and getattr(scorer, "backend", None) is None:
                if self.backend is not None:
                    raise ValueError(
                        f"scorer {scorer.name!r} needs a backend but has no attach(backend) to take the filter's"
                    )
                raise ValueError(
                    f"scorer {scorer.name!r} needs a model backend: pass ScoreFilter(backend=...) "
                    "(a SamplerBackend/OpenAIBackend, a sampler with template=, or a config such as "
                    "{'type': 'sampler', 'model': <path>})"
                )
        if any(s.requires_logprobs for s in self.scorers) and self.backend is None:
            raise ValueError(
                "logprob scorers read prompt logprobs from ScoreFilter(backend=...); none was given"
            )
        self.intents = (
            frozenset([intents] if isinstance(intents, str) else intents) if intents is not None else None
        )
        self.keep_if_no_key_rounds = keep_if_no_key_rounds
        self.drop_row_on_any_fail = drop_row_on_any_fail
        self.max_prompt_tokens = max_prompt_tokens
        self.traces = TraceWriter(trace_dir) if trace_dir else None
        self.trace_callback = trace_callback
        self.success_callback = success_callback
        self.needs_actor = self.backend is not None or any(getattr(s, "backend", None) for s in self.scorers)
        self.needs_tokens = self.backend is not None and any(s.requires_backend for s in self.scorers)
        self.needs_logprobs = any(s.requires_logprobs for s in self.scorers)
        self.last_summary: dict[str, dict[str, Any]] = {}
        #: (tokens the last batch's logprobs covered, tokens sent to the backend after prefix sharing)
        self.last_logprob_tokens = (0, 0)

    def warmup(self) -> None:
        """Build the engine, clients and embedding models now (once per actor) rather than on the first batch."""
        backends = [self.backend] + [getattr(s, "backend", None) for s in self.scorers]
        unique = {id(b): b for b in backends if b is not None}.values()
        for part in [*unique, *self.scorers]:
            warmup = getattr(part, "warmup", None)
            if callable(warmup):
                warmup()

    # -- scoring ------------------------------------------------------------------------------

    def _fill_deltas(self, contexts: list[ScoreContext]) -> None:
        ready = [c for c in contexts if c.asst_ids is not None and len(c.asst_ids) >= MIN_ANSWER_TOKENS]
        if not ready:
            return
        batch = [c.prompt_ids + c.asst_ids for c in ready] + [list(c.asst_ids) for c in ready]
        logprobs = self._prompt_logprobs(batch)
        for k, ctx in enumerate(ready):
            conditional, unconditional = logprobs[k], logprobs[len(ready) + k]
            if conditional is None or unconditional is None:
                ctx.error = "prompt logprobs failed"
            else:
                ctx.deltas = answer_deltas(conditional, unconditional, len(ctx.prompt_ids))

    def _prompt_logprobs(self, batch: list[list[int]]) -> list[TokenLogprobs | None]:
        """The backend's prompt logprobs of ``batch``, fetching each shared prefix once.

        Sequences that are token prefixes of longer ones are read off the longer one (see
        ``covering_sequences``); one whose longer sequence failed (too long for the engine, say) is
        fetched on its own, so sharing never costs a round its score.
        """
        if self.share_prefixes:
            fetch, slots = covering_sequences(batch)
        else:
            fetch, slots = batch, list(range(len(batch)))
        fetched = self.backend.prompt_logprobs(fetch)
        out = [
            None if fetched[k] is None else fetched[k][: len(seq)]
            for k, seq in zip(slots, batch, strict=True)
        ]
        retry = [i for i, k in enumerate(slots) if out[i] is None and len(fetch[k]) > len(batch[i])]
        if retry:
            for i, logprobs in zip(
                retry, self.backend.prompt_logprobs([batch[i] for i in retry]), strict=True
            ):
                out[i] = logprobs
        self.last_logprob_tokens = (sum(map(len, batch)), sum(map(len, fetch)))
        return out

    def _skip_reason(self, scorer: Any, ctx: ScoreContext) -> str | None:
        uses_tokens = scorer.requires_logprobs or (
            scorer.requires_backend and getattr(scorer, "shares_filter_backend", False)
        )
        if uses_tokens and ctx.asst_ids is None and ctx.error:
            return "encode_failed"
        if scorer.requires_logprobs:
            if ctx.asst_ids is None or len(ctx.asst_ids) < MIN_ANSWER_TOKENS:
                return "short_answer"
            if ctx.deltas is None:
                return "logprobs_failed"
        return None

    def _run_scorer(self, scorer: Any, contexts: list[ScoreContext]) -> list[ScoreResult]:
        results: list[ScoreResult | None] = [None] * len(contexts)
        eligible: list[int] = []
        for i, ctx in enumerate(contexts):
            why = self._skip_reason(scorer, ctx)
            if why is None:
                eligible.append(i)
            else:
                results[i] = unmeasured(why, **({"error": ctx.error} if ctx.error else {}))
        if eligible:
            try:
                scored = list(scorer.score_batch([contexts[i] for i in eligible]))
                if len(scored) != len(eligible):
                    raise RuntimeError(f"returned {len(scored)} results for {len(eligible)} rounds")
            except Exception as exc:  # a scorer failure costs its measurements, never the batch
                logger.exception("[ScoreFilter] scorer %s failed on %d rounds", scorer.name, len(eligible))
                scored = [unmeasured("scorer_failed", error=f"{type(exc).__name__}: {exc}") for _ in eligible]
            for i, result in zip(eligible, scored, strict=True):
                results[i] = result
        return results  # type: ignore[return-value]

    def _log(self, scorer_name: str, summary: dict[str, Any]) -> None:
        extras = " ".join(f"{k}={_fmt(v)}" for k, v in summary["extras"].items())
        logger.info(
            "[ScoreFilter] %s: n=%d scored=%d mean=%s min=%s max=%s passed=%d/%d%s",
            scorer_name,
            summary["n"],
            summary["scored"],
            _fmt(summary["mean"]),
            _fmt(summary["min"]),
            _fmt(summary["max"]),
            summary["passed"],
            summary["n"],
            f" | {extras}" if extras else "",
        )

    # -- the step -----------------------------------------------------------------------------

    def __call__(self, rows: Any) -> tuple[list[dict], list[dict]]:
        rows = to_rows(rows)
        per_row: list[tuple[list[ScoreContext], bool] | None] = []
        contexts: list[ScoreContext] = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                per_row.append(None)
                continue
            row_contexts, had_key_rounds = build_contexts(i, row, self.intents)
            per_row.append((row_contexts, had_key_rounds))
            contexts.extend(row_contexts)

        if self.needs_tokens:
            tokenize_contexts(contexts, self.backend, self.max_prompt_tokens)
        if self.needs_logprobs:
            self._fill_deltas(contexts)
        scores: list[dict[str, ScoreResult]] = [{} for _ in contexts]
        self.last_summary = {}
        for scorer in self.scorers:
            results = self._run_scorer(scorer, contexts)
            for slot, result in zip(scores, results, strict=True):
                slot[scorer.name] = result
            if contexts:
                self.last_summary[scorer.name] = _summary(results)
                self._log(scorer.name, self.last_summary[scorer.name])

        kept: list[dict] = []
        dropped: list[dict] = []
        position = 0
        for row, info in zip(rows, per_row, strict=True):
            if info is None:
                dropped.append(drop(row, INVALID_ROW))
                continue
            row_contexts, had_key_rounds = info
            row_scores = scores[position : position + len(row_contexts)]
            position += len(row_contexts)
            passed = [all(r.passed for r in s.values()) for s in row_scores]
            out, reason = self._decide(row, row_contexts, had_key_rounds, passed)
            if reason is None:
                kept.append(out)
            else:
                dropped.append(drop(row, reason))
            self._record(row_contexts, row_scores, passed, reason)
        return kept, dropped

    def _decide(
        self, row: dict, contexts: list[ScoreContext], had_key_rounds: bool, passed: list[bool]
    ) -> tuple[dict, str | None]:
        if "drop_reason" in row:
            row = {k: v for k, v in row.items() if k != "drop_reason"}
        if not contexts:
            if (had_key_rounds or self.intents is not None) and not self.keep_if_no_key_rounds:
                return row, SCORE_NO_CONTEXT
            return row, None
        if had_key_rounds:
            rounds = [ctx.round for ctx, ok in zip(contexts, passed, strict=True) if ok]
            if not rounds:
                return row, SCORE_ALL_ROUNDS_FAILED
            return (row if key_rounds_of(row) == rounds else _rewrite_key_rounds(row, rounds)), None
        if self.drop_row_on_any_fail and not all(passed):
            return row, SCORE_ROUND_FAILED
        return row, None

    def _record(
        self,
        contexts: list[ScoreContext],
        scores: list[dict[str, ScoreResult]],
        passed: list[bool],
        reason: str | None,
    ) -> None:
        if self.traces is None and self.trace_callback is None and self.success_callback is None:
            return
        for ctx, row_scores, ok in zip(contexts, scores, passed, strict=True):
            record = {
                "row_id": ctx.row_id,
                "round": ctx.round,
                "intent": ctx.intent,
                "messages": ctx.history + [{"role": "assistant", "content": ctx.answer}],
                "n_prompt": ctx.n_prompt,
                "prompt_ids": ctx.prompt_ids,
                "asst_ids": ctx.asst_ids,
                "features": {"deltas": ctx.deltas, "error": ctx.error},
                "scores": {name: result.to_dict() for name, result in row_scores.items()},
                "passed": ok,
                "kept": reason is None,
                "drop_reason": reason,
            }
            if self.traces is not None:
                self.traces.write(record, round_trace_names(record))
            for callback in (self.trace_callback, self.success_callback if ok else None):
                if callback is not None:
                    try:
                        callback(record)
                    except Exception:  # a broken callback must not lose the batch
                        logger.exception(
                            "[ScoreFilter] trace callback failed for row %s round %d", ctx.row_id, ctx.round
                        )

    def __repr__(self) -> str:
        return f"ScoreFilter(scorers={self.scorers!r}, backend={self.backend!r}, intents={self.intents})"
