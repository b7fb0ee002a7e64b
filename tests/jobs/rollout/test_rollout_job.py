"""The rollout job end to end: interrupted and resumed (the second run as a ``ray job submit``
entrypoint on a real head), and the ``twinkle-agentic demo`` command.

Resume: run 1 is a driver process that joins the session's cluster and is SIGKILLed once its first
batch is in the journal (a crash: no cleanup runs). Run 2 is the same command submitted with
``ray job submit`` to a head started here on free ports (cluster.LocalHead, stopped by PID). It must
skip what run 1 finished and roll out only the rest: every trajectory exactly once.

The run is a GRPO rollout: two sampled trajectories per prompt (a group), scored by
``contains_ground_truth`` and ``picky`` (below), which fails one member once (its retry succeeds) and
every member of one group always (the group fails). Groups are written whole, so run 2 resumes by group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.support.farm_settings import REPO_ROOT, job_settings

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

JOURNAL = "trajectories.jsonl"
FLAKY_MEMBER = "weather-001/s1"  # its reward fails on the first attempt only
FAILING_GROUP = "calculator-001"  # every member's reward fails on every attempt


def picky(trajectory: dict) -> float:
    """A reward function (0.0) that raises for ``FLAKY_MEMBER``'s first attempt and all of ``FAILING_GROUP``."""
    if trajectory["trajectory_id"] == FLAKY_MEMBER or trajectory["prompt_id"] == FAILING_GROUP:
        raise RuntimeError(f"picky refuses {trajectory['trajectory_id']}")
    return 0.0


def complete_groups(ids: list[str], size: int) -> list[str]:
    """The ids of the groups (``<prompt>/s<k>``) with all ``size`` members among ``ids``, in order."""
    counts = Counter(i.rsplit("/", 1)[0] for i in ids)
    return [i for i in ids if counts[i.rsplit("/", 1)[0]] == size]


def journal_ids(output: Path) -> list[str]:
    """Trajectory ids of the journal's complete lines, in order."""
    path = output / JOURNAL
    if not path.exists():
        return []
    ids = []
    for line in path.read_text().split("\n")[:-1]:  # the text after the last newline may be torn
        if line.strip():
            ids.append(json.loads(line)["trajectory_id"])
    return ids


def wait_for_first_batch(proc: subprocess.Popen, output: Path, log: Path, timeout_s: float = 420) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if journal_ids(output):
            return
        if proc.poll() is not None:
            pytest.fail(f"run 1 exited ({proc.returncode}) before writing a batch:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)
    pytest.fail(f"run 1 wrote no batch within {timeout_s:.0f} s:\n{log.read_text()[-4000:]}")


def test_interrupted_job_resumes_under_ray_job_submit_without_loss_or_duplicates(ray_local, tmp_path):
    from ray import serve
    from twinkle_agentic.cluster import LocalHead
    from twinkle_agentic.cluster.auth import ray_environment

    from twinkle_agentic.net import free_port

    settings = job_settings(tmp_path, free_port(), limit=16)
    settings["samples_per_prompt"] = 2
    settings["sampling"] = {**settings["sampling"], "temperature": 0.8}
    settings["rewards"] = [
        {"function": "twinkle_agentic.rewards.builtin:contains_ground_truth"},
        {"function": "tests.jobs.rollout.test_rollout_job:picky"},
    ]
    config = tmp_path / "rollout.yaml"
    config.write_text(yaml.safe_dump(settings))
    output = Path(settings["output"])
    prompts = [f"{kind}-{i:03d}" for kind, n in (("weather", 10), ("calculator", 6)) for i in range(1, n + 1)]
    expected = [f"{p}/s{k}" for p in prompts for k in range(2)]

    # run 1: joins the session cluster; killed (SIGKILL, its whole process group) after the first batch
    log = tmp_path / "run1.log"
    gcs = ray_local.get_runtime_context().gcs_address
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "twinkle_agentic.jobs.rollout", "--config", str(config), "--address", gcs],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=ray_environment(), start_new_session=True,
        )  # fmt: skip
    try:
        wait_for_first_batch(proc, output, log)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        serve.shutdown()  # the killed driver could not remove its Serve apps from the session cluster
    done_by_run_1 = complete_groups(journal_ids(output), 2)  # a group the kill cut short is run again
    assert 0 < len(done_by_run_1) < len(expected), done_by_run_1
    assert len(set(done_by_run_1)) == len(done_by_run_1)

    # run 2: the same command as a Ray job on a fresh head; it resumes from the journal
    with LocalHead(num_cpus=4, object_store_memory=300 * 1024 * 1024, auth_mode="token") as head:
        result = subprocess.run(
            ["ray", "job", "submit", "--address", head.dashboard_url, "--working-dir", str(REPO_ROOT), "--",
             "twinkle-agentic", "rollout", "--config", str(config)],
            capture_output=True, text=True, env=head.env, timeout=600, cwd=REPO_ROOT,
        )  # fmt: skip
    logs = result.stdout + result.stderr
    assert result.returncode == 0, logs[-6000:]

    ids = journal_ids(output)
    assert Counter(ids) == Counter(expected), Counter(ids) - Counter(expected)  # all of them, each exactly once
    assert ids[: len(done_by_run_1)] == done_by_run_1  # run 1's batches kept as written
    summary = json.loads((output / "summary.json").read_text())
    assert summary["resumed_from_earlier_runs"] == len(done_by_run_1)
    assert summary["this_run"]["trajectories"] == len(expected) - len(done_by_run_1)
    assert summary["trajectories_in_output"] == len(expected)
    assert "embedded" not in summary["cluster"] and "4 CPUs" in summary["cluster"]  # ran on the submitted-to head
    assert f"{len(done_by_run_1)} resumed from an earlier run" in logs  # the job's printed summary
    groups: dict[str, list[dict]] = {}
    for line in (output / JOURNAL).read_text().splitlines():
        record = json.loads(line)
        assert record["stop_reason"] in {"stop", "length", "max_turns", "error"}
        assert len(record["input_ids"]) == len(record["labels"])
        assert record["trajectory_id"] == f"{record['group_id']}/s{record['sample_index']}"
        assert record["group_id"] == record["prompt_id"] and record["group_size"] == 2
        groups.setdefault(record["group_id"], []).append(record)
    for gid, members in groups.items():
        if members[0]["group_failed"]:
            assert all(m["group_failed"] and m["advantage"] is None for m in members), gid
            continue
        for member in members:
            assert 0.0 <= member["reward"] <= 1.0, member
            assert member["reward_components"] == {"contains_ground_truth": member["reward"], "picky": 0.0}
        assert abs(sum(m["advantage"] for m in members)) < 1e-6, gid  # advantages of a group sum to 0
        if members[0]["reward"] == members[1]["reward"]:
            assert [m["advantage"] for m in members] == [0.0, 0.0]
        else:
            assert sorted(abs(m["advantage"]) for m in members) == pytest.approx([1.0, 1.0], abs=1e-4)  # 2 samples: +-1
    flaky = {m["trajectory_id"]: m for m in groups["weather-001"]}
    assert not flaky[FLAKY_MEMBER]["group_failed"] and flaky[FLAKY_MEMBER]["member_attempts"] == 2
    assert all(m["group_failed"] and m["member_attempts"] == 2 for m in groups[FAILING_GROUP])
    assert "picky refuses calculator-001/s0/retry1" in groups[FAILING_GROUP][0]["group_error"]
    in_output = summary["groups_in_output"]
    assert in_output["groups"] == len(prompts) and in_output["failed_groups"] >= 1


def test_demo_command_runs_end_to_end(ray_local, tmp_path, capsys):
    from twinkle_agentic.cli import main

    code = main(["demo", "--prompts", "6", "--engines", "1", "--output", str(tmp_path / "demo"), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out[-4000:]
    assert "preprocess: read 444 rows -> kept" in out
    assert "rollout: 6 new trajectories" in out and "idle waiting for tools" in out and "tool calls" in out
    stats = json.loads((tmp_path / "demo" / "preprocess" / "stats.json").read_text())
    assert stats["kept"] + stats["dropped"] == stats["rows_read"] == 444
    records = [json.loads(line) for line in (tmp_path / "demo" / "rollout" / JOURNAL).read_text().splitlines()]
    assert sorted(r["trajectory_id"] for r in records) == [f"weather-{i:03d}" for i in range(1, 7)]
    summary = json.loads((tmp_path / "demo" / "rollout" / "summary.json").read_text())
    figures = summary["this_run"]
    assert figures["trajectories"] == 6 and figures["generated_tokens"] > 0
    assert 0 <= figures["engine_idle_waiting_for_tools"] <= 1 and figures["trajectories_per_s"] > 0
