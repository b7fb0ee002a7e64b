"""The near-dedup benchmark's reference: brute-force Jaccard, its keep rule, copy injection and the
chain-following that decides recall (no ShareGPT needed)."""

from __future__ import annotations

import random

import numpy as np

from bench.near_copies import edit_words, near_copy, surface_variant
from bench.near_dedup import brute_force_drops, inject, pair_similarities, roots, true_groups
from twinkle_agentic.preprocessor import NearDedupFilter
from twinkle_agentic.preprocessor.near_dedup_select import jaccard


def sets_of(*values: list[int]) -> list[np.ndarray]:
    return [np.array(sorted(v), np.uint64) for v in values]


def test_pair_similarities_are_exact_jaccard():
    sets = sets_of(range(10), range(5, 15), range(100, 110), range(10))
    rows, cols, sim = pair_similarities(sets)
    found = {(i, j): s for i, j, s in zip(rows.tolist(), cols.tolist(), sim.tolist(), strict=True)}
    assert set(found) == {(0, 1), (0, 3), (1, 3)}  # pairs sharing no shingle are left out
    for (i, j), s in found.items():
        assert s == jaccard(sets[i], sets[j])


def test_brute_force_rule_and_groups():
    sets = sets_of(range(10), range(1, 11), range(10), range(50, 60))
    ranks = [(-2, 0, 0), (-3, 0, 1), (-1, 0, 2), (-2, 0, 3)]
    rows, cols, sim = pair_similarities(sets)
    # 2 copies 0's set (0 ranks higher); 1 ranks above 0 and is within 0.5 of it
    assert brute_force_drops(sets, ranks, rows, cols, sim, 0.5) == {0, 2}
    assert brute_force_drops(sets, ranks, rows, cols, sim, 0.95) == {2}
    # a chain A ~ B ~ C with A and C apart: B is dropped for A, and C, near no kept row, is kept
    chain = sets_of(range(0, 20), range(5, 25), range(10, 30))
    c_rows, c_cols, c_sim = pair_similarities(chain)
    assert brute_force_drops(chain, [(-3, 0, 0), (-2, 0, 1), (-1, 0, 2)], c_rows, c_cols, c_sim, 0.55) == {1}
    originals = np.array([True, True, True, False])
    groups = true_groups(4, [(0, 3)], originals, rows, cols, sim, 0.5)
    assert groups[0] == groups[1] == groups[2] == groups[3]
    assert len(set(true_groups(4, [], originals, rows, cols, sim, 0.95))) == 3


def test_injected_copies_are_near_and_traced_to_their_kept_row():
    rng = random.Random(1)
    words = [f"w{i}" for i in range(3000)]
    rows = [
        {"messages": [{"role": "user", "content": " ".join(rng.choice(words) for _ in range(300))}]}
        for _ in range(30)
    ]
    mixed, pairs = inject(rows, 0.2, rng)
    assert len(mixed) == 36 and len(pairs) == 6
    for o, c in pairs:
        assert mixed[o] is not mixed[c] and mixed[o] in rows
    tagged = [{**row, "_pos": i} for i, row in enumerate(mixed)]
    _, dropped = NearDedupFilter()(tagged)
    root = roots(len(mixed), dropped)
    assert all(root[o] == root[c] for o, c in pairs)
    assert all(root[r] == r for r in root)


def test_edits_and_variants():
    rng = random.Random(0)
    text = " ".join(f"wORD{i}," for i in range(100))
    edited = edit_words(text, 0.1, rng)
    assert edited != text and abs(len(edited.split()) - 100) <= 10
    assert edit_words("", 0.1, rng) == "" and edit_words(text, 0.0, rng) == text
    for variant in ("whitespace", "punctuation", "case"):
        assert surface_variant(text, variant, rng) != text
    row = {"id": 1, "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": [1]}]}
    copy = near_copy(row, 0.05, "case", rng)
    assert copy["messages"][1] == row["messages"][1] and row["messages"][0]["content"] == text
