"""Score-based filtering of assistant rounds: ``ScoreFilter``, the built-in scorers and their backends.

Nothing heavy is imported here: vLLM, Ray, the OpenAI client, torch and the embedding model load on
first use.
"""

from .backends import BackendError, OpenAIBackend, SamplerBackend, ScoreBackend, build_backend
from .char_stats import CharStatsScorer
from .embedding import MiniLMEmbedder
from .filter import SCORE_ALL_ROUNDS_FAILED, SCORE_NO_CONTEXT, SCORE_ROUND_FAILED, ScoreFilter, build_scorer
from .logprob import ChrMinScorer, SIFDScorer
from .paraphrase import ParaphraseScorer
from .pass_n import PassNScorer
from .types import MIN_ANSWER_TOKENS, ScoreContext, Scorer, ScoreResult

__all__ = [
    "MIN_ANSWER_TOKENS",
    "SCORE_ALL_ROUNDS_FAILED",
    "SCORE_NO_CONTEXT",
    "SCORE_ROUND_FAILED",
    "BackendError",
    "CharStatsScorer",
    "ChrMinScorer",
    "MiniLMEmbedder",
    "OpenAIBackend",
    "ParaphraseScorer",
    "PassNScorer",
    "SIFDScorer",
    "SamplerBackend",
    "ScoreBackend",
    "ScoreContext",
    "ScoreFilter",
    "ScoreResult",
    "Scorer",
    "build_backend",
    "build_scorer",
]
