"""The preprocess job on a real local Ray cluster: same result as one process, for any blocking."""

from __future__ import annotations

import json
import logging
import os
import re
from importlib import resources
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import twinkle_agentic.jobs.preprocess.job as job_module
import yaml
from twinkle_agentic.jobs.preprocess import main
from twinkle_agentic.jobs.preprocess.config import PreprocessConfig, build_parser, resolve_config
from twinkle_agentic.jobs.preprocess.job import default_partitions, plan, prepare_output
from twinkle_agentic.jobs.preprocess.steps import ConfigError, StepSpec, parse_steps

from tests.support.job_data import read_outputs, reference_outputs
from tests.support.paths import REPO_ROOT
from twinkle_agentic.io import UNREADABLE_DROP, expand_inputs, parse_read, read_source
from twinkle_agentic.preprocessor import run_pipeline

pytestmark = pytest.mark.integration


def input_records(inputs: list[str]) -> dict[tuple[str, int], tuple[dict | None, str | None, object]]:
    """(source, line) -> what the record there parses to, straight from the input files (the
    unreadable rest of a broken file included, as one record)."""
    return {
        (source.uri, line): parse_read(raw, error)
        for source in expand_inputs(inputs)
        for line, raw, error in read_source(source, UNREADABLE_DROP)
    }


def input_ids(inputs: list[str]) -> dict[tuple[str, int], int]:
    """(source, line) -> row id of every record that is a row."""
    return {key: row["id"] for key, (row, _, _) in input_records(inputs).items() if row is not None}


def local_path(uri: str) -> Path:
    return Path(uri.removeprefix("local://"))


def check_run_against_reference(cfg: PreprocessConfig, summary_line: str) -> dict:
    out = read_outputs(local_path(cfg.output))
    _, steps, _, _ = plan(cfg)
    reference = reference_outputs(run_pipeline(cfg.inputs, steps, unreadable=cfg.unreadable_files))
    assert out["kept"] == reference["kept"]
    assert out["dropped"] == reference["dropped"]
    stats = out["stats"]
    assert stats["kept"] + stats["dropped"] == stats["rows_read"]
    assert summary_line.startswith(
        f"preprocess: read {stats['rows_read']:,} rows -> kept {stats['kept']:,}, dropped {stats['dropped']:,} in "
    )
    assert summary_line.endswith(f"rows/s); output: {cfg.output}")
    assert stats["kept"] == len(out["kept_lines"]) and stats["dropped"] == len(out["ledger"])
    for step in stats["steps"]:
        assert step["before"] == step["after"] + step["dropped"]
        assert step["dropped"] == sum(step["reasons"].values())
    # every ledger entry points at the input line the row came from; read drops carry that line's
    # text (not JSON) or value (not an object) and the reason parsing it gives
    records = input_records(cfg.inputs)
    for entry in out["ledger"]:
        row, reason, value = records[(entry["source"], entry["line"])]
        if entry["step"] == "read":
            assert (entry["reason"], entry["row"]) == (reason, value)
        else:
            assert entry["row"]["id"] == row["id"]
    return out


def test_cli_refuses_existing_output_and_reports_config_errors(chat_inputs, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "kept").mkdir(parents=True)
    assert main(["--input", str(chat_inputs), "--output", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err

    config = tmp_path / "pipeline.yaml"
    config.write_text("steps:\n  - NoSuchFilter\n")
    assert main(["--config", str(config), "--input", str(chat_inputs), "--output", str(tmp_path / "o2")]) == 2
    assert "unknown step 'NoSuchFilter'" in capsys.readouterr().err
    assert main(["--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "o3")]) == 2
    assert "does not exist" in capsys.readouterr().err
    # an output that cannot be made, or written into: named, before any cluster starts
    assert main(["--input", str(chat_inputs), "--output", "/proc/twinkle-none/out"]) == 2
    captured = capsys.readouterr()
    assert "cannot use output '/proc/twinkle-none/out': " in captured.err
    assert captured.out.strip().splitlines()[-1].startswith("preprocess: not started (PipelineConfigError)")
    assert main(["--input", str(chat_inputs), "--output", "/proc"]) == 2
    assert "cannot write into the output folder '/proc': " in capsys.readouterr().err


SAMPLE = REPO_ROOT / "data" / "sample" / "chats.jsonl"
PIPELINES = {
    "bundled-default": parse_steps(
        yaml.safe_load(resources.files("twinkle_agentic.jobs.configs").joinpath("default_pipeline.yaml").read_text())["steps"]
    ),
    "dedup-first": [StepSpec("DedupFilter"), StepSpec("HardFilter"), StepSpec("tests.support.job_steps:ShoutMapper")],
    "dedup-last": [StepSpec("HardFilter"), StepSpec("tests.support.job_steps:ShoutMapper"), StepSpec("DedupFilter")],
    "two-dedups-and-actor": [
        StepSpec("DedupFilter", {"prefix_chars": 20, "asst_chars": 20}),
        StepSpec("tests.support.job_steps:ModelStep", {"marker_dir": "MARKERS"}, actors=2),
        StepSpec("DedupFilter"),
        StepSpec("HardFilter", {"min_user_chars": 12}),
    ],
}


@pytest.mark.parametrize(
    "pipeline, batch_size, partitions, output_format, split_records, uris",
    [
        ("bundled-default", 200, None, "jsonl", None, False),  # partitions by the input's size
        ("dedup-first", 64, 1, "jsonl", False, False),
        ("dedup-last", 256, 3, "parquet", True, True),
        ("two-dedups-and-actor", 1000, 7, "jsonl", None, False),
    ],
)
def test_job_equals_one_process_run(
    ray_local,
    chat_inputs,
    parquet_input,
    json_array_input,
    utf16_input,
    tmp_path,
    capsys,
    caplog,
    monkeypatch,
    pipeline,
    batch_size,
    partitions,
    output_format,
    split_records,
    uris,
):
    """Run through the CLI, as users do, and compare with the one-process run of the same config.

    ``split_records`` forces re-blocking the read output on or off (None: the job decides). ``uris``
    names inputs and output as ``local://`` URIs: pyarrow resolves them like any remote file system
    (s3://, gs://, hdfs://), so the URI path of reading, globbing, writing and the ledger's sources
    runs on every worker. ``partitions`` None leaves them to the job, with a partition size target
    small enough that the input's size, not the CPUs, sets their number."""
    if split_records is not None:
        monkeypatch.setattr("twinkle_agentic.jobs.preprocess.job.needs_split", lambda sources, cpus: split_records)
    markers = tmp_path / "markers"
    markers.mkdir()
    scheme = "local://" if uris else ""
    inputs = [
        scheme + str(p) for p in (chat_inputs / "*.jsonl*", parquet_input, json_array_input, utf16_input)
    ] + ([str(SAMPLE)] if pipeline == "bundled-default" else [])
    output = scheme + str(tmp_path / "out")
    argv = ["--input", *inputs, "--output", output, "--batch-size", str(batch_size)]
    argv += ["--output-format", output_format, "--no-progress"]
    if partitions is not None:
        argv += ["--dedup-partitions", str(partitions)]
    else:
        from twinkle_agentic.jobs.preprocess.read import estimated_total

        input_bytes = estimated_total(expand_inputs(inputs))
        monkeypatch.setattr("twinkle_agentic.jobs.preprocess.job.PARTITION_TARGET_BYTES", input_bytes // 13)
    if pipeline == "dedup-first":
        argv += ["--read-concurrency", "1"]  # fewer reads at once than CPUs: same output
    if pipeline != "bundled-default":
        steps = [
            StepSpec(
                s.name, {k: (str(markers) if v == "MARKERS" else v) for k, v in s.kwargs.items()}, s.actors
            )
            for s in PIPELINES[pipeline]
        ]
        config = tmp_path / "pipeline.yaml"
        config.write_text(yaml.safe_dump({"steps": [spec.to_config() for spec in steps]}))
        argv += ["--config", str(config)]
    import ray.data
    from ray.data.context import ShuffleStrategy

    if pipeline == "dedup-last":  # the push-based variant of the exchange, as large inputs use it
        monkeypatch.setattr(
            ray.data.DataContext.get_current(), "shuffle_strategy", ShuffleStrategy.SORT_SHUFFLE_PUSH_BASED
        )
    strategy_before = ray.data.DataContext.get_current().shuffle_strategy
    monkeypatch.setattr(ray.data.DataContext.get_current(), "enable_progress_bars", True)
    built = []
    build = job_module.build
    monkeypatch.setattr(job_module, "build", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    with caplog.at_level(logging.INFO, logger="twinkle_agentic.jobs.preprocess.job"):
        assert main(argv) == 0
    # --no-progress holds for the job's dataset only; the caller's context keeps its own settings
    assert [ds.context.enable_progress_bars for ds in built] == [False]
    assert ray.data.DataContext.get_current().enable_progress_bars is True
    if partitions is None:
        cpus = int(ray.cluster_resources()["CPU"])
        expected = default_partitions(cpus, input_bytes)
        assert expected > 2 * cpus and expected % cpus == 0
        assert f"dedup exchange partitions: {expected}" in caplog.text

    # the job chose its exchange's shuffle strategy on its own copy of the Ray Data context
    assert ray.data.DataContext.get_current().shuffle_strategy == strategy_before
    summary_line = capsys.readouterr().out.strip().splitlines()[-1]
    cfg = resolve_config(build_parser().parse_args(argv))
    out = check_run_against_reference(cfg, summary_line)
    reasons = {(e["step"], e["reason"]) for e in out["ledger"]}
    assert {("read", "malformed_json"), ("read", "invalid_row")} <= reasons
    # read tasks fused with the first stage write its drops (bad lines at least) to the ledger
    # themselves, so those rows skip the dedup exchange; re-blocked records go the long way
    fused = "read fused with the first stage" in caplog.text
    assert split_records is None or fused == (not split_records)
    assert bool(list((tmp_path / "out" / "dropped").glob("part-*-read-*.jsonl"))) == fused
    assert any(step.startswith("DedupFilter") and reason == "duplicate" for step, reason in reasons)
    assert all("__twinkle_row_id__" not in line for line in out["kept_lines"])
    kept_ids = {json.loads(line)["id"] for line in out["kept_lines"]}
    assert kept_ids & set(range(100_000, 200_000))  # Parquet rows made it
    assert kept_ids & set(range(200_000, 300_000))  # and the JSON array's
    assert kept_ids & set(range(300_000, 400_000))  # and the UTF-16 file's
    assert kept_ids & set(range(900_000, 900_003))  # and a row holding a lone surrogate
    if output_format == "parquet":
        table = pq.read_table(tmp_path / "out" / "kept")
        assert table.column_names == ["source", "line", "row"]
        ids = input_ids(cfg.inputs)
        for source, line, row in zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True):
            assert ids[(source, line)] == json.loads(row)["id"]
    if pipeline == "two-dedups-and-actor":
        assert ("ModelStep", "mentions_sql") in reasons
        # the pool has the configured 2 actors; the model loaded eagerly, once in each, never lazily
        job_loads = [p.name for p in markers.iterdir() if not p.name.endswith(f"-{os.getpid()}")]
        assert len(job_loads) == 2 and all(name.startswith("warmup-") for name in job_loads)
        assert [s["step"] for s in out["stats"]["steps"]] == [
            "read",
            "DedupFilter",
            "ModelStep",
            "DedupFilter#2",
            "HardFilter",
        ]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| read |" in report and "drop_reasons.png" in report
    assert (tmp_path / "out" / "drop_reasons.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("split_records", [False, True])
def test_unreadable_files_stop_the_run_naming_them_or_become_drops(
    ray_local, chat_inputs, tmp_path, capsys, monkeypatch, split_records
):
    """A truncated gzip file and a damaged Parquet file among good inputs: by default the run stops
    and names one of them; with ``--unreadable-files drop`` it keeps every record before each break,
    records the rest as one ``unreadable_file`` drop per file, and equals the one-process run. Both
    with the read fused with the first stage and with the records re-blocked first."""
    import gzip

    monkeypatch.setattr("twinkle_agentic.jobs.preprocess.job.needs_split", lambda sources, cpus: split_records)

    broken = tmp_path / "broken"
    broken.mkdir()
    rows = b"".join(
        json.dumps(
            {"id": 500_000 + i, "messages": [{"role": "user", "content": f"question {i} " * 9}]}
        ).encode()
        + b"\n"
        for i in range(3000)
    )
    whole = gzip.compress(rows)
    (broken / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    (broken / "cut.parquet").write_bytes(b"PAR1" + b"\0" * 64)
    array = json.dumps(
        [{"id": 600_000 + i, "messages": [{"role": "user", "content": f"ask {i} " * 9}]} for i in range(900)]
    )
    (broken / "cut.json").write_bytes(array[: len(array) // 2].encode())  # one JSON array, broken off
    argv = ["--input", str(chat_inputs / "*.jsonl*"), str(broken), "--no-progress", "--dedup-partitions", "3"]

    assert main([*argv, "--output", str(tmp_path / "stopped")]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out.strip().splitlines()[-1].startswith("preprocess: stopped on an unreadable input after ")
    )
    message = captured.err.strip().splitlines()[-1]
    assert str(broken / "cut.") in message and "--unreadable-files drop" in message
    assert not (tmp_path / "stopped" / "stats.json").exists()  # its presence marks a complete run

    argv += ["--output", str(tmp_path / "out"), "--unreadable-files", "drop"]
    assert main(argv) == 0
    cfg = resolve_config(build_parser().parse_args(argv))
    captured = capsys.readouterr()
    assert "3 input file(s) could not be read to their end" in captured.err
    out = check_run_against_reference(cfg, captured.out.strip().splitlines()[-1])
    unreadable = {(e["source"], e["line"]) for e in out["ledger"] if e["reason"] == "unreadable_file"}
    cut_line = next(line for source, line in unreadable if source.endswith("cut.jsonl.gz"))
    cut_element = next(line for source, line in unreadable if source.endswith("cut.json"))
    assert unreadable == {
        (str(broken / "cut.jsonl.gz"), cut_line),
        (str(broken / "cut.parquet"), 1),
        (str(broken / "cut.json"), cut_element),
    }
    read_ids = {entry["row"]["id"] for entry in out["ledger"] if isinstance(entry["row"], dict)}
    read_ids |= {json.loads(line)["id"] for line in out["kept_lines"]}
    assert cut_line > 1 and set(range(500_000, 500_000 + cut_line - 1)) <= read_ids
    assert cut_element > 1 and set(range(600_000, 600_000 + cut_element - 1)) <= read_ids
    read_step = out["stats"]["steps"][0]
    assert read_step["step"] == "read" and read_step["reasons"]["unreadable_file"] == 3


def test_run_whose_counts_do_not_add_up_fails_without_reports(
    ray_local, chat_inputs, tmp_path, monkeypatch, capsys
):
    """``stats.json`` marks a complete run (README): a run that fails its invariant check writes no
    report, and the CLI says it failed."""

    def lost_rows(result, stats):
        raise job_module.InvariantError("kept 1 + dropped 1 != rows read 3")

    monkeypatch.setattr(job_module, "check_invariants", lost_rows)
    out = tmp_path / "out"
    assert main(["--input", str(chat_inputs), "--output", str(out), "--no-progress"]) == 1
    assert "run failed: InvariantError: kept 1 + dropped 1 != rows read 3" in capsys.readouterr().err
    assert (out / "kept").is_dir()
    assert not [p.name for p in out.iterdir() if p.is_file()]


def run_failure(chat_inputs: Path, tmp_path: Path, capsys, steps: list) -> tuple[str, str]:
    """Run the CLI with ``steps``, which must fail the run: the last line on stderr, and all of it."""
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"steps": steps}))
    out = tmp_path / "out"
    argv = ["--input", str(chat_inputs), "--output", str(out), "--config", str(config), "--no-progress"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1].startswith("preprocess: FAILED after ")
    assert not (out / "stats.json").exists()
    return captured.err.strip().splitlines()[-1], captured.err


def test_a_step_that_raises_fails_the_run_naming_the_step_and_input_lines(
    ray_local, chat_inputs, tmp_path, capsys
):
    last, err = run_failure(chat_inputs, tmp_path, capsys, ["HardFilter", "tests.support.job_steps:Explodes"])
    # the last line says it (Ray's wrapper would end the output with its own advice on retries)
    failure = re.fullmatch(
        r"twinkle-agentic preprocess: run failed: StepFailedError: step 'Explodes' raised ValueError: "
        r"cannot handle these rows on a batch of \d+ rows, from (\S+) line \d+ to (\S+) line \d+",
        last,
    )
    assert failure, err[-3000:]
    assert {Path(failure[1]).parent, Path(failure[2]).parent} == {chat_inputs}
    assert 'raise ValueError("cannot handle these rows")' in err  # the step's own traceback
    assert "internal code" not in err  # Ray Data reports it as an error in user code, not its own


def test_a_step_that_breaks_the_contract_fails_the_run_naming_it(ray_local, chat_inputs, tmp_path, capsys):
    last, err = run_failure(chat_inputs, tmp_path, capsys, ["tests.support.job_steps:LosesKeys"])
    assert last.startswith(
        "twinkle-agentic preprocess: run failed: StepBrokeContract: step 'LosesKeys' returned a row that lost "
        "the keys it does not handle"
    ), err[-3000:]


def test_a_model_step_that_cannot_load_fails_the_run_naming_the_step(
    ray_local, chat_inputs, tmp_path, capsys
):
    last, err = run_failure(chat_inputs, tmp_path, capsys, ["HardFilter", "tests.support.job_steps:FailsToLoad"])
    assert last == (
        "twinkle-agentic preprocess: run failed: StepStartError: step 'FailsToLoad' could not start: "
        "FileNotFoundError: no model weights at /models/pii-xl"
    ), err[-3000:]
    assert "ActorDiedError" not in err  # before: the actor died in its constructor, and Ray said only that


def test_overwrite_removes_only_the_previous_run(tmp_path):
    out = tmp_path / "out"
    (out / "kept").mkdir(parents=True)
    (out / "kept" / "part-old.jsonl").write_text("{}\n")
    (out / "stats.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="--overwrite"):
        prepare_output(str(out), overwrite=False)
    prepare_output(str(out), overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_killed_runs_storage_marker_counts_as_its_output(tmp_path):
    """A run killed mid-way leaves its marker and maybe part files: the next run must be told."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".twinkle-run-0123456789ab").write_text("")
    with pytest.raises(ConfigError, match=r"already holds a run \(.*\.twinkle-run-0123456789ab\)"):
        prepare_output(str(out), overwrite=False)
    prepare_output(str(out), overwrite=True)
    assert list(out.iterdir()) == []


def test_an_output_folder_inside_the_input_folder_is_never_read_back(
    ray_local, chat_inputs, tmp_path, capsys
):
    """``--input data --output data/clean`` twice: the second run reads the inputs, not the first run's
    kept and dropped parts and stats.json (before, it listed them, --overwrite deleted them, and the
    reads failed as if a node could not see its files)."""
    data = tmp_path / "data"
    data.mkdir()
    for f in sorted(chat_inputs.iterdir()):
        (data / f.name).write_bytes(f.read_bytes())
    out = data / "clean"
    args = ["--input", str(data), "--output", str(out), "--no-progress"]
    assert main(args) == 0
    first = json.loads((out / "stats.json").read_text())
    capsys.readouterr()
    assert main([*args, "--overwrite"]) == 0
    captured = capsys.readouterr()
    assert "not reading 3 file(s) of an earlier run's output under --output" in captured.err
    second = json.loads((out / "stats.json").read_text())
    assert [i["uri"] for i in second["inputs"]] == [str(data / f.name) for f in sorted(chat_inputs.iterdir())]
    assert second["inputs"] == first["inputs"]
    assert (second["rows_read"], second["kept"], second["dropped"]) == (
        first["rows_read"],
        first["kept"],
        first["dropped"],
    )
    # named on its own, an output of the folder is refused before anything is deleted
    (kept,) = (out / "kept").iterdir()
    assert main(["--input", str(kept), "--output", str(out), "--overwrite"]) == 2
    assert f"input {str(kept)!r} is an output of this job's --output folder" in capsys.readouterr().err
    assert kept.exists()


def test_dry_run_prints_plan_without_ray(chat_inputs, tmp_path, capsys):
    config = tmp_path / "pipeline.yaml"
    config.write_text("steps:\n  - HardFilter\n  - DedupFilter\n")
    assert (
        main(
            [
                "--config",
                str(config),
                "--input",
                str(chat_inputs),
                "--output",
                str(tmp_path / "o"),
                "--dry-run",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "3 input file(s)" in printed
    assert "1. map_batches: parse -> HardFilter + dedup keys" in printed
    assert "2. dedup shuffle: DedupFilter" in printed
    assert not (tmp_path / "o").exists()
