"""NearDedupFilter in the preprocess job on a real local Ray cluster: the same kept rows and drop
ledger (near_duplicate_of included) as run_pipeline, wherever the step stands in the pipeline."""

from __future__ import annotations

import json

import pytest
import yaml
from twinkle_agentic.jobs.preprocess import main
from twinkle_agentic.jobs.preprocess.config import build_parser, resolve_config

from tests.jobs.preprocess.test_job import check_run_against_reference, input_ids
from tests.jobs.preprocess.test_near_dedup_exchange import chain, rows_with_near_copies
from tests.support.job_data import write_jsonl_files

pytestmark = pytest.mark.integration

PIPELINES = {
    "near-first": [{"NearDedupFilter": {"turns": "user", "threshold": 0.6}}, "HardFilter"],
    "between-filters-and-dedup": ["HardFilter", "NearDedupFilter", "DedupFilter"],
    "after-dedup": ["DedupFilter", {"NearDedupFilter": {"shingle_words": 2, "max_turns": 3}}],
}


@pytest.mark.parametrize(
    "pipeline, partitions", [("near-first", 1), ("between-filters-and-dedup", 3), ("after-dedup", 5)]
)
def test_job_near_dedup_equals_one_process(ray_local, tmp_path, capsys, pipeline, partitions):
    inputs = tmp_path / "in"
    write_jsonl_files(inputs, rows_with_near_copies(450, seed=partitions), n_files=3)
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"steps": PIPELINES[pipeline]}))
    argv = ["--input", str(inputs), "--output", str(tmp_path / "out"), "--config", str(config)]
    argv += ["--batch-size", "100", "--dedup-partitions", str(partitions), "--no-progress"]
    assert main(argv) == 0
    summary_line = capsys.readouterr().out.strip().splitlines()[-1]
    cfg = resolve_config(build_parser().parse_args(argv))
    out = check_run_against_reference(cfg, summary_line)  # kept rows and ledger (rows included) equal

    near = [e for e in out["ledger"] if e["reason"] == "near_duplicate"]
    assert len(near) > 20
    ids = input_ids(cfg.inputs)
    kept_ids = {json.loads(line)["id"] for line in out["kept_lines"]}
    by_id = {e["row"]["id"]: e for e in near}
    later = {
        e["row"]["id"] for e in out["ledger"] if e["step"] != "NearDedupFilter" and isinstance(e["row"], dict)
    }

    def named(entry: dict) -> int:
        parent = entry["row"]["near_duplicate_of"]
        return ids[(parent["source"], parent["line"])]

    for entry in near:
        assert entry["step"] == "NearDedupFilter"
        # the named row is one the step kept (a later step may still drop it), never one it dropped
        assert named(entry) not in by_id
        assert named(entry) in kept_ids or named(entry) in later
    step = next(s for s in out["stats"]["steps"] if s["step"] == "NearDedupFilter")
    assert step["reasons"] == {"near_duplicate": len(near)}


def test_job_decides_a_chain_against_kept_rows(ray_local, tmp_path, capsys):
    # A ~ B ~ C ~ D, each apart from the one after next: A and C kept, B dropped for A, D for C,
    # as in one process (the exchange needs three rounds)
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "chain.jsonl").write_text("".join(json.dumps(row) + "\n" for row in chain(3)))
    argv = [
        "--input",
        str(inputs),
        "--output",
        str(tmp_path / "out"),
        "--dedup-partitions",
        "3",
        "--no-progress",
    ]
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"steps": ["NearDedupFilter"]}))
    assert main([*argv, "--config", str(config)]) == 0
    summary_line = capsys.readouterr().out.strip().splitlines()[-1]
    out = check_run_against_reference(
        resolve_config(build_parser().parse_args([*argv, "--config", str(config)])), summary_line
    )
    assert sorted(json.loads(line)["id"] for line in out["kept_lines"]) == [0, 2]
    names = {e["row"]["id"]: e["row"]["near_duplicate_of"]["line"] for e in out["ledger"]}
    assert names == {1: 1, 3: 3}  # lines of A and C
