"""The rollout job on object storage: prompts, journal, run.json, Parquet and summary.json on
``s3://`` URIs of a local S3-compatible server (moto, ``tests.support.s3_server``), credentials and
endpoint in the standard AWS environment variables. The journal takes its segmented form there; a
run is resumed after a crash that lost its last segment."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import twinkle_agentic.jobs.rollout.journal as journal_module
from pyarrow import fs
from twinkle_agentic.jobs.rollout.config import ConfigError, config_from_mapping
from twinkle_agentic.jobs.rollout.journal import Journal

from tests.jobs.rollout.test_groups_job import SCRIPTED_JOB
from tests.support.s3_server import s3_server

FINGERPRINT = {"model": "m"}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_server(tmp_path_factory.mktemp("moto")) as server, pytest.MonkeyPatch.context() as patch:
        for key, value in server.env.items():
            patch.setenv(key, value)
        server.bucket("rollouts")
        yield server


def keys(s3, prefix: str) -> list[str]:
    infos = s3.filesystem().get_file_info(fs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path[len(prefix) + 1 :] for i in infos if i.type == fs.FileType.File)


def read_object(s3, key: str) -> bytes:
    with s3.filesystem().open_input_stream(key) as stream:
        return stream.read()


def records_under(s3, prefix: str) -> list[dict]:
    parts = [k for k in keys(s3, prefix) if k.startswith("trajectories/part-")]
    return [json.loads(line) for k in parts for line in read_object(s3, f"{prefix}/{k}").splitlines()]


def group(gid: str) -> list[dict]:
    return [
        {"trajectory_id": f"{gid}/s{k}", "group_id": gid, "group_size": 2, "stop_reason": "stop"}
        for k in range(2)
    ]


def test_the_journal_on_s3_writes_segments_resumes_refuses_and_overwrites(s3):
    out = "s3://rollouts/unit"
    journal, state = Journal.open(out, FINGERPRINT, overwrite=False, flush_s=0)
    assert journal.segmented and not state.ids and journal.path == "s3://rollouts/unit/trajectories"
    journal.append(group("a"))
    journal.append(group("b"))
    journal.close()
    assert keys(s3, "rollouts/unit") == [
        "run.json",
        "trajectories/part-00000000.jsonl",
        "trajectories/part-00000001.jsonl",
    ]
    journal, state = Journal.open(out, FINGERPRINT, overwrite=False, flush_s=0)
    assert state.ids == {"a/s0", "a/s1", "b/s0", "b/s1"}
    journal.append(group("c"))
    journal.close()
    assert journal.write_parquet() == "s3://rollouts/unit/trajectories.parquet"
    table = pq.read_table("rollouts/unit/trajectories.parquet", filesystem=s3.filesystem())
    assert table.column("trajectory_id").to_pylist() == [f"{g}/s{k}" for g in "abc" for k in range(2)]
    assert journal.write_summary({"trajectories_in_output": 6}) == "s3://rollouts/unit/summary.json"
    assert json.loads(read_object(s3, "rollouts/unit/summary.json")) == {"trajectories_in_output": 6}
    with pytest.raises(ConfigError, match="other settings"):
        Journal.open(out, {"model": "other"}, overwrite=False)
    _, state = Journal.open(out, {"model": "other"}, overwrite=True)
    assert not state.ids and keys(s3, "rollouts/unit") == ["run.json"]


def test_an_output_uri_that_is_an_object_or_an_unknown_bucket_is_refused(s3):
    with s3.filesystem().open_output_stream("rollouts/a-file") as stream:
        stream.write(b"x")
    with pytest.raises(ConfigError, match="is a file; pass a directory"):
        Journal.open("s3://rollouts/a-file", FINGERPRINT, overwrite=False)
    with pytest.raises(ConfigError, match="cannot use output 's3://no-such-bucket/out'"):
        Journal.open("s3://no-such-bucket/out", FINGERPRINT, overwrite=False)


@pytest.mark.integration
def test_the_job_on_s3_runs_and_resumes_after_a_crash_lost_its_last_segment(
    ray_local, s3, tmp_path, monkeypatch
):
    """Real farm and workers (a scripted engine) on local Ray; every file of the run on S3."""
    from twinkle_agentic.jobs.rollout.job import run

    monkeypatch.setattr(journal_module, "SEGMENT_FLUSH_S", 0.0)  # a segment per batch: several to lose one of
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"id": f"p{i}", "prompt": f"q{i}", "scores": [i % 2, 1, 0]} for i in range(4)]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s3.upload(prompts, "s3://rollouts/in/prompts.jsonl")
    settings = {**SCRIPTED_JOB, "prompts": "s3://rollouts/in/prompts.jsonl", "output": "s3://rollouts/job",
                "output_format": "parquet", "groups": {"epsilon": 0.0}}  # fmt: skip
    summary = run(config_from_mapping(settings).validate())
    assert summary.figures()["trajectories"] == 12 and summary.figures()["groups"] == 4
    assert summary.files == {
        "journal": "s3://rollouts/job/trajectories",
        "parquet": "s3://rollouts/job/trajectories.parquet",
        "summary": "s3://rollouts/job/summary.json",
    }
    segments = [k for k in keys(s3, "rollouts/job") if k.startswith("trajectories/part-")]
    assert len(segments) >= 2
    records = records_under(s3, "rollouts/job")
    assert sorted(r["trajectory_id"] for r in records) == sorted(
        f"p{i}/s{k}" for i in range(4) for k in range(3)
    )
    written = json.loads(read_object(s3, "rollouts/job/summary.json"))
    assert written["trajectories_in_output"] == 12 and written["groups_in_output"]["groups"] == 4
    assert pq.read_table("rollouts/job/trajectories.parquet", filesystem=s3.filesystem()).num_rows == 12

    # the process died before its last segment's upload completed: those groups are not in the output
    lost = {
        json.loads(line)["group_id"] for line in read_object(s3, f"rollouts/job/{segments[-1]}").splitlines()
    }
    s3.filesystem().delete_file(f"rollouts/job/{segments[-1]}")
    again = run(config_from_mapping(settings).validate())
    assert again.figures()["trajectories"] == 3 * len(lost) and again.resumed == 12 - 3 * len(lost)
    records = records_under(s3, "rollouts/job")
    assert (
        len(records) == 12 and len({r["trajectory_id"] for r in records}) == 12
    )  # nothing lost, nothing twice
    assert json.loads(read_object(s3, "rollouts/job/summary.json"))["trajectories_in_output"] == 12
    assert pq.read_table("rollouts/job/trajectories.parquet", filesystem=s3.filesystem()).num_rows == 12
