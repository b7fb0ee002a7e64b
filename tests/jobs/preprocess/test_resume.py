"""``preprocess --resume`` on real local Ray: runs killed (SIGKILL of the driver's process group, and of
a worker) at each phase, then resumed, end with exactly the output of an uninterrupted run, and a
resume sends through the stages before the dedup exchange (a model stage on an actor pool among
them) only the rows of inputs not committed."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from twinkle_agentic.jobs.preprocess import main
from twinkle_agentic.jobs.preprocess.checkpoints import complete_units, list_units
from twinkle_agentic.jobs.preprocess.config import build_parser, resolve_config
from twinkle_agentic.jobs.preprocess.job import run
from twinkle_agentic.jobs.preprocess.resume import PAUSE_DIR_ENV, PAUSE_ENV

from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration

# Settings of stats.json that differ between runs whatever they did: timings, the cluster, the resume
# entry (checked on its own) and the output folder's name.
VOLATILE = ("seconds", "rows_per_s", "cluster", "resume")


def comparable(out: Path) -> dict:
    """A finished run's kept rows and ledger lines (sorted: their order is not defined) and its
    stats.json without what varies between runs."""
    stats = json.loads((out / "stats.json").read_text())
    for key in VOLATILE:
        stats.pop(key)
    for step in stats["steps"]:
        step.pop("seconds")
    for key in ("output", "resume", "overwrite", "read_concurrency"):  # the last: how reads spread
        stats["config"].pop(key)
    return {
        "kept": sorted(line for p in (out / "kept").iterdir() for line in p.read_bytes().splitlines()),
        "ledger": sorted(line for p in (out / "dropped").iterdir() for line in p.read_bytes().splitlines()),
        "stats": stats,
    }


MODEL = "tests.support.job_steps:RecordsRows"


@pytest.fixture
def pipeline(tmp_path) -> Path:
    """The bundled pipeline with a model step before the dedup: one actor taking one row per batch, so
    each of its tasks holds one block of one input, and inputs read one after another (``argv``) reach
    it in order."""
    default = yaml.safe_load((REPO_ROOT / "jobs" / "configs" / "default_pipeline.yaml").read_text())
    steps = default["steps"]
    (tmp_path / "model").mkdir()
    steps.insert(len(steps) - 1, {MODEL: {"log_dir": str(tmp_path / "model")}, "batch_size": 1})
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"steps": steps}))
    return path


def argv(inputs: Path, out: Path, pipeline: Path) -> list[str]:
    return ["--input", str(inputs), "--output", str(out), "--config", str(pipeline), "--no-progress",
            "--batch-size", "100", "--read-concurrency", "1"]  # fmt: skip


def model_rows(log_dir: Path) -> set[tuple[int, int]]:
    """The ``(input, line)`` rows the model step got since the last call (whose logs it removes)."""
    rows = set()
    for log in log_dir.iterdir():
        rows |= {tuple(map(int, line.split())) for line in log.read_text().splitlines()}
        log.unlink()
    return rows


def committed(out: Path) -> set[int]:
    from pyarrow import fs

    return set(complete_units(list_units(fs.LocalFileSystem(), str(out / "_resume" / "units"))))


def killed_run(inputs: Path, out: Path, pipeline: Path, flags: Path, pause_at: str, until: Any = None) -> str:
    """Run the CLI with ``--resume`` on its own embedded cluster until it stops at ``pause_at`` and
    ``until()`` (if given) is true, then SIGKILL its process group and every process it started;
    returns its stderr."""
    flags.mkdir(exist_ok=True)
    env = {**os.environ, PAUSE_ENV: pause_at, PAUSE_DIR_ENV: str(flags)}
    command = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", *argv(inputs, out, pipeline)]
    command += ["--resume", "--num-cpus", "2"]
    stderr = out.parent / f"stderr-{pause_at.replace(':', '_').replace(',', '+')}.txt"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO_ROOT, env=env, start_new_session=True
        )
    paused = flags / pause_at.split(",")[-1].replace(":", "_")
    deadline = time.monotonic() + 120
    started: list[psutil.Process] = []
    try:
        while not (paused.exists() and (until is None or until())):
            assert proc.poll() is None, f"the run ended ({proc.returncode}) before {pause_at}:\n{stderr.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no {pause_at} within 120 s:\n{stderr.read_text()[-3000:]}"
            time.sleep(0.05)
        started = psutil.Process(proc.pid).children(recursive=True)
    finally:
        with contextlib.suppress(ProcessLookupError):  # (a run that failed is gone already)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        for child in started:  # Ray workers run in process groups of their own
            if child.is_running():
                child.kill()
        psutil.wait_procs(started, timeout=30)
    return stderr.read_text()


def test_runs_killed_anywhere_resume_to_the_uninterrupted_output(
    ray_local, chat_inputs, pipeline, tmp_path, capsys, caplog
):
    reference, log = tmp_path / "reference", tmp_path / "model"
    assert main(argv(chat_inputs, reference, pipeline)) == 0  # a plain run, uninterrupted
    expected, modelled = comparable(reference), model_rows(log)
    assert {src for src, _ in modelled} == {0, 1, 2} and expected["stats"]["steps"][6]["dropped"]
    out, flags = tmp_path / "out", tmp_path / "flags"

    # 1. in the model stage: a worker dies right after it committed a part of input 0 (Ray retries its
    # task); the driver's group is killed while the model step holds input 2's first row, once inputs 0
    # and 1 are committed (read one after another, they reach the one actor before input 2)
    killed_run(chat_inputs, out, pipeline, flags, "die:staged:0,model:2", lambda: committed(out) == {0, 1})
    assert (flags / "die_staged_0").exists() and not (out / "stats.json").exists()
    first = model_rows(log)
    assert {r for r in modelled if r[0] < 2} <= first and not any(src == 2 for src, _ in first)
    # 2. in the dedup exchange: inputs 0 and 1 came from their checkpoints, straight to the exchange;
    # only input 2's rows went through the model stage again
    stderr = killed_run(chat_inputs, out, pipeline, flags, "exchange")
    assert re.search(r"resumable run \w+: 2 of 3 input\(s\) from checkpoints", stderr), stderr[-3000:]
    assert model_rows(log) == {r for r in modelled if r[0] == 2} and committed(out) == {0, 1, 2}
    # 3. in a write task, after it wrote kept rows; 4. on the driver, all data written, before stats.json
    killed_run(chat_inputs, out, pipeline, flags, "write:0")
    assert list((out / "kept").iterdir())
    killed_run(chat_inputs, out, pipeline, flags, "written")
    assert not (out / "stats.json").exists()

    assert not model_rows(log)  # since 2., no row went through the model stage again
    # 5. input 2's read record is lost: the Python API resumes the run to the end on 4 CPUs, where the
    # 3 inputs are re-blocked (as in a plain run) and input 2 is processed again; exactly the
    # uninterrupted run's rows, ledger and stats
    next((out / "_resume" / "units" / "000002").glob("read-*.json")).unlink()
    cfg = resolve_config(build_parser().parse_args([*argv(chat_inputs, out, pipeline), "--resume"]))
    cfg.read_concurrency = None  # reads spread over the 4 CPUs: not part of the run's fingerprint
    with caplog.at_level(logging.INFO, logger="twinkle_agentic.jobs.preprocess.job"):
        summary = run(cfg)
    assert "re-blocked for parallelism" in caplog.text
    assert comparable(out) == expected
    assert model_rows(log) == {r for r in modelled if r[0] == 2}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["resume"]["resumed"] and stats["resume"]["inputs_reused"] == 2
    assert stats["resume"]["inputs_processed"] == 1 and summary.kept == expected["stats"]["kept"]
    assert not (out / "_resume" / "units").exists()  # a finished run keeps only _resume/run.json
    assert json.loads((reference / "stats.json").read_text())["resume"] is None

    # 6. resuming the finished run does nothing and says so
    before = (out / "stats.json").read_bytes()
    capsys.readouterr()
    assert main([*argv(chat_inputs, out, pipeline), "--resume"]) == 0
    assert "already complete" in capsys.readouterr().out.strip().splitlines()[-1]
    assert (out / "stats.json").read_bytes() == before and comparable(out) == expected
