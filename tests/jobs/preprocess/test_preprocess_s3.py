"""The preprocess job on object storage: inputs and every output on ``s3://`` URIs of a local
S3-compatible server (moto, ``tests.support.s3_server``). The command runs as a user runs it, with
credentials and endpoint in the standard AWS environment variables, on its own embedded Ray cluster,
whose read and write tasks inherit them; the result equals the one-process pipeline's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from hashlib import sha256

import pytest
from twinkle_agentic.jobs.preprocess.config import build_parser, resolve_config
from twinkle_agentic.jobs.preprocess.job import plan

from tests.support.job_data import read_outputs, reference_outputs
from tests.support.paths import REPO_ROOT
from tests.support.s3_server import s3_server
from twinkle_agentic.io import expand_inputs, read_source
from twinkle_agentic.preprocessor import run_pipeline


@pytest.fixture(scope="module")
def s3(tmp_path_factory, chat_inputs):
    with s3_server(tmp_path_factory.mktemp("moto")) as server, pytest.MonkeyPatch.context() as patch:
        for key, value in server.env.items():
            patch.setenv(key, value)
        server.bucket("data")
        server.upload(chat_inputs, "s3://data/in")
        yield server


def test_input_uris_keep_their_options_on_every_file_listed(s3, chat_inputs, monkeypatch):
    """The endpoint given in the URI, not the environment, reaches each listed file's reads."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    options = f"?endpoint_override={s3.endpoint.removeprefix('http://')}&scheme=http"
    sources = expand_inputs([f"s3://data/in/{options}"])
    local = expand_inputs([str(chat_inputs)])
    assert [s.uri for s in sources] == [f"s3://data/in/{s.uri.rsplit('/', 1)[-1]}" + options for s in local]
    assert [len(list(read_source(s))) for s in sources] == [len(list(read_source(s))) for s in local]


@pytest.mark.integration
def test_the_command_reads_and_writes_s3_and_matches_the_one_process_pipeline(s3, chat_inputs, tmp_path):
    argv = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", "--input", "s3://data/in/", "--output",
            "s3://data/out", "--num-cpus", "2", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        env={**os.environ, **s3.env}, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the run hung: " + proc.communicate()[1][-3000:])
    assert proc.returncode == 0, (stdout + stderr)[-4000:]
    assert stdout.strip().splitlines()[-1].endswith("output: s3://data/out")

    out = s3.download("s3://data/out", tmp_path / "out")
    assert {p.name for p in out.iterdir()} >= {"kept", "dropped", "stats.json", "report.md"}
    assert not [p for p in out.iterdir() if p.name.startswith(".twinkle-run-")]  # the run's marker is gone
    job = read_outputs(out)
    cfg = resolve_config(
        build_parser().parse_args(["--input", str(chat_inputs), "--output", str(tmp_path / "x")])
    )
    _, steps, _, _ = plan(cfg)
    reference = reference_outputs(run_pipeline(cfg.inputs, steps, unreadable=cfg.unreadable_files))
    assert job["kept"] == reference["kept"] and job["dropped"] == reference["dropped"]
    assert job["ledger"] and all(e["source"].startswith("s3://data/in/") for e in job["ledger"])
    stats = json.loads((out / "stats.json").read_text())
    assert stats["kept"] + stats["dropped"] == stats["rows_read"] and stats["kept"] == len(job["kept_lines"])
    # each input's size and checksum, read through the job's S3 file system
    assert stats["inputs"] == [
        {
            "uri": f"s3://data/in/{p.name}",
            "size_bytes": p.stat().st_size,
            "sha256": sha256(p.read_bytes()).hexdigest(),
        }
        for p in sorted(chat_inputs.iterdir())
    ]
