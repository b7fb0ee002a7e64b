"""PIIPresidioFilter as an actor-pool stage of the preprocess job, on the local Ray cluster.

The job's actors load spaCy, LAC and Presidio themselves (once per actor); their rewrites must equal
the rewrites of a one-process run on the same rows, which is what "deterministic across processes"
means for a user who reruns a job or splits it over a cluster.
"""

from __future__ import annotations

import json

import pytest
import yaml

pytestmark = pytest.mark.integration
pytest.importorskip("presidio_analyzer")

SYSTEM = "You are a helpful support assistant. Answer briefly."


def conversation_rows(records: list[dict]) -> list[dict]:
    """One support conversation per eval text: the text as the user turn, a reply that repeats it."""
    return [
        {
            "id": i,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": r["text"]},
                {"role": "assistant", "content": f"Noted: {r['text']}"},
            ],
        }
        for i, r in enumerate(records)
    ]


def originals(records: list[dict]) -> set[str]:
    """Labelled values long enough to be unambiguous as substrings of a whole output line."""
    return {
        r["text"][s["start"] : s["end"]] for r in records for s in r["spans"] if s["end"] - s["start"] >= 6
    }


def test_pii_runs_as_an_actor_pool_stage_and_matches_one_process(ray_local, eval_records, tmp_path, capsys):
    from twinkle_agentic.jobs.preprocess import main
    from twinkle_agentic.jobs.preprocess.config import build_parser, resolve_config
    from twinkle_agentic.jobs.preprocess.job import plan

    from twinkle_agentic.preprocessor import run_pipeline

    chosen = [r for r in eval_records if r["part"] == "faker" and r["spans"]][::8]
    assert {r["lang"] for r in chosen} == {"en", "zh"} and len(chosen) >= 24
    rows = conversation_rows(chosen)
    source = tmp_path / "pii_rows.jsonl"
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        yaml.safe_dump({"steps": [{"PIIPresidioFilter": {"languages": ["en", "zh"]}, "actors": 1}]})
    )
    out = tmp_path / "out"
    argv = ["--config", str(config), "--input", str(source), "--output", str(out), "--no-progress"]
    argv += ["--batch-size", "16"]

    assert main(argv) == 0
    assert f"kept {len(rows):,}, dropped 0" in capsys.readouterr().out

    kept_lines = [line for p in sorted((out / "kept").glob("*.jsonl")) for line in p.read_text().splitlines()]
    assert len(kept_lines) == len(rows)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["rows_read"] == stats["kept"] == len(rows) and stats["dropped"] == 0
    text = "\n".join(kept_lines)
    leaked = sorted(v for v in originals(chosen) if v in text)
    assert not leaked, leaked
    assert "\\u" not in text  # unescaped unicode: the Chinese rewrites stay readable
    assert all(json.loads(line)["messages"][0]["content"] == SYSTEM for line in kept_lines)

    # the same rewrites as one process: Faker is seeded from a salted hash, not from process state
    cfg = resolve_config(build_parser().parse_args(argv))
    _, steps, _, _ = plan(cfg)
    reference = run_pipeline(cfg.inputs, steps)
    by_id = {json.loads(line)["id"]: json.loads(line) for line in kept_lines}
    assert {r["id"]: r for r in reference.kept} == by_id
    rewritten = sum(by_id[r["id"]]["messages"][1]["content"] != r["messages"][1]["content"] for r in rows)
    assert rewritten == len(rows)
