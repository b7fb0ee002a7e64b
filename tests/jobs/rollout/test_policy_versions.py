"""Policy versions in the rollout job's outputs: the JSONL journal, the typed Parquet columns, and the
summary's counts per version (this run and the whole output). No cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twinkle_agentic.actors.activity import Activity
from twinkle_agentic.jobs.rollout.config import build_parser, resolve_config
from twinkle_agentic.jobs.rollout.journal import Journal
from twinkle_agentic.jobs.rollout.summary import RolloutSummary, RolloutTally, policy_version_key

from tests.support.paths import REPO_ROOT
from twinkle_agentic.rollout.bookkeeping import check_aligned

FINGERPRINT = {"model": "m", "sampling": {"temperature": 0}}
DEMO_CONFIG = REPO_ROOT / "jobs" / "configs" / "demo_rollout.yaml"


def record(tid: str, version: int | None, spans: list[tuple[int, int, int]] | None) -> dict:
    """A finished trajectory: prompt 1, 2, then generated tokens at the spans' positions."""
    length = max((end for _, _, end in spans or []), default=2)
    labels = [-100] * length
    for _, start, end in spans or []:
        labels[start:end] = list(range(start, end))
    return {
        "trajectory_id": tid,
        "prompt_id": tid,
        "stop_reason": "stop",
        "input_ids": list(range(length)),
        "labels": labels,
        "messages": [{"role": "user", "content": tid}],
        "policy_version": version,
        "policy_versions": None if spans is None else [{"version": v, "start": s, "end": e} for v, s, e in spans],
    }


RECORDS = [
    record("a", 1, [(0, 2, 4), (1, 4, 6), (1, 7, 9)]),  # an update landed inside the first turn
    record("b", 1, [(1, 2, 3)]),
    record("c", None, None),  # versions unknown
    record("d", None, []),  # ended before generating
    record("e", 12, [(12, 2, 5)]),
]


def test_the_journal_and_the_parquet_file_carry_both_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    for trajectory in RECORDS:
        check_aligned(trajectory)  # the samples are what a rollout writes
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    journal.append(RECORDS)
    journal.close()
    lines = [json.loads(line) for line in Path(journal.path).read_text().splitlines()]
    for key in ("policy_version", "policy_versions"):
        assert [line[key] for line in lines] == [r[key] for r in RECORDS]
    table = pq.read_table(journal.write_parquet())
    assert table.schema.field("policy_version").type == pa.int64()
    span = pa.struct([pa.field("version", pa.int64()), pa.field("start", pa.int32()), pa.field("end", pa.int32())])
    assert table.schema.field("policy_versions").type == pa.list_(span)
    rows = table.to_pylist()
    for key in ("policy_version", "policy_versions"):
        assert [row[key] for row in rows] == [r[key] for r in RECORDS]
    assert all(row["extra"] is None for row in rows)  # typed columns, not left over as JSON


def test_the_summary_counts_trajectories_per_version(tmp_path):
    assert [policy_version_key(r) for r in RECORDS] == ["1", "1", "none", "none", "12"]
    tally = RolloutTally()
    tally.add(RECORDS[:3], Activity(), 0)
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    journal.append(RECORDS)
    journal.close()
    final = journal.recover()
    assert final.policy_versions == {"1": 2, "none": 2, "12": 1}
    summary = RolloutSummary(
        output=str(tmp_path), files={}, tally=tally, resumed=2, total_in_output=len(final.ids),
        stop_reasons_in_output=final.stop_reasons, policy_versions_in_output=final.policy_versions,
        wall_s=1.0, rollout_s=1.0, startup_s=0.0, engines=1, restarts=0, given_up=0,
    )  # fmt: skip
    data = summary.to_dict()
    assert data["this_run"]["policy_versions"] == {"1": 2, "none": 1}
    assert data["policy_versions_in_output"] == {"1": 2, "none": 2, "12": 1}
    assert "trajectories per version: v1 2, v12 1, none 2 in the output, v1 2, none 1 in this run" in summary.render()


def test_a_resumed_run_reports_the_versions_in_its_output(tmp_path, capsys):
    """The job wires the journal's counts into summary.json and the printed summary (no cluster: all done)."""
    from twinkle_agentic.jobs.rollout import main

    output = tmp_path / "out"
    argv = ["--config", str(DEMO_CONFIG), "--output", str(output), "--limit", "3", "--no-progress"]
    cfg = resolve_config(build_parser().parse_args(argv))
    journal, _ = Journal.open(str(output), cfg.fingerprint(), overwrite=False)
    journal.append([{**r, "trajectory_id": tid} for r, tid in zip(RECORDS, ("weather-001", "weather-002", "weather-003"), strict=False)])
    journal.close()
    assert main(argv) == 0
    assert "trajectories per version: v1 2, none 1 in the output, n/a in this run" in capsys.readouterr().out
    assert json.loads((output / "summary.json").read_text())["policy_versions_in_output"] == {"1": 2, "none": 1}
