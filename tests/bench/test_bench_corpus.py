"""The benchmark corpus is deterministic and planted defects are caught; the bench runs end to end."""

from __future__ import annotations

import json
from collections import Counter

from bench import preprocess_filters
from bench.corpus import DEFECT_SHARES, generate_rows
from twinkle_agentic.preprocessor import DeadLoopFilter, HardFilter, RefuseFilter, TokenSoupFilter


def test_generate_rows_is_deterministic_and_mixed():
    rows = generate_rows(400, seed=3)
    assert rows == generate_rows(400, seed=3)
    assert rows != generate_rows(400, seed=4)
    assert len({r["id"] for r in rows}) == 400
    langs = Counter(json.loads(dict(r["user_data"])["lang"]) for r in rows)
    assert set(langs) == {"en", "zh", "ja", "ko"}
    sources = Counter(r["source"] for r in rows)
    assert sources["agent"] > 0 and any(k.startswith("defect/") for k in sources)


def test_planted_defects_are_dropped_by_their_filter():
    rows = generate_rows(3000, seed=5)
    expected = {
        "defect/trivial_single_turn": HardFilter(),
        "defect/shallow_reply": HardFilter(),
        "defect/all_empty_assistant": HardFilter(),
        "defect/no_user": HardFilter(),
        "defect/hesitation": DeadLoopFilter(),
        "defect/repetition": DeadLoopFilter(),
        "defect/refusal": RefuseFilter(),
        "defect/token_soup": TokenSoupFilter(),
    }
    assert set(expected) <= set(DEFECT_SHARES)
    for source, f in expected.items():
        planted = [r for r in rows if r["source"] == source]
        _, dropped = f(planted)
        assert len(dropped) >= 0.8 * len(planted), source
    clean = [r for r in rows if r["source"] in ("chat", "chat/think", "code", "math")]
    for f in (HardFilter(), DeadLoopFilter(), RefuseFilter(), TokenSoupFilter()):
        _, dropped = f(clean)
        assert len(dropped) <= 0.02 * len(clean), f.name


def test_bench_main_appends_one_record(tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    assert preprocess_filters.main(["--rows", "150", "--out", str(out)]) == 0
    record = json.loads(out.read_text().strip())
    assert record["bench"] == "preprocess_filters" and record["params"]["rows"] == 150
    assert record["results"]["pipeline"]["ours_rows_s"] > 0
    assert "DeadLoopFilter" in capsys.readouterr().out
