"""Ctrl-C and SIGTERM (``ray job stop``) during a preprocess run on the embedded cluster: the CLI says
where it stopped, exits 130 / 143, writes no stats.json and leaves no Ray process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def wait_for(predicate, proc: subprocess.Popen, log: Path, what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"the run exited ({proc.returncode}) before {what}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout_s:.0f} s:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)


@pytest.mark.parametrize(("stop_signal", "expected_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_run_says_so_and_leaves_no_stats_or_processes(
    chat_inputs, tmp_path, stop_signal, expected_code
):
    markers = tmp_path / "markers"
    markers.mkdir()
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        yaml.safe_dump(
            {"steps": ["HardFilter", {"tests.support.job_steps:StallsWhenRunning": {"marker_dir": str(markers)}}]}
        )
    )
    out, stdout, stderr = tmp_path / "out", tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    argv = [sys.executable, "-m", "twinkle_agentic.jobs.preprocess", "--input", str(chat_inputs), "--output", str(out)]
    argv += ["--config", str(config), "--num-cpus", "2", "--no-progress"]
    with open(stdout, "wb") as out_file, open(stderr, "wb") as err_file:
        proc = subprocess.Popen(
            argv, stdout=out_file, stderr=err_file, cwd=REPO_ROOT, start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's Ctrl-C finds it
        )  # fmt: skip
    try:
        wait_for(lambda: any(markers.iterdir()), proc, stderr, "batch in the stalling step")
        ray_processes = psutil.Process(proc.pid).children(recursive=True)
        assert ray_processes  # the embedded cluster: GCS, raylet, workers
        os.kill(proc.pid, stop_signal)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    _, alive = psutil.wait_procs(ray_processes, timeout=60)
    for survivor in alive:  # stopped here whatever the verdict, so a failure leaks no process
        survivor.kill()
    lines = stdout.read_text().strip().splitlines()
    assert code == expected_code, stderr.read_text()[-4000:]
    assert lines and lines[-1].startswith("preprocess: interrupted after "), lines[-3:]
    assert lines[-1].endswith(f"rerun with --overwrite; output: {out}")
    assert "Traceback" not in stderr.read_text()
    assert not (out / "stats.json").exists() and not (out / "report.md").exists()
    assert not alive, alive  # the embedded cluster ended with its driver
