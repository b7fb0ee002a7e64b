"""The parts of ``--resume`` that need no cluster: fingerprints and what changed, which checkpoints count
as committed, what a resume clears, a reused input's frames and statistics, and the refusals (before
any cluster starts)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import fs
from twinkle_agentic.jobs.preprocess import main
from twinkle_agentic.jobs.preprocess.checkpoints import (
    CheckpointDatasource,
    UnitCheckpoints,
    complete_units,
    file_name,
    is_complete,
    line_digest,
    list_units,
    unit_stats,
)
from twinkle_agentic.jobs.preprocess.config import PreprocessConfig, build_parser, resolve_config
from twinkle_agentic.jobs.preprocess.frame import (
    DROPPED,
    KIND,
    LEDGER,
    LIVE,
    ROW,
    STATS,
    FrameBuilder,
    frame_schema,
)
from twinkle_agentic.jobs.preprocess.job import output_entries, plan, prepare_resume, split_at_exchange
from twinkle_agentic.jobs.preprocess.report import RunSummary
from twinkle_agentic.jobs.preprocess.resume import REDONE, changes, fingerprint, kept_after_resume, open_run
from twinkle_agentic.jobs.preprocess.stages import StageError
from twinkle_agentic.jobs.preprocess.steps import ConfigError, Stage

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



def frames(src: int, lines: range, with_key: bool = True) -> pa.Table:
    """A block as the commit stage gets it: rows of input ``src``, each third one dropped by a model
    step, and a statistics record."""
    builder = FrameBuilder(with_key)
    for line in lines:
        if line % 3:
            builder.add(src, line, LIVE, None, None, json.dumps({"id": line}), f"k{line}", 2)
        else:
            builder.add(src, line, DROPPED, "Model", "mentions_sql", json.dumps({"id": line}))
    stats = {"position": 5, "step": "Model", "before": 1, "after": 1, "dropped": 0, "seconds": 0.1, "reasons": {}}
    builder.add_stats([stats])
    return builder.build()


def test_an_input_is_committed_when_its_parts_add_up_to_its_read_record():
    assert line_digest(range(1, 100)) == (line_digest(range(1, 40)) + line_digest(range(40, 100))) % 2**64
    assert line_digest([5, 6]) != line_digest([5, 7]) and line_digest([]) == 0
    read = file_name("read", 99, line_digest(range(1, 100)))
    parts = [file_name("part", 39, line_digest(range(1, 40))), file_name("part", 60, line_digest(range(40, 100)))]
    assert is_complete([read, *parts]) and is_complete([file_name("read", 0, 0)])
    assert not is_complete(parts)  # the read has not finished
    assert not is_complete([read, parts[0]])  # rows still in the stages
    assert not is_complete([read, parts[0], f"{parts[1]}.tmp-a1"])  # a part being written
    assert not is_complete([read, parts[0], file_name("part", 60, line_digest(range(41, 101)))])  # other rows
    assert not is_complete([read, parts[0], parts[1].replace(".arrow", ".json")])  # not a part's name
    assert kept_after_resume("r1", {0, 3}, ["part-r1-read-000000.jsonl", "part-r1-read-000001.jsonl",
                                            "part-r1-000000.jsonl", "part-r2-read-000003.jsonl"]) == [
        "part-r1-read-000000.jsonl"
    ]  # fmt: skip


def test_the_checkpoint_lies_before_the_first_exchange():
    stages = [Stage("map", [0], parse=True), Stage("actor", [1]), Stage("dedup", [2]), Stage("map", [3])]
    assert split_at_exchange(stages) == (stages[:2], stages[2:])
    assert split_at_exchange([stages[0], Stage("near", [1]), stages[2]]) == ([stages[0]], [Stage("near", [1]), stages[2]])
    assert split_at_exchange(stages[:2]) == (stages[:2], [])


def test_reused_input_statistics_follow_from_its_drops():
    steps = [(-1, "read"), (0, "HardFilter"), (1, "Model")]
    drops = Counter({("read", "malformed_json"): 2, ("HardFilter", "too_short"): 3, ("Model", "mentions_sql"): 4})
    records = unit_stats(drops, 11, steps)
    assert [(r["step"], r["before"], r["after"], r["dropped"], r["reasons"]) for r in records] == [
        ("read", 20, 18, 2, {"malformed_json": 2}),
        ("HardFilter", 18, 15, 3, {"too_short": 3}),
        ("Model", 15, 11, 4, {"mentions_sql": 4}),
    ]
    assert all(r["seconds"] == 0 for r in records) and [r["position"] for r in records] == [-1, 0, 1]
    with pytest.raises(StageError, match="DedupFilter"):
        unit_stats(Counter({("DedupFilter", "duplicate"): 1}), 3, steps)


def test_commit_stage_parts_and_read_records_come_back_as_frames_and_counts(tmp_path):
    out = str(tmp_path / "out")
    writer = UnitCheckpoints(out)
    mixed = pa.concat_tables([frames(0, range(1, 7)), frames(1, range(1, 4))])
    assert writer.commit(mixed) is mixed  # one part per input in the block; the block passes on
    assert writer.commit(frames(0, range(7, 10))).num_rows == 4
    assert writer.commit(frames(0, range(7, 10))).num_rows == 4  # a retried task writes the same part
    wire = {"kept": 0, "dropped": 5, "drops": [["read", "malformed_json", 2], ["HardFilter", "too_short", 3]],
            "stats": {}, "files": ["dropped/part-r1-read-000000.jsonl"]}  # fmt: skip
    writer.read_done(0, 9, line_digest(range(1, 10)), wire)
    writer.read_done(1, 4, line_digest(range(1, 5)), None)  # line 4 has not passed the stages yet
    listing = list_units(fs.LocalFileSystem(), f"{out}/_resume/units")
    assert sorted(listing) == ["000000", "000001"] and len(listing["000000"]) == 3
    committed = complete_units(listing)
    assert list(committed) == [0]
    assert committed[0] == sum(size for name, size in listing["000000"] if name.startswith("part-"))

    schema = frame_schema(True)
    steps = [(-1, "read"), (0, "HardFilter"), (5, "Model")]
    (task,) = CheckpointDatasource(UnitCheckpoints(out, committed), schema, steps).get_read_tasks(4)
    tables = list(task())
    back = pa.concat_tables(tables[:-1])
    written = pa.concat_tables([frames(0, range(1, 7)), frames(0, range(7, 10))]).to_pylist()
    assert sorted(back.to_pylist(), key=lambda r: r["_line"]) == [r for r in written if r[KIND] != STATS]
    assert back.schema == schema
    tail = tables[-1].to_pylist()
    assert [r[KIND] for r in tail] == [LEDGER, STATS] and json.loads(tail[0][ROW]) == wire
    stats = {r["step"]: (r["before"], r["after"], r["dropped"]) for r in json.loads(tail[1][ROW])}
    assert stats == {"read": (14, 12, 2), "HardFilter": (12, 9, 3), "Model": (9, 6, 3)}


def test_open_run_starts_fresh_then_clears_all_but_committed_work(tmp_path, caplog):
    local = fs.LocalFileSystem()
    root = str(tmp_path / "out")
    local.create_dir(root)
    now = {"inputs": [{"uri": "a", "size_bytes": 1, "mtime_ns": 2}], "steps": ["HardFilter"], "settings": {}}
    state = open_run(local, root, root, now, output_entries(root))
    assert not state.resumed and not state.committed and not state.complete
    assert json.loads((tmp_path / "out/_resume/run.json").read_text()) == {"run_id": state.run_id, "fingerprint": now}

    out = tmp_path / "out"
    units = out / "_resume" / "units"
    writer = UnitCheckpoints(root)
    writer.commit(frames(0, range(1, 4)))
    writer.read_done(0, 3, line_digest(range(1, 4)), None)  # committed
    committed_files = sorted(p.name for p in (units / "000000").iterdir())
    (units / "000000" / f"{file_name('part', 1, 9)}.tmp-x").write_bytes(b"half")  # a stopped retry
    writer.read_done(1, 3, line_digest(range(1, 4)), None)  # read; its rows still in a model stage
    writer.commit(frames(2, range(1, 4)))  # not read to its end
    (units / "notes.txt").write_text("stray")
    (out / "_resume" / "inputs").mkdir()  # the earlier layout's checkpoints
    (out / "_resume" / "inputs" / "000001.arrow").write_bytes(b"frames")
    (out / "kept").mkdir()
    (out / "kept" / f"part-{state.run_id}-000000.jsonl").write_text("{}\n")
    (out / "dropped").mkdir()
    for name in ("read-000000", "read-000001", "000000"):
        (out / "dropped" / f"part-{state.run_id}-{name}.jsonl").write_text("{}\n")
    (out / "report.md").write_text("partial")
    (out / f".twinkle-run-{state.run_id}").write_text("marker")

    again = open_run(local, root, root, now, output_entries(root))
    assert again.resumed and again.run_id == state.run_id and list(again.committed) == [0]
    assert sorted(p.name for p in out.iterdir()) == ["_resume", "dropped"]
    assert sorted(p.name for p in (out / "_resume").iterdir()) == ["run.json", "units"]
    assert "earlier layout" in caplog.text
    assert [p.name for p in (out / "dropped").iterdir()] == [f"part-{state.run_id}-read-000000.jsonl"]
    assert [p.name for p in units.iterdir()] == ["000000"]
    assert sorted(p.name for p in (units / "000000").iterdir()) == committed_files
    assert again.summary(3) == {
        "run_id": state.run_id,
        "resumed": True,
        "inputs_reused": 1,
        "inputs_processed": 2,
        "redone": REDONE,
    }

    (out / "stats.json").write_text("{}")
    assert open_run(local, root, root, now, output_entries(root)).complete
    assert not units.exists() and (out / "_resume" / "run.json").exists()


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
    modification time, checkpoint parts committed by a move, a resume clearing what was not committed."""
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

        prepare_resume(cfg, sources)
        writer = UnitCheckpoints(cfg.output)
        writer.commit(frames(0, range(1, 4)))
        writer.read_done(0, 3, line_digest(range(1, 4)), None)
        writer.commit(frames(1, range(1, 4)))  # input 1's read task stops before its read record
        filesystem, root = output_filesystem(cfg.output)
        with filesystem.open_output_stream(f"{root}/_resume/units/000001/{file_name('part', 2, 7)}.tmp-a1") as s:
            s.write(b"half")  # and a task writing a part is stopped
        again = prepare_resume(cfg, sources)[2]
        assert again.resumed and list(again.committed) == [0]
        listed = filesystem.get_file_info(fs.FileSelector(f"{root}/_resume", recursive=True))
        left = sorted(i.path.removeprefix(f"{root}/_resume/") for i in listed if i.type == fs.FileType.File)
        assert left == [
            "run.json",
            f"units/000000/{file_name('part', 3, line_digest(range(1, 4)))}",
            f"units/000000/{file_name('read', 3, line_digest(range(1, 4)))}",
        ]
        (task,) = CheckpointDatasource(UnitCheckpoints(cfg.output, again.committed), frame_schema(True), [
            (-1, "read"), (5, "Model")]).get_read_tasks(2)  # fmt: skip
        assert [r["_line"] for r in pa.concat_tables(list(task())[:-1]).to_pylist()] == [1, 2, 3]
