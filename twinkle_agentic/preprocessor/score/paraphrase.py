"""``ParaphraseScorer``: can the model restate the answer without losing its meaning?

The reference answer is put back into the conversation as the assistant's turn, followed by a user
request to restate it in other words; the model draws one paraphrase and the score is the cosine
similarity of the paraphrase and the reference in a sentence-embedding space (the bundled
all-MiniLM-L6-v2 by default, or any backend with ``embed``). Answers that are incoherent or too
idiosyncratic to restate score low.
"""

from __future__ import annotations

from typing import Any

from ..text import strip_think
from .backends.base import call_or_none
from .embedding import MiniLMEmbedder, cosine
from .types import ScoreContext, Scorer, ScoreResult, unmeasured

#: Below this many reference tokens (after fitting the prompt budget) a paraphrase says too little.
MIN_REFERENCE_TOKENS = 50
RESTATE_INSTRUCTION = (
    "Restate your previous answer in your own words. Keep every fact, step and conclusion, add "
    "nothing new, and reply with the restatement only."
)


def build_embedder(spec: Any) -> Any:
    """None or 'minilm' -> the bundled MiniLM; a dict -> a backend config; anything with ``embed`` as is."""
    if spec is None or spec == "minilm":
        return MiniLMEmbedder()
    if isinstance(spec, dict):
        from .backends import build_backend

        return build_backend(spec)
    if not callable(getattr(spec, "embed", None)):
        raise TypeError(f"embed_backend needs an embed(texts) method, got {type(spec).__name__}")
    return spec


class ParaphraseScorer(Scorer):
    """Score = cosine(embed(paraphrase), embed(reference)); passes when ``min_similarity`` is None or
    the score is at least ``min_similarity``.

    The reference is cut to what fits ``prompt_budget`` tokens together with the round's prompt;
    fewer than 50 remaining reference tokens give no score.
    """

    name = "paraphrase"
    requires_backend = True

    def __init__(
        self,
        embed_backend: Any = None,
        min_similarity: float | None = None,
        prompt_budget: int = 4096,
        sample_temperature: float = 0.7,
    ) -> None:
        super().__init__()
        self.embed_backend = build_embedder(embed_backend)
        self.min_similarity = min_similarity
        self.prompt_budget = prompt_budget
        self.sample_temperature = sample_temperature

    def warmup(self) -> None:
        warmup = getattr(self.embed_backend, "warmup", None)
        if callable(warmup):
            warmup()

    def _reference(self, ctx: ScoreContext) -> tuple[str, int] | None:
        """The (possibly cut) reference text and its token count, or None when it is too short."""
        shared = self.shares_filter_backend and ctx.asst_ids is not None
        ids = ctx.asst_ids if shared else self.backend.encode_text(ctx.answer)
        room = self.prompt_budget - (ctx.n_prompt or 0)
        keep = min(len(ids), room)
        if keep < MIN_REFERENCE_TOKENS:
            return None
        text = ctx.answer if keep == len(ids) else self.backend.decode(ids[:keep])
        return text, keep

    def score_batch(self, contexts: list[ScoreContext]) -> list[ScoreResult]:
        results: list[ScoreResult | None] = [None] * len(contexts)
        todo: list[tuple[int, str, int]] = []
        for i, ctx in enumerate(contexts):
            reference = call_or_none(lambda ctx=ctx: self._reference(ctx), "paraphrase reference")
            if reference is None:
                results[i] = unmeasured("short_reference")
            else:
                todo.append((i, *reference))
        if not todo:
            return results  # type: ignore[return-value]

        convs = [
            contexts[i].history
            + [{"role": "assistant", "content": text}, {"role": "user", "content": RESTATE_INSTRUCTION}]
            for i, text, _ in todo
        ]
        max_tokens = max(2 * n for _, _, n in todo) + 16
        samples = self.backend.chat(convs, 1, self.sample_temperature, max_tokens)
        pairs: list[tuple[int, str, str, int]] = []
        for (i, text, n), drawn in zip(todo, samples, strict=True):
            if not drawn:
                results[i] = unmeasured("sampling_failed")
            else:
                pairs.append((i, strip_think(drawn[0]), text, n))

        texts = [t for _, paraphrase, reference, _ in pairs for t in (paraphrase, reference)]
        vectors = (
            call_or_none(lambda: self.embed_backend.embed(texts), "paraphrase embedding") if texts else []
        )
        for k, (i, paraphrase, _, n) in enumerate(pairs):
            if vectors is None:
                results[i] = unmeasured("embedding_failed")
                continue
            score = cosine(vectors[2 * k], vectors[2 * k + 1]) if paraphrase else 0.0
            passed = self.min_similarity is None or score >= self.min_similarity
            extras = {"reference_tokens": n, "paraphrase_chars": len(paraphrase), "paraphrase": paraphrase}
            results[i] = ScoreResult(score, passed, extras)
        return results  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"ParaphraseScorer(min_similarity={self.min_similarity}, prompt_budget={self.prompt_budget})"
