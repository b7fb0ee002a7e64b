"""The parts of ``--resume`` that need no cluster: fingerprints and what changed, which checkpoints count
as committed, what a resume clears, and the refusals (before any cluster starts)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import fs
from twinkle_agentic.jobs.preprocess import main
from twinkle_agentic.jobs.preprocess.config import PreprocessConfig, build_parser, resolve_config
from twinkle_agentic.jobs.preprocess.frame import DROPPED, LIVE, FrameBuilder, frame_schema
from twinkle_agentic.jobs.preprocess.job import output_entries, plan, prepare_resume
from twinkle_agentic.jobs.preprocess.report import RunSummary
from twinkle_agentic.jobs.preprocess.resume import (
    Checkpoints,
    changes,
    committed_indexes,
    fingerprint,
    kept_after_resume,
    open_run,
)
from twinkle_agentic.jobs.preprocess.steps import ConfigError

from tests.support.job_data import chat_rows, write_jsonl_files


@pytest.fixture
def inputs(tmp_path) -> Path:
    folder = tmp_path / "in"
    write_jsonl_files(folder, chat_rows(30, seed=3), n_files=2)
    return folder


def config(inputs: Path, out: Path, *flags: str) -> PreprocessConfig:
    return resolve_config(build_parser().parse_args(["--input", str(inputs), "--output", str(out), *flags]))


def started(cfg: PreprocessConfig) -> str:
    """A resumable run in ``cfg.output`` as a killed one leaves it (run.json only); its id."""
    sources = plan(cfg)[0]
    return prepare_resume(cfg, sources)[2].run_id


def test_changes_name_each_input_step_and_setting_that_differs(inputs, tmp_path):
    cfg = config(inputs, tmp_path / "out")
    sources = plan(cfg)[0]
    before = fingerprint(cfg, sources)
    assert [i["uri"] for i in before["inputs"]] == [s.uri for s in sources]
    assert all(i["size_bytes"] == os.path.getsize(i["uri"]) and i["mtime_ns"] for i in before["inputs"])
    assert changes(before, json.loads(json.dumps(before))) == []

    after = json.loads(json.dumps(before))
    after["inputs"][0]["size_bytes"] += 1
    after["inputs"][1]["mtime_ns"] += 5
    after["settings"]["batch_size"] = 7
    after["steps"] = after["steps"][:-1]
    found = changes(before, after)
    assert len(found) == 4
    assert f"input {sources[0].uri} changed (size_bytes" in found[1]
    assert f"input {sources[1].uri} changed (mtime_ns" in found[2]
    assert found[0] == "batch_size 1024 -> 7" and found[3].startswith("steps ")

    moved = json.loads(json.dumps(before))
    moved["inputs"] = moved["inputs"][::-1]
    assert changes(before, moved) == ["the inputs are listed in another order"]
    fewer = json.loads(json.dumps(before))
    gone = fewer["inputs"].pop()
    assert changes(before, fewer) == [f"input {gone['uri']} is gone"]
    assert changes(fewer, before) == [f"input {gone['uri']} is new"]
    # settings that only spread the work differently are not part of it
    assert fingerprint(config(inputs, tmp_path / "out", "--dedup-partitions", "5", "--actors", "3"), sources) == before


def test_committed_checkpoints_are_whole_names_only():
    names = ["000000.arrow", "000003.arrow", "000001.arrow.tmp-abc", "notes.txt", "x.arrow", "000002.arrow.tmp-"]
    assert committed_indexes(names) == {0, 3}
    dropped = ["part-r1-read-000000.jsonl", "part-r1-read-000001.jsonl", "part-r1-000000.jsonl", "part-r2-read-000003.jsonl"]
    assert kept_after_resume("r1", {0, 3}, dropped) == ["part-r1-read-000000.jsonl"]


def test_open_run_starts_fresh_then_clears_all_but_committed_work(tmp_path):
    local = fs.LocalFileSystem()
    root = str(tmp_path / "out")
    local.create_dir(root)
    now = {"inputs": [{"uri": "a", "size_bytes": 1, "mtime_ns": 2}], "steps": ["HardFilter"], "settings": {}}
    state = open_run(local, root, root, now, output_entries(root))
    assert not state.resumed and not state.committed and not state.complete
    assert json.loads((tmp_path / "out/_resume/run.json").read_text()) == {"run_id": state.run_id, "fingerprint": now}

    out = tmp_path / "out"
    inputs = out / "_resume" / "inputs"
    inputs.mkdir()
    for name in ("000000.arrow", "000001.arrow.tmp-x"):
        (inputs / name).write_bytes(b"frames")
    (out / "kept").mkdir()
    (out / "kept" / f"part-{state.run_id}-000000.jsonl").write_text("{}\n")
    (out / "dropped").mkdir()
    for name in ("read-000000", "read-000001", "000000"):
        (out / "dropped" / f"part-{state.run_id}-{name}.jsonl").write_text("{}\n")
    (out / "report.md").write_text("partial")
    (out / f".twinkle-run-{state.run_id}").write_text("marker")

    again = open_run(local, root, root, now, output_entries(root))
    assert again.resumed and again.run_id == state.run_id and again.committed == {0}
    assert sorted(p.name for p in out.iterdir()) == ["_resume", "dropped"]
    assert [p.name for p in (out / "dropped").iterdir()] == [f"part-{state.run_id}-read-000000.jsonl"]
    assert [p.name for p in inputs.iterdir()] == ["000000.arrow"]
    assert again.summary(3) == {
        "run_id": state.run_id,
        "resumed": True,
        "inputs_reused": 1,
        "inputs_processed": 2,
        "redone": "later stages, the dedup exchange and the writes, on every row",
    }

    (out / "stats.json").write_text("{}")
    assert open_run(local, root, root, now, output_entries(root)).complete
    assert not inputs.exists() and (out / "_resume" / "run.json").exists()


def frames(n: int) -> list[pa.Table]:
    tables = []
    for i in range(n):
        builder = FrameBuilder()
        builder.add(0, 2 * i + 1, LIVE, None, None, json.dumps({"id": i}))
        builder.add(0, 2 * i + 2, DROPPED, "HardFilter", "too_short", json.dumps({"id": -i}))
        tables.append(builder.build())
    return tables


def test_checkpoint_is_committed_only_once_all_frames_are_written(tmp_path):
    checkpoints = Checkpoints(str(tmp_path), "run1", "attempt1")
    folder = tmp_path / "_resume" / "inputs"
    written = checkpoints.write(4, iter(frames(3)), frame_schema())
    assert next(written).num_rows == 2  # a task that dies here leaves only its temporary file
    assert [p.name for p in folder.iterdir()] == ["000004.arrow.tmp-attempt1"]
    rest = list(written)
    assert len(rest) == 2 and [p.name for p in folder.iterdir()] == ["000004.arrow"]
    back = list(Checkpoints(str(tmp_path), "run1", "attempt2", frozenset({4})).read(4))
    assert [t.to_pylist() for t in back] == [t.to_pylist() for t in frames(3)]
    empty = list(checkpoints.write(5, iter([]), frame_schema(True)))
    assert empty == [] and list(checkpoints.read(5)) == []


def test_resume_refusals_name_the_problem_and_the_fix(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    base = ["--input", str(inputs), "--output", str(out)]
    assert main([*base, "--resume", "--overwrite"]) == 2
    assert "resume and overwrite exclude each other" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="exclude each other"):
        PreprocessConfig(inputs=[str(inputs)], output=str(out), resume=True, overwrite=True).validate()

    (out / "kept").mkdir(parents=True)  # a plain run's output: nothing to reuse
    assert main([*base, "--resume"]) == 2
    assert "was not started with --resume" in capsys.readouterr().err
    (out / "kept").rmdir()

    started(config(inputs, out, "--resume"))
    assert main([*base, "--resume", "--batch-size", "64", "--lineage"]) == 2
    err = capsys.readouterr().err
    assert "batch_size 1024 -> 64; lineage False -> True" in err and "pass --overwrite to start over" in err

    first = sorted(inputs.iterdir())[0]
    with open(first, "ab") as handle:
        handle.write(b'{"id": 123456, "messages": []}\n')
    assert main([*base, "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"input {first} changed (size_bytes" in err and "--overwrite" in err


def test_summary_lines_of_resumed_and_complete_runs():
    summary = RunSummary("out", 10, 6, 4, 2.0, [], resume={"resumed": True, "inputs_reused": 2, "inputs_processed": 1})
    assert "; resumed: 2 input(s) from checkpoints, 1 read; output: out" in summary.line()
    stats = {**summary.to_dict(), "steps": []}
    back = RunSummary.from_stats("out", stats)
    back.already_complete = True
    assert back.line() == (
        "preprocess: the run in the output is already complete (read 10 rows -> kept 6, dropped 4); "
        "nothing to resume; output: out"
    )


def test_checkpoints_and_resume_state_on_object_storage(tmp_path, monkeypatch, inputs):
    """The same on ``s3://`` (a local S3-compatible server): inputs fingerprinted by size and
    modification time, checkpoints committed by a move, a resume clearing what was not committed."""
    from twinkle_agentic.jobs.preprocess.sink import output_filesystem

    from tests.support.s3_server import s3_server

    (tmp_path / "moto").mkdir()
    with s3_server(tmp_path / "moto") as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        server.bucket("data")
        server.upload(inputs, "s3://data/in")
        cfg = config(Path("s3://data/in/"), Path("unused"), "--resume")
        cfg.inputs, cfg.output = ["s3://data/in/"], "s3://data/out"
        sources = plan(cfg)[0]
        prints = fingerprint(cfg, sources)["inputs"]
        assert [p["uri"] for p in prints] == ["s3://data/in/part-00.jsonl", "s3://data/in/part-01.jsonl.gz"]
        assert all(p["size_bytes"] > 0 and p["mtime_ns"] for p in prints)

        state = prepare_resume(cfg, sources)[2]
        checkpoints = Checkpoints(cfg.output, state.run_id, "a1")
        assert len(list(checkpoints.write(0, iter(frames(2)), frame_schema()))) == 2
        half = checkpoints.write(1, iter(frames(2)), frame_schema())
        next(half)
        half.close()  # input 1's task stops here: its temporary object is left, never committed
        filesystem, root = output_filesystem(cfg.output)
        listed = sorted(i.path for i in filesystem.get_file_info(fs.FileSelector(root, recursive=True)))
        assert f"{root}/_resume/inputs/000001.arrow.tmp-a1" in listed

        again = prepare_resume(cfg, sources)[2]
        assert again.resumed and again.committed == {0}
        left = sorted(i.path for i in filesystem.get_file_info(fs.FileSelector(f"{root}/_resume", recursive=True)))
        assert left == [f"{root}/_resume/inputs", f"{root}/_resume/inputs/000000.arrow", f"{root}/_resume/run.json"]
        assert [t.to_pylist() for t in checkpoints.read(0)] == [t.to_pylist() for t in frames(2)]
