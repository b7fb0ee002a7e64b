"""NearDedupFilter's pure parts: normalisation, shingles, signatures, banding, verification and the
keep rule, and the filter in one process (run_pipeline included)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from twinkle_agentic.preprocessor import NearDedupFilter, run_pipeline
from twinkle_agentic.preprocessor.near_dedup import DUPLICATE_OF_KEY, NEAR_DUPLICATE
from twinkle_agentic.preprocessor.near_dedup_config import (
    NearDedupConfigError,
    candidate_probability,
    derive_banding,
)
from twinkle_agentic.preprocessor.near_dedup_minhash import band_keys, permutations, signature
from twinkle_agentic.preprocessor.near_dedup_select import (
    DROPPED,
    KEPT,
    UNKNOWN,
    RowFeatures,
    bucket_candidates,
    decide,
    jaccard,
    near_parents,
    set_digest,
)
from twinkle_agentic.preprocessor.near_dedup_text import conversation_words, normalise, shingle_set

WORDS = [f"w{i}" for i in range(5000)]


def chat(user: str, assistant: str = "fine, here it is", row_id: int = 0) -> dict:
    return {
        "id": row_id,
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
    }


def text(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(n)]


def test_normalise_folds_case_punctuation_whitespace_and_width():
    assert normalise("Hello,   WORLD!\n\tIt's  ＡＢＣ-12") == ["hello", "world", "it", "s", "abc", "12"]
    assert normalise("你好，世界") == ["你", "好", "世", "界"]
    assert normalise("  ...!!  ") == []


def test_conversation_words_mark_roles_and_select_turns():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "one two"},
        {"role": "assistant", "content": [{"type": "text", "text": "three"}]},
        {"role": "user", "content": "four"},
        "not a message",
    ]
    every = conversation_words(messages)
    assert [w for w in every if not w.startswith("\x01")] == ["be", "brief", "one", "two", "three", "four"]
    assert conversation_words(messages, "user") == ["\x01u", "one", "two", "\x01u", "four"]
    assert conversation_words(messages, "user", max_turns=1) == ["\x01u", "one", "two"]
    assert conversation_words(messages, "assistant") == ["\x01a", "three"]
    # the same words said by the other role are other shingles
    assert conversation_words([{"role": "user", "content": "x"}]) != conversation_words(
        [{"role": "assistant", "content": "x"}]
    )
    assert conversation_words(None) == [] and conversation_words([{"role": "user", "content": "?!"}]) == []


def test_shingle_sets():
    words = ["a", "b", "c", "d", "a", "b", "c"]
    shingles = shingle_set(words, 3)
    assert shingles.dtype == np.uint64 and list(shingles) == sorted(set(shingles.tolist()))
    assert shingles.size == 4  # abc, bcd, cda, dab (abc repeats)
    assert shingle_set(["only", "two"], 3).size == 1  # fewer words than a shingle: one shingle
    assert shingle_set([], 3).size == 0
    assert not np.array_equal(shingle_set(["a", "b", "c"], 3), shingle_set(["c", "b", "a"], 3))
    # stable across calls and caches
    assert np.array_equal(shingle_set(words, 3, {}), shingle_set(words, 3))


def test_jaccard_is_exact():
    a = np.array([1, 2, 3, 4], dtype=np.uint64)
    b = np.array([3, 4, 5], dtype=np.uint64)
    assert jaccard(a, b) == pytest.approx(2 / 5)
    assert jaccard(a, a) == 1.0 and jaccard(a, np.array([9], dtype=np.uint64)) == 0.0
    assert jaccard(np.empty(0, np.uint64), np.empty(0, np.uint64)) == 0.0


def test_minhash_estimates_jaccard_and_is_deterministic():
    perms = permutations(256, seed=3)
    x = shingle_set(text(600, 1), 3)
    y = shingle_set(text(300, 1) + text(300, 2), 3)
    true = jaccard(x, y)
    sx, sy = signature(x, perms), signature(y, perms)
    assert sx.dtype == np.uint32 and sx.shape == (256,)
    assert abs(float(np.mean(sx == sy)) - true) < 0.1
    assert np.array_equal(sx, signature(x, permutations(256, seed=3)))
    assert not np.array_equal(sx, signature(x, permutations(256, seed=4)))
    # chunked and unchunked agree
    big = shingle_set(text(9000, 5), 3)
    a, b = perms
    direct = ((a * big[None, :] + b) >> np.uint64(32)).min(1)
    assert np.array_equal(signature(big, perms), direct.astype(np.uint32))


def test_band_keys_collide_only_on_an_equal_band():
    sig = np.arange(16, dtype=np.uint32)
    keys = band_keys(sig, 4, 4)
    assert keys.dtype == np.int64 and keys.size == 4
    other = sig.copy()
    other[0] += 1  # changes band 0 only
    assert np.intersect1d(keys, band_keys(other, 4, 4)).size == 3
    # the band index is in the key: equal values in two bands give two keys
    assert band_keys(np.zeros(16, dtype=np.uint32), 4, 4).size == 4


def test_banding_is_derived_from_the_threshold_and_validated():
    bands, rows = derive_banding(0.5, 128)
    assert bands * rows <= 128
    assert candidate_probability(0.6, bands, rows) > 0.95 > 0.2 > candidate_probability(0.25, bands, rows)
    assert NearDedupFilter(threshold=0.8).rows > NearDedupFilter(threshold=0.5).rows
    assert (NearDedupFilter(bands=8, rows=4).bands, NearDedupFilter(bands=8, rows=4).rows) == (8, 4)
    for bad, needle in (
        ({"turns": "bot"}, "turns"),
        ({"threshold": 0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": True}, "threshold"),
        ({"shingle_words": 0}, "shingle_words"),
        ({"num_perm": 1}, "num_perm"),
        ({"bands": 4}, "both bands and rows"),
        ({"bands": 40, "rows": 4}, "exceeds num_perm"),
        ({"max_turns": 0}, "max_turns"),
        ({"seed": -1}, "seed"),
    ):
        with pytest.raises(NearDedupConfigError, match=needle):
            NearDedupFilter(**bad)


def feature(
    values: list[int], messages: int = 2, chars: int = 10, bands: tuple[int, ...] = (7,)
) -> RowFeatures:
    shingles = np.array(sorted(values), np.uint64)
    return RowFeatures(shingles, np.array(bands, np.int64), messages, chars, set_digest(shingles))


def test_set_digest_and_bucket_candidates():
    a = np.arange(10, dtype=np.uint64)
    assert set_digest(a) == set_digest(a.copy()) != set_digest(a[1:])
    # members best first: 2 is a copy of 0; 1 and 3 are representatives paired with every better one
    copies, pairs = bucket_candidates([5, 6, 5, 7, 6])
    assert copies == [(2, 0), (4, 1)]
    assert pairs == [(1, 0), (3, 0), (3, 1)]


def test_keep_rule_longest_first_ties_by_id_and_chains():
    same = list(range(20))
    # longest (messages, then characters) is kept; ties go to the smaller id
    parents = near_parents([feature(same, 2, 10), feature(same, 4, 5), feature(same, 4, 9)], [0, 1, 2], 0.9)
    assert parents == {0: 2, 1: 2}
    assert near_parents([feature(same), feature(same), feature(same)], [5, 3, 9], 0.9) == {0: 1, 2: 1}
    # a chain: A ~ B, B ~ C, not A ~ C: B is dropped for A; C is compared with kept rows only, so
    # it is kept (B, its only near copy, is dropped)
    a, b, c = list(range(0, 20)), list(range(5, 25)), list(range(10, 30))
    chain = near_parents([feature(a, 3), feature(b, 2), feature(c, 1)], [0, 1, 2], 0.55)
    assert chain == {1: 0}
    # a longer chain alternates: A kept, B dropped for A, C kept, D dropped for C
    d = list(range(15, 35))
    chain = near_parents([feature(a, 4), feature(b, 3), feature(c, 2), feature(d, 1)], [0, 1, 2, 3], 0.55)
    assert chain == {1: 0, 3: 2}
    # a row near two kept rows names the better-ranked one, whatever the rows' order
    x, y, z = list(range(0, 20)), list(range(12, 32)), list(range(6, 26))  # x ~ z ~ y, x !~ y
    assert near_parents([feature(z, 1), feature(x, 2), feature(y, 3)], [0, 1, 2], 0.5) == {0: 2}
    # exact copies follow the best row of their set: dropped for it when it is kept, else for the
    # kept row it was dropped for (every drop names a kept row)
    near = list(range(1, 21))
    rows = [feature(near, 9), feature(same, 3), feature(same, 1), feature(same, 2)]
    assert near_parents(rows, [0, 1, 2, 3], 0.8) == {1: 0, 2: 0, 3: 0}
    assert near_parents(rows[1:], [1, 2, 3], 0.8) == {1: 0, 2: 0}
    # a verified parent must reach the threshold: below it nothing is dropped
    assert near_parents([feature(a, 3), feature(b, 2)], [0, 1], 0.9) == {}
    # rows that share no band are never compared; rows without words never take part
    apart = near_parents([feature(same, bands=(1,)), feature(same[1:], bands=(2,)), None], [0, 1, 2], 0.5)
    assert apart == {}
    # the parent is the best-ranked verified match over all shared bands, whatever the bucket order;
    # rows 1 and 2 share no band, so both are kept
    rows = [
        feature(same, 1, bands=(1, 2)),
        feature(same[1:], 3, bands=(2,)),
        feature(same[:-1], 2, bands=(1,)),
    ]
    assert near_parents(rows, [0, 1, 2], 0.9) == {0: 1}


def test_decide_waits_for_every_better_row():
    assert decide([]) == (KEPT, None)
    assert decide([(DROPPED, 4), (KEPT, 7), (UNKNOWN, 9)]) == (DROPPED, 7)
    assert decide([(DROPPED, 4), (UNKNOWN, 7), (KEPT, 9)]) == (UNKNOWN, None)  # 7 may yet be kept
    assert decide([(DROPPED, 4), (DROPPED, 7)]) == (KEPT, None)


def test_filter_drops_near_copies_and_names_the_kept_row():
    base = " ".join(text(200, 9))
    edited = base.split()
    for i in range(0, len(edited), 40):  # 2.5 % of the words changed
        edited[i] = "changed"
    rows = [
        chat(base, row_id=0),
        chat(base.upper().replace(" ", "  ,") + " !!", row_id=1),  # case/punctuation/space variant, longer
        chat(" ".join(edited), row_id=2),
        chat(" ".join(text(200, 10)), row_id=3),
        {"id": 4, "messages": [{"role": "user", "content": "..."}]},  # no words: never a duplicate
        "not a row",
    ]
    snapshot = json.dumps(rows)
    kept, dropped = NearDedupFilter()(rows)
    assert json.dumps(rows) == snapshot  # inputs untouched
    assert [r["id"] for r in kept] == [1, 3, 4]
    by_reason = {d.get("id", "x"): d for d in dropped}
    assert by_reason["x"]["drop_reason"] == "invalid_row"
    for i in (0, 2):
        assert by_reason[i]["drop_reason"] == NEAR_DUPLICATE
        assert by_reason[i][DUPLICATE_OF_KEY] == {"index": 1}
    assert all("drop_reason" not in r for r in kept)


def test_filter_respects_threshold_and_turns():
    base = text(100, 1)
    half = base[:50] + text(50, 2)
    rows = [chat(" ".join(base), row_id=0), chat(" ".join(half), row_id=1)]
    assert len(NearDedupFilter(threshold=0.9)(rows)[0]) == 2
    assert len(NearDedupFilter(threshold=0.2, num_perm=256)(rows)[0]) == 1
    # the same question with different answers: duplicates on user turns only
    q = " ".join(text(60, 3))
    pair = [chat(q, " ".join(text(80, 4)), 0), chat(q, " ".join(text(80, 5)), 1)]
    assert len(NearDedupFilter()(pair)[0]) == 2
    assert len(NearDedupFilter(turns="user")(pair)[0]) == 1


def test_filter_pickles_and_recomputes_its_permutations():
    import pickle

    f = NearDedupFilter(num_perm=64, seed=2)
    row = chat(" ".join(text(50, 1)))
    before = f.features(row)
    clone = pickle.loads(pickle.dumps(f))
    assert clone._perms is None and np.array_equal(clone.features(row).bands, before.bands)


def test_run_pipeline_names_kept_rows_by_origin(tmp_path):
    base = " ".join(text(120, 7))
    rows = [
        chat(base, row_id=0),
        chat(" ".join(text(120, 8)), row_id=1),
        chat(base + " extra words", row_id=2),
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = run_pipeline([str(path)], [{"NearDedupFilter": {"threshold": 0.6}}])
    assert sorted(r["id"] for r in run.kept) == [1, 2]
    assert all(set(r) == {"id", "messages"} for r in run.kept)
    ((step, reason, row),) = run.dropped
    assert (step, reason, row["id"]) == ("NearDedupFilter", NEAR_DUPLICATE, 0)
    assert row[DUPLICATE_OF_KEY]["line"] == 3 and row[DUPLICATE_OF_KEY]["source"].endswith("rows.jsonl")
    assert set(row) == {"id", "messages", DUPLICATE_OF_KEY}
