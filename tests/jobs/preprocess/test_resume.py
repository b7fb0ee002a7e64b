"""``preprocess --resume`` on real local Ray: runs killed (SIGKILL of the driver's process group, and of
a worker) at each phase, then resumed, end with exactly the output of an uninterrupted run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from twinkle_agentic.jobs.preprocess import main
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
    for key in ("output", "resume", "overwrite"):
        stats["config"].pop(key)
    return {
        "kept": sorted(line for p in (out / "kept").iterdir() for line in p.read_bytes().splitlines()),
        "ledger": sorted(line for p in (out / "dropped").iterdir() for line in p.read_bytes().splitlines()),
        "stats": stats,
    }


def argv(inputs: Path, out: Path) -> list[str]:
    return ["--input", str(inputs), "--output", str(out), "--no-progress", "--batch-size", "100"]


def killed_run(inputs: Path, out: Path, flags: Path, pause_at: str, wait_for: list[Path]) -> str:
    """Run the CLI with ``--resume`` on its own embedded cluster until it stops at ``pause_at`` and every
    path in ``wait_for`` exists, then SIGKILL its process group and every process it started; returns
    its stderr."""
    flags.mkdir(exist_ok=True)
    env = {**os.environ, PAUSE_ENV: pause_at, PAUSE_DIR_ENV: str(flags)}
    command = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", *argv(inputs, out)]
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
        while not all(p.exists() for p in [paused, *wait_for]):
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


def test_runs_killed_anywhere_resume_to_the_uninterrupted_output(ray_local, chat_inputs, tmp_path, capsys):
    reference = tmp_path / "reference"
    assert main(argv(chat_inputs, reference)) == 0  # a plain run, uninterrupted
    expected = comparable(reference)
    out, flags = tmp_path / "out", tmp_path / "flags"
    checkpoints = out / "_resume" / "inputs"

    # 1. reads: a worker dies right after committing input 0 (Ray retries its task); the driver's
    # group is killed while input 1 is half read, inputs 0 and 2 committed
    killed_run(
        chat_inputs, out, flags, "die:committed:0,partial:1", [checkpoints / "000000.arrow", checkpoints / "000002.arrow"]
    )
    assert (flags / "die_committed_0").exists()
    assert not (checkpoints / "000001.arrow").exists() and list(checkpoints.glob("000001.arrow.tmp-*"))
    assert not (out / "stats.json").exists()
    # 2. in the dedup exchange: inputs 0 and 2 came from their checkpoints, input 1 was read again
    log = killed_run(chat_inputs, out, flags, "exchange", [])
    assert re.search(r"resumable run \w+: 2 of 3 input\(s\) from checkpoints", log), log[-3000:]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["000000.arrow", "000001.arrow", "000002.arrow"]
    # 3. in a write task, after it wrote kept rows; 4. on the driver, all data written, before stats.json
    killed_run(chat_inputs, out, flags, "write:0", [])
    assert list((out / "kept").iterdir())
    killed_run(chat_inputs, out, flags, "written", [])
    assert not (out / "stats.json").exists()

    # 5. the Python API resumes it to the end: exactly the uninterrupted run's rows, ledger and stats
    cfg = resolve_config(build_parser().parse_args([*argv(chat_inputs, out), "--resume"]))
    summary = run(cfg)
    assert comparable(out) == expected
    stats = json.loads((out / "stats.json").read_text())
    assert stats["resume"]["resumed"] and stats["resume"]["inputs_reused"] == 3
    assert stats["resume"]["inputs_processed"] == 0 and summary.kept == expected["stats"]["kept"]
    assert not checkpoints.exists()  # a finished run keeps only _resume/run.json
    assert json.loads((reference / "stats.json").read_text())["resume"] is None

    # 6. resuming the finished run does nothing and says so
    before = (out / "stats.json").read_bytes()
    capsys.readouterr()
    assert main([*argv(chat_inputs, out), "--resume"]) == 0
    assert "already complete" in capsys.readouterr().out.strip().splitlines()[-1]
    assert (out / "stats.json").read_bytes() == before and comparable(out) == expected
