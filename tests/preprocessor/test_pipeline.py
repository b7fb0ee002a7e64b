"""run_pipeline: a pipeline over input files in one process, with the job's reading and drops."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from twinkle_agentic.preprocessor import DedupFilter, HardFilter, PipelineRun, run_pipeline

QUESTION = "Please explain in detail how the caching layer of the server works."
ANSWER = "The caching layer keeps recent responses in memory and evicts the least recently used entry first."


def chat(question: str, answer: str, **extra) -> dict:
    return {
        "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}],
        **extra,
    }


def test_a_pipeline_over_files_keeps_rows_in_input_order_and_names_every_drop(tmp_path):
    first = tmp_path / "a.jsonl"
    first.write_text(
        "\n".join(
            [json.dumps(chat(QUESTION, ANSWER, id=1)), "{not json", json.dumps(chat("hi", "hello", id=2))]
        )
    )
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as handle:  # a copy of row 1 under another id: a duplicate
        handle.write(
            json.dumps(chat(QUESTION, ANSWER, id=3))
            + "\n"
            + json.dumps(chat(QUESTION + " Why?", ANSWER, id=4))
        )

    run = run_pipeline([str(tmp_path)], [HardFilter(), DedupFilter()])

    assert isinstance(run, PipelineRun)
    assert [row["id"] for row in run.kept] == [1, 4]
    assert run.rows_read == 5 and run.seconds > 0
    reasons = [(step, reason) for step, reason, _ in run.dropped]
    assert reasons == [
        ("read", "malformed_json"),
        ("HardFilter", "trivial_single_turn"),
        ("DedupFilter", "duplicate"),
    ]
    assert run.dropped[0][2] == "{not json"  # a read drop holds the raw text
    assert run.dropped[2][2]["id"] == 3 and "drop_reason" not in run.dropped[2][2]


def test_repeated_steps_are_numbered_and_a_dedup_sees_only_survivors(tmp_path):
    path = tmp_path / "rows.json"  # one JSON array of rows
    path.write_text(
        json.dumps([chat("hi", "hello", id=1), chat(QUESTION, ANSWER, id=2), chat(QUESTION, ANSWER, id=3)])
    )

    run = run_pipeline([str(path)], [HardFilter(), DedupFilter(), HardFilter(), DedupFilter()])

    assert [row["id"] for row in run.kept] == [2]
    assert [(step, reason) for step, reason, _ in run.dropped] == [
        ("HardFilter", "trivial_single_turn"),
        ("DedupFilter", "duplicate"),
    ]


def test_a_file_that_breaks_off_fails_or_becomes_one_drop(tmp_path):
    from twinkle_agentic.io import UnreadableInputError

    data = gzip.compress(
        b"".join(json.dumps(chat(QUESTION, f"{ANSWER} {i}")).encode() + b"\n" for i in range(2000))
    )
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UnreadableInputError, match="cut.jsonl.gz"):
        run_pipeline([str(path)], [])
    run = run_pipeline([str(path)], [], unreadable="drop")
    assert run.dropped[-1][:2] == ("read", "unreadable_file") and len(run.kept) == run.rows_read - 1


def test_the_runner_imports_without_ray():
    code = "import sys; from twinkle_agentic.preprocessor import run_pipeline; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_pipeline_config_runs_as_the_job_reads_it(tmp_path):
    """The bundled default pipeline, the same pipeline as a YAML file and as YAML step entries give
    one result; the file's input_format applies unless the call gives one."""
    rows = [chat(QUESTION, ANSWER, id=1), chat(QUESTION, ANSWER, id=2), chat("hi", "hello", id=3)]
    data = tmp_path / "chats.txt"  # no known suffix: only input_format says it is JSON Lines
    data.write_text("\n".join(json.dumps(r) for r in rows))
    entries = [{"HardFilter": {"min_user_chars": 10, "max_rounds": 30}}, "DeadLoopFilter", "RefuseFilter",
               "TokenSoupFilter", "MessageNormalizer", {"DedupFilter": {"prefix_chars": 100, "asst_chars": 100}}]
    config = tmp_path / "pipeline.yaml"
    config.write_text(json.dumps({"steps": entries, "input_format": "jsonl"}))

    by_default = run_pipeline([str(data)], input_format="jsonl")
    by_file = run_pipeline([str(data)], str(config))
    by_entries = run_pipeline([str(data)], entries, input_format="jsonl")

    assert len(by_default.kept) == 1 and by_default.kept[0]["id"] in (1, 2)
    assert by_file.kept == by_entries.kept == by_default.kept
    assert sorted(d[:2] for d in by_file.dropped) == sorted(d[:2] for d in by_default.dropped) == [
        ("DedupFilter", "duplicate"), ("HardFilter", "trivial_single_turn")]


def test_a_bad_step_entry_is_refused_before_any_row_is_read(tmp_path):
    from twinkle_agentic.errors import ConfigError

    with pytest.raises(ConfigError, match="min_user_chars must be an integer"):
        run_pipeline([str(tmp_path / "missing.jsonl")], [{"HardFilter": {"min_user_chars": "10k"}}])
    with pytest.raises(ConfigError, match="unknown step 'NoSuchFilter'"):
        run_pipeline([str(tmp_path / "missing.jsonl")], ["NoSuchFilter"])
    config = tmp_path / "pipeline.yaml"
    config.write_text("steps: HardFilter\n")
    with pytest.raises(ConfigError, match="'steps' must be a list"):
        run_pipeline([str(tmp_path / "missing.jsonl")], str(config))
