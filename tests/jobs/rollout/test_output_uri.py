"""The rollout job's output named by URI, no cluster: a ``file://`` output is the folder it names
(not a folder called ``file:`` under the working directory), and the segmented journal that object
stores get, exercised on the local file system: groups buffered into whole segments, a crash losing
only the unwritten buffer, resume across segments, Parquet over all of them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import twinkle_agentic.jobs.rollout.journal as journal_module
from twinkle_agentic.jobs.rollout.config import build_parser, resolve_config
from twinkle_agentic.jobs.rollout.journal import Journal

from tests.support.paths import REPO_ROOT

DEMO_CONFIG = REPO_ROOT / "jobs" / "configs" / "demo_rollout.yaml"
FINGERPRINT = {"model": "m"}


def group(gid: str, size: int = 2) -> list[dict]:
    return [
        {"trajectory_id": f"{gid}/s{k}", "prompt_id": gid, "group_id": gid, "group_size": size, "sample_index": k,
         "stop_reason": "stop", "input_ids": [1, 2], "labels": [-100, 2], "reward": float(k)}
        for k in range(size)
    ]  # fmt: skip


def segment_names(out: Path) -> list[str]:
    folder = out / "trajectories"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_file_uri_output_is_the_folder_it_names(tmp_path, monkeypatch, capsys):
    """A finished run resumed through the command with ``--output file://...``: the journal, run.json
    and summary.json are read and written in that folder, nothing under the working directory."""
    from twinkle_agentic.jobs.rollout import main

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "runs" / "out"
    argv = ["--config", str(DEMO_CONFIG), "--output", f"file://{out}", "--limit", "2", "--no-progress",
            "--output-format", "parquet"]  # fmt: skip
    cfg = resolve_config(build_parser().parse_args(argv))
    journal, _ = Journal.open(cfg.output, cfg.fingerprint(), overwrite=False)
    assert journal.path == str(out / "trajectories.jsonl") and not journal.segmented
    journal.append([{"trajectory_id": tid, "stop_reason": "stop"} for tid in ("weather-001", "weather-002")])
    journal.close()
    assert main(argv) == 0
    assert "2 resumed from an earlier run" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [
        "run.json",
        "summary.json",
        "trajectories.jsonl",
        "trajectories.parquet",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trajectories_in_output"] == 2 and summary["files"]["parquet"] == str(
        out / "trajectories.parquet"
    )
    assert pq.read_table(out / "trajectories.parquet").column("trajectory_id").to_pylist() == [
        "weather-001",
        "weather-002",
    ]
    assert list(cwd.iterdir()) == []  # no folder named 'file:'


def test_segments_hold_whole_buffered_groups_and_a_crash_loses_only_the_buffer(tmp_path):
    out = tmp_path / "out"
    journal, state = Journal.open(str(out), FINGERPRINT, overwrite=False, segmented=True, flush_s=3600)
    assert not state.ids and journal.path == str(out / "trajectories")
    journal.append(group("a"))
    journal.append(group("b"))
    assert segment_names(out) == []  # buffered: the flush interval has not passed
    del journal  # the process dies: the buffer was never written

    journal, state = Journal.open(str(out), FINGERPRINT, overwrite=False, segmented=True, flush_s=3600)
    assert not state.ids  # lost groups are run again; nothing half-written remains
    journal.append(group("a"))
    journal.append(group("b"))
    journal.close()
    assert segment_names(out) == ["part-00000000.jsonl"]
    lines = (out / "trajectories" / "part-00000000.jsonl").read_text().splitlines()
    assert [json.loads(line)["trajectory_id"] for line in lines] == ["a/s0", "a/s1", "b/s0", "b/s1"]

    stale = out / "trajectories" / "part-00000001.jsonl.tmp"  # a write that died before its rename
    stale.write_text('{"trajectory_id": "torn')
    journal, state = Journal.open(str(out), FINGERPRINT, overwrite=False, segmented=True, flush_s=0)
    assert state.ids == {"a/s0", "a/s1", "b/s0", "b/s1"} and state.groups == {"a", "b"}
    assert (state.rewards.count, state.rewards.mean, state.rewards.std) == (4, 0.5, 0.5)
    journal.append(group("c"))  # flush_s=0: a segment per append
    journal.append(group("d"))
    journal.close()
    assert segment_names(out) == ["part-00000000.jsonl", "part-00000001.jsonl", "part-00000002.jsonl"]
    lines = (out / "trajectories" / "part-00000001.jsonl").read_text().splitlines()
    assert [json.loads(line)["trajectory_id"] for line in lines] == [
        "c/s0",
        "c/s1",
    ]  # the stale .tmp replaced
    _, state = Journal.open(str(out), FINGERPRINT, overwrite=False, segmented=True)
    assert len(state.ids) == 8 and state.groups == {"a", "b", "c", "d"}
    table = pq.read_table(Journal(journal.output, segmented=True).write_parquet())
    assert table.column("trajectory_id").to_pylist() == [f"{g}/s{k}" for g in "abcd" for k in range(2)]


def test_a_full_buffer_is_written_before_the_interval(tmp_path, monkeypatch):
    monkeypatch.setattr(journal_module, "SEGMENT_MAX_BYTES", 1)
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False, segmented=True, flush_s=3600)
    journal.append(group("a"))
    journal.append(group("b"))
    assert segment_names(tmp_path) == ["part-00000000.jsonl", "part-00000001.jsonl"]


def test_segmented_output_refuses_other_settings_and_overwrite_clears_the_segments(tmp_path):
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False, segmented=True, flush_s=0)
    journal.append(group("a"))
    with pytest.raises(journal_module.ConfigError, match="other settings"):
        Journal.open(str(tmp_path), {"model": "other"}, overwrite=False, segmented=True)
    _, state = Journal.open(str(tmp_path), {"model": "other"}, overwrite=True, segmented=True)
    assert not state.ids and segment_names(tmp_path) == []
    assert json.loads((tmp_path / "run.json").read_text())["fingerprint"] == {"model": "other"}


def test_a_bad_line_in_a_segment_names_the_segment(tmp_path):
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False, segmented=True, flush_s=0)
    journal.append(group("a"))
    segment = tmp_path / "trajectories" / "part-00000000.jsonl"
    segment.write_text(segment.read_text() + "not json\n")
    with pytest.raises(journal_module.ConfigError, match=r"part-00000000\.jsonl line 3 is not JSON"):
        Journal.open(str(tmp_path), FINGERPRINT, overwrite=False, segmented=True)


def test_a_journal_resumes_in_the_form_it_has(tmp_path):
    """Segments copied to a local disk stay segments; a local run's trajectories.jsonl where files
    cannot be appended to is refused, naming the fix."""
    journal, _ = Journal.open(str(tmp_path / "seg"), FINGERPRINT, overwrite=False, segmented=True, flush_s=0)
    journal.append(group("a"))
    journal, state = Journal.open(str(tmp_path / "seg"), FINGERPRINT, overwrite=False)
    assert journal.segmented and state.ids == {"a/s0", "a/s1"}
    journal, _ = Journal.open(str(tmp_path / "appended"), FINGERPRINT, overwrite=False)
    journal.append(group("a"))
    journal.close()
    with pytest.raises(
        journal_module.ConfigError, match=r"move the file to trajectories/part-00000000\.jsonl"
    ):
        Journal.open(str(tmp_path / "appended"), FINGERPRINT, overwrite=False, segmented=True)
