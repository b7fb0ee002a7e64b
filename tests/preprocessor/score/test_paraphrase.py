"""ParaphraseScorer with the real bundled all-MiniLM-L6-v2 embeddings; paraphrases come over HTTP."""

import pytest

from twinkle_agentic.preprocessor import ParaphraseScorer, ScoreFilter
from twinkle_agentic.preprocessor.score import OpenAIBackend
from twinkle_agentic.preprocessor.score.embedding import cosine
from twinkle_agentic.preprocessor.score.paraphrase import RESTATE_INSTRUCTION

REFERENCE = (
    "Photosynthesis lets plants turn sunlight, water and carbon dioxide into glucose and oxygen; "
    "the light reactions happen in the thylakoids and the Calvin cycle in the stroma."
)
FAITHFUL = (
    "Plants use photosynthesis to convert light, water and CO2 into sugar and oxygen. Light-dependent "
    "reactions occur in the thylakoid membranes, while the Calvin cycle runs in the stroma."
)
UNRELATED = "The stock market closed higher today after the central bank kept interest rates unchanged."


QUESTIONS = ["How does photosynthesis work?", "Explain photosynthesis briefly."]


def rows():
    return [
        {
            "id": f"r{i}",
            "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": REFERENCE}],
        }
        for i, q in enumerate(QUESTIONS)
    ]


def test_similarity_ranks_faithful_over_unrelated(scripted, minilm):
    replies = dict(zip(QUESTIONS, [FAITHFUL, UNRELATED], strict=True))  # requests run concurrently
    scripted.chat = lambda body: [replies[body["messages"][0]["content"]]]
    records = []
    scorer = ParaphraseScorer(embed_backend=minilm, min_similarity=0.5)
    f = ScoreFilter(
        [scorer], backend=OpenAIBackend(scripted.url, "m", max_retries=0), trace_callback=records.append
    )
    kept, dropped = f(rows())
    faithful, unrelated = (r["scores"]["paraphrase"] for r in records)
    expected = minilm.embed([FAITHFUL, REFERENCE, UNRELATED])
    assert faithful["score"] == pytest.approx(cosine(expected[0], expected[1]), abs=1e-5)
    assert unrelated["score"] == pytest.approx(cosine(expected[2], expected[1]), abs=1e-5)
    assert faithful["score"] > 0.7 > 0.3 > unrelated["score"]
    assert [r["id"] for r in kept] == ["r0"] and dropped[0]["drop_reason"] == "score_round_failed"

    body = next(b for p, b in scripted.requests if p == "/v1/chat/completions")
    assert body["messages"][-2:] == [
        {"role": "assistant", "content": REFERENCE},
        {"role": "user", "content": RESTATE_INSTRUCTION},
    ]
    assert body["n"] == 1 and body["temperature"] == 0.7


def test_reference_cut_to_budget_and_short_references(scripted, minilm):
    scripted.chat = lambda body: [FAITHFUL]
    records = []
    f = ScoreFilter(
        [ParaphraseScorer(embed_backend=minilm, prompt_budget=150)],
        backend=OpenAIBackend(scripted.url, "m", max_retries=0),
        trace_callback=records.append,
    )
    short = {
        "id": "s",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello there!"}],
    }
    f(rows()[:1] + [short])
    cut, too_short = (r["scores"]["paraphrase"] for r in records)
    n_prompt = records[0]["n_prompt"]
    assert cut["extras"]["reference_tokens"] == 150 - n_prompt  # byte tokens: the reference was cut
    sent = next(b for p, b in scripted.requests if p == "/v1/chat/completions")["messages"][-2]["content"]
    assert REFERENCE.startswith(sent) and len(sent.encode()) == 150 - n_prompt
    assert too_short["score"] is None and too_short["extras"]["skipped"] == "short_reference"


def test_default_embedder_is_the_bundled_model():
    from twinkle_agentic.preprocessor.score import MiniLMEmbedder

    assert isinstance(ParaphraseScorer().embed_backend, MiniLMEmbedder)
    with pytest.raises(TypeError, match="embed"):
        ParaphraseScorer(embed_backend=object())
