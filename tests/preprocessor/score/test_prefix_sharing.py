"""Prefix sharing of prompt logprobs: which sequences are fetched, and that scores do not change.

The backend here is pure logic (a causal "model" whose logprob at a position is a function of the
tokens up to it); the real engine is compared with and without sharing in test_tiny_model.py.
"""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from twinkle_agentic.data_format import pack_value
from twinkle_agentic.preprocessor import ScoreFilter
from twinkle_agentic.preprocessor.score import ChrMinScorer, ScoreBackend, SIFDScorer
from twinkle_agentic.preprocessor.score.backends.base import covering_sequences

sequences = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=6), min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(sequences)
def test_covering_sequences_hold_every_input_and_nothing_twice(batch):
    fetch, slots = covering_sequences(batch)
    assert len(slots) == len(batch)
    for seq, k in zip(batch, slots, strict=True):
        assert fetch[k][: len(seq)] == seq  # every input is read off a fetched sequence
    # minimal: no fetched sequence is a prefix of (or equal to) another fetched one
    for i, a in enumerate(fetch):
        for j, b in enumerate(fetch):
            assert i == j or b[: len(a)] != a
    # and nothing is fetched that no input needs
    assert sorted(map(tuple, fetch)) == sorted(
        {tuple(s) for s in batch if not any(len(o) > len(s) and o[: len(s)] == s for o in batch)}
    )


def test_covering_sequences_examples():
    fetch, slots = covering_sequences([[1, 2], [1, 2, 3], [4], [1, 2], [1, 2, 3, 4], [4, 5], [2]])
    assert sorted(fetch) == [[1, 2, 3, 4], [2], [4, 5]]
    assert [fetch[k] for k in slots] == [[1, 2, 3, 4]] * 2 + [[4, 5]] + [[1, 2, 3, 4]] * 2 + [[4, 5], [2]]


class CausalBackend(ScoreBackend):
    """Characters are tokens; a token's logprob depends only on the tokens up to it, like a causal LM.

    Sequences longer than ``max_len`` fail (come back None), as an engine's length limit would.
    """

    def __init__(self, max_len: int = 10_000) -> None:
        self.max_len = max_len
        self.calls: list[list[list[int]]] = []

    def encode_chat(self, messages, tools=None):
        text = "".join(f"<{m['role']}>{m.get('content') or ''}" for m in messages) + "<assistant>"
        return self.encode_text(text)

    def encode_text(self, text):
        return [ord(c) for c in text]

    def prompt_logprobs(self, ids_batch):
        self.calls.append([list(s) for s in ids_batch])
        return [
            None
            if len(ids) > self.max_len
            else [None]
            + [-(zlib.crc32(bytes(str(ids[: i + 1]), "ascii")) % 997) / 100 for i in range(1, len(ids))]
            for ids in ids_batch
        ]


def trajectory_rows() -> list[dict]:
    """Rows cut from one conversation, as in an agent dataset: each holds the history before its round."""
    messages = [{"role": "system", "content": "Be brief and exact."}]
    rows = []
    for k, (question, answer) in enumerate(
        [
            ("add two and two", "two plus two is four"),
            ("and times three", "four times three is twelve"),
            ("minus five", "twelve minus five is seven"),
            ("halve it", "seven halved is three and a half"),
        ]
    ):
        messages = messages + [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
        rows.append(
            {
                "id": f"r{k}",
                "messages": list(messages),
                "user_data": [("key_rounds", pack_value([len(messages) - 1]))],
            }
        )
    return rows


def scores(f: ScoreFilter, rows: list[dict]) -> list[dict]:
    records: list[dict] = []
    f.trace_callback = records.append
    f(rows)
    return [{name: s["score"] for name, s in r["scores"].items()} for r in records]


def test_sharing_sends_fewer_tokens_and_changes_no_score():
    rows = trajectory_rows()
    shared, plain = CausalBackend(), CausalBackend()
    on = ScoreFilter([SIFDScorer(), ChrMinScorer()], backend=shared)
    off = ScoreFilter([SIFDScorer(), ChrMinScorer()], backend=plain)
    off.share_prefixes = False
    assert scores(on, rows) == scores(off, rows)
    requested, sent = on.last_logprob_tokens
    assert off.last_logprob_tokens == (requested, requested)
    # each row's conditional sequence starts every later row's: only the last one is sent in full
    assert sent < requested / 2
    assert len(shared.calls) == 1 and len(shared.calls[0]) == 1 + len(rows)


def test_a_failed_long_sequence_does_not_cost_its_prefixes_their_scores():
    rows = trajectory_rows()
    longest = max(len(CausalBackend().encode_chat(r["messages"])) for r in rows)
    backend = CausalBackend(max_len=longest - 20)  # the last row's conditional sequence is too long
    f = ScoreFilter([SIFDScorer()], backend=backend)
    got = scores(f, rows)
    reference = ScoreFilter([SIFDScorer()], backend=CausalBackend(max_len=longest - 20))
    reference.share_prefixes = False
    assert got == scores(reference, rows)
    assert [s["sifd"] is None for s in got] == [False, False, False, True]
    assert len(backend.calls) == 2  # the shared call, then the prefixes of the failed one on their own
