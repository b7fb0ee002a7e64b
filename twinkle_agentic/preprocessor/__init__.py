"""Quality preprocessing for multi-turn chat and agent rows.

Names are resolved lazily so ``import twinkle_agentic.preprocessor`` stays cheap and never imports
the optional stacks (Presidio, spaCy, vLLM...) that some steps need.
"""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

_EXPORTS = {
    "QualityPreprocessor": ".quality",
    "run_pipeline": ".pipeline",
    "PipelineRun": ".pipeline",
    "merge_log_shards": ".dropped_log",
    "StepStats": ".stats",
    "Filter": ".base",
    "Mapper": ".base",
    "HardFilter": ".hard",
    "DeadLoopFilter": ".dead_loop",
    "DedupFilter": ".dedup",
    "NearDedupFilter": ".near_dedup",
    "RefuseFilter": ".refuse",
    "TokenSoupFilter": ".token_soup",
    "ModelFilter": ".model_filter",
    "MessageNormalizer": ".normalizer",
    "IntentClassifier": ".intent",
    "PIIPresidioFilter": ".pii",
    "ScoreFilter": ".score",
    "CharStatsScorer": ".score",
    "ChrMinScorer": ".score",
    "SIFDScorer": ".score",
    "PassNScorer": ".score",
    "ParaphraseScorer": ".score",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
