"""GRPO groups in the rollout job: the greedy refusal, the ``groups:`` settings, whole groups in the
journal (an incomplete last group cut on resume), the typed Parquet columns, the loop that retries
failed members (a scripted farm, no cluster), and the job end to end on a real local Ray cluster
with the scripted engine (``tests.support.farm_fakes:ScriptedMode``) and real reward functions."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest
from twinkle_agentic.actors.activity import Activity
from twinkle_agentic.actors.driver import FarmBatch
from twinkle_agentic.actors.worker import error_trajectory
from twinkle_agentic.jobs.rollout.config import ConfigError, build_parser, config_from_mapping, resolve_config
from twinkle_agentic.jobs.rollout.job import Unfinished, _roll
from twinkle_agentic.jobs.rollout.journal import Journal
from twinkle_agentic.jobs.rollout.prompts import to_trajectories
from twinkle_agentic.jobs.rollout.summary import RolloutTally, rollout_figures

from twinkle_agentic.rewards import RewardSpec
from twinkle_agentic.rollout.groups import GroupConfig

FINGERPRINT = {"model": "m"}


def write_prompts(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- config ------------------------------------------------------------------------------------------


def test_several_greedy_samples_per_prompt_are_refused_naming_the_fix(tmp_path, capsys):
    data = {"prompts": "p.jsonl", "output": str(tmp_path), "samples_per_prompt": 4}
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data).validate()
    text = str(info.value)
    assert "samples_per_prompt=4 with greedy sampling (sampling.temperature 0" in text
    assert "set sampling.temperature > 0" in text and "--sampling.temperature 1.0" in text
    with pytest.raises(ConfigError, match="greedy"):  # an explicit 0 too
        config_from_mapping({**data, "sampling": {"temperature": 0.0}}).validate()
    config_from_mapping({**data, "sampling": {"temperature": 1.0}}).validate()
    config_from_mapping({**data, "samples_per_prompt": 1}).validate()  # one greedy sample is fine

    from twinkle_agentic.jobs.rollout import main

    prompts = write_prompts(tmp_path / "p.jsonl", [{"prompt": "hi"}])
    argv = ["--prompts", str(prompts), "--output", str(tmp_path / "out"), "--samples-per-prompt", "4"]
    assert main([*argv, "--dry-run"]) == 2  # refused before anything runs, a dry run included
    assert "--sampling.temperature 1.0" in capsys.readouterr().err
    assert main([*argv, "--sampling.temperature", "1.0", "--dry-run"]) == 0
    assert "# 4 trajectories from" in capsys.readouterr().out


def test_group_and_reward_settings_reach_the_fingerprint(tmp_path):
    argv = ["--prompts", "p", "--output", str(tmp_path), "--samples-per-prompt", "2", "--sampling.temperature", "0.8",
            "--groups.advantage", "dr_grpo", "--groups.max_member_retries", "2", "--groups.tool_errors_fail", "true"]  # fmt: skip
    cfg = resolve_config(build_parser().parse_args(argv))
    assert cfg.groups == GroupConfig(advantage="dr_grpo", max_member_retries=2, tool_errors_fail=True)
    assert cfg.fingerprint()["groups"] == {"advantage": "dr_grpo", "epsilon": 1e-6, "tool_errors_fail": True,
                                           "max_member_retries": 2}  # fmt: skip
    assert config_from_mapping(cfg.to_dict()) == cfg
    single = config_from_mapping({"prompts": "p", "output": "o"}).validate()
    assert "groups" not in single.fingerprint()  # one sample, default settings: earlier journals still resume
    tuned = config_from_mapping({"prompts": "p", "output": "o", "groups": {"epsilon": 0.01}}).validate()
    assert tuned.fingerprint()["groups"]["epsilon"] == 0.01
    scored = config_from_mapping(
        {"prompts": "p", "output": "o", "rewards": [{"function": "twinkle_agentic.rewards.builtin:contains_ground_truth"}]}
    ).validate()
    (reward,) = scored.fingerprint()["rewards"]  # a changed reward function changes what the journal holds
    assert reward["function"] == "twinkle_agentic.rewards.builtin:contains_ground_truth" and reward["weight"] == 1.0
    in_python = dataclasses.replace(scored, rollout=dataclasses.replace(scored.rollout, rewards=[RewardSpec(reward_from_row)]))
    assert in_python.fingerprint()["rewards"][0]["function"] == "tests.jobs.rollout.test_groups_job:reward_from_row"
    json.dumps(in_python.fingerprint())  # what run.json holds
    assert "rewards" not in single.fingerprint()
    with pytest.raises(ConfigError, match="groups.advantage must be one of"):
        config_from_mapping({"prompts": "p", "output": "o", "groups": {"advantage": "ppo"}}).validate()
    with pytest.raises(ConfigError, match=r"groups: unknown key\(s\) \['retries'\]"):
        config_from_mapping({"prompts": "p", "output": "o", "groups": {"retries": 1}})


def test_every_trajectory_has_its_group():
    rows = [{"id": "a", "prompt": "x"}, {"prompt": "y"}]
    for samples in (1, 3):
        planned = to_trajectories(rows, samples)
        assert Counter(t["group_id"] for t in planned) == {"a": samples, planned[-1]["prompt_id"]: samples}
        assert all(t["group_size"] == samples and t["group_id"] == t["prompt_id"] for t in planned)


# -- journal -----------------------------------------------------------------------------------------


def member(tid: str, gid: str, size: int, **extra) -> dict:
    return {"trajectory_id": tid, "prompt_id": gid, "group_id": gid, "group_size": size, "stop_reason": "stop",
            "input_ids": [1, 2], "labels": [-100, 2], "logprobs": [-0.5], **extra}  # fmt: skip


def test_resume_cuts_an_incomplete_last_group_and_runs_it_again_whole(tmp_path):
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    journal.append([member("a/s0", "a", 2), member("a/s1", "a", 2)])
    journal.append([member("solo", "solo", 1)])
    journal.close()
    with open(journal.path, "ab") as handle:  # died mid-write of group b: one whole line, one torn
        handle.write((json.dumps(member("b/s0", "b", 3)) + "\n").encode() + b'{"trajectory_id": "b/s1", "gro')
    journal, state = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    assert state.truncated_bytes > 0 and state.cut_members == 1
    assert state.ids == {"a/s0", "a/s1", "solo"} and state.groups == {"a", "solo"}
    assert [r["trajectory_id"] for r in read_journal(Path(journal.path))] == ["a/s0", "a/s1", "solo"]
    planned = [[member(f"{g}/s{k}", g, n) for k in range(n)] for g, n in (("a", 2), ("b", 3))]
    todo = Unfinished(planned, state.ids)
    assert [t["trajectory_id"] for t in todo] == ["b/s0", "b/s1", "b/s2"] and todo.skipped == 2
    state.ids.add("b/s0")
    assert list(Unfinished(planned, state.ids)) == planned[1]  # a group is never run in part


def test_journal_without_group_keys_resumes_by_id(tmp_path):
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    journal.append([{"trajectory_id": "x", "stop_reason": "stop"}, {"trajectory_id": "y", "stop_reason": "stop"}])
    journal.close()
    _, state = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    assert state.ids == {"x", "y"} and not state.cut_members and not state.groups


def test_parquet_has_typed_group_and_reward_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    scored = member("g/s0", "g", 2, reward=0.75, reward_components={"exact": 1.0, "env:guess": -0.25},
                    reward_error=None, advantage=1.0, group_failed=False, group_error=None, member_attempts=1)  # fmt: skip
    failed = member("g/s1", "g", 2, reward=None, reward_components={}, reward_error="RuntimeError: x",
                    advantage=None, group_failed=True, group_error="member g/s1: reward failed", member_attempts=2)  # fmt: skip
    journal.append([scored, failed])
    journal.close()
    table = pq.read_table(journal.write_parquet())
    types = {name: table.schema.field(name).type for name in table.schema.names}
    assert types["group_id"] == pa.string() and types["group_size"] == pa.int32()
    assert types["reward"] == types["advantage"] == pa.float64() and types["group_failed"] == pa.bool_()
    assert types["reward_components"] == pa.map_(pa.string(), pa.float64()) and types["reward_error"] == pa.string()
    first, second = table.to_pylist()
    assert first["reward_components"] == [("exact", 1.0), ("env:guess", -0.25)] and first["advantage"] == 1.0
    assert second["reward"] is None and second["reward_error"] == "RuntimeError: x" and second["group_failed"] is True
    assert second["member_attempts"] == 2 and first["extra"] is None and first["group_size"] == 2


# -- the job's loop, on a scripted farm ----------------------------------------------------------------


class ScriptedFarm:
    """Stands in for RolloutFarm.run: batches of two, results in reverse order (out of order), each
    trajectory scored by ``score(trajectory)`` (a reward, None, or an exception: a reward error)."""

    def __init__(self, score, explode: set[str] = frozenset()):
        self.score, self.explode, self.runs, self.restarts = score, explode, [], 0

    def run(self, todo):
        self.runs.append([t["trajectory_id"] for t in todo])
        items = list(reversed(todo))
        for i in range(0, len(items), 2):
            out = []
            for t in items[i : i + 2]:
                if t["trajectory_id"] in self.explode:
                    out.append(error_trajectory(t, "RuntimeError: engine broke"))
                    continue
                result = {**t, "stop_reason": "stop", "input_ids": [1, 2, 3], "labels": [-100, 2, 3]}
                try:
                    result.update(reward=self.score(t), reward_error=None)
                except Exception as exc:
                    result.update(reward=None, reward_error=f"{type(exc).__name__}: {exc}")
                out.append(result)
            yield FarmBatch(out, Activity(active_s=1.0), 2 * len(out), 0, 1)


def job_config(tmp_path: Path, **groups) -> object:
    return config_from_mapping(
        {"prompts": "p", "output": str(tmp_path), "samples_per_prompt": 3, "sampling": {"temperature": 1.0},
         "progress": False, "groups": groups}  # fmt: skip
    ).validate()


def test_the_loop_retries_failed_members_and_writes_whole_groups(tmp_path):
    cfg = job_config(tmp_path, epsilon=0.0)
    todo = to_trajectories([{"id": "ok", "prompt": "x"}, {"id": "flaky", "prompt": "y"}, {"id": "bad", "prompt": "z"}], 3)

    def score(t):
        if t["group_id"] == "bad" and t["sample_index"] == 0:
            raise ValueError("grader broke")
        return float(t["sample_index"] == 2)

    farm = ScriptedFarm(score, explode={"flaky/s1"})  # flaky/s1 fails once; its retry runs as flaky/s1/retry1
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    tally = RolloutTally()
    _roll(cfg, farm, todo, journal, tally)
    journal.close()
    assert len(farm.runs) == 2 and sorted(farm.runs[1]) == ["bad/s0/retry1", "flaky/s1/retry1"]  # one retry round
    records = read_journal(Path(journal.path))
    assert Counter(r["trajectory_id"] for r in records) == Counter(t["trajectory_id"] for t in todo)  # each once
    by_group: dict[str, list[dict]] = {}
    for record in records:
        by_group.setdefault(record["group_id"], []).append(record)
    lines = [r["group_id"] for r in records]
    assert all(len(set(lines[i : i + 3])) == 1 for i in range(0, 9, 3))  # each group's lines together
    # rewards 0, 0, 1: mean 1/3, population std sqrt(2)/3
    for gid in ("ok", "flaky"):
        group = sorted(by_group[gid], key=lambda r: r["sample_index"])
        assert [r["advantage"] for r in group] == pytest.approx([-2**-0.5, -2**-0.5, 2**0.5])
        assert not any(r["group_failed"] for r in group)
    assert [r["member_attempts"] for r in sorted(by_group["flaky"], key=lambda r: r["sample_index"])] == [1, 2, 1]
    bad = by_group["bad"]
    assert all(r["group_failed"] and r["advantage"] is None for r in bad)
    assert {r["group_error"] for r in bad} == {"member bad/s0: reward failed: ValueError: grader broke"}
    figures = rollout_figures(tally, rollout_s=1.0, engines=1)
    assert figures["trajectories"] == 9 and figures["groups"] == 3 and figures["failed_groups"] == 1
    assert figures["member_retries"] == 2 and figures["scored"] == 8  # bad/s0 has no reward
    assert figures["mean_reward"] == pytest.approx(3 / 8, abs=1e-6)
    assert figures["reward_std"] == pytest.approx((3 / 8 * 5 / 8) ** 0.5, abs=1e-6)
    assert figures["generated_tokens"] == 2 * 11  # retried attempts' tokens are work done too


def test_with_no_retries_a_failed_member_fails_its_group_in_one_round(tmp_path):
    cfg = job_config(tmp_path, max_member_retries=0, advantage="dr_grpo")
    todo = to_trajectories([{"id": "p", "prompt": "x"}], 3)
    farm = ScriptedFarm(lambda t: 1.0, explode={"p/s2"})
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    tally = RolloutTally()
    _roll(cfg, farm, todo, journal, tally)
    journal.close()
    records = read_journal(Path(journal.path))
    assert len(farm.runs) == 1 and len(records) == 3 and all(r["group_failed"] for r in records)
    assert tally.failed_groups == 1 and tally.member_retries == 0


# -- end to end on Ray: the real farm and workers, a scripted engine, real reward functions ------------


def reward_from_row(trajectory: dict) -> float:
    """A reward function (named by import path in the job config): the row's ``scores`` at this sample."""
    return float(trajectory["scores"][trajectory["sample_index"]])


SCRIPTED_JOB = {
    "mode": "tests.support.farm_fakes:ScriptedMode",
    "engine": {"num_cpus": 0.1},
    "samples_per_prompt": 3,
    "sampling": {"temperature": 1.0},
    "batch_size": 2,
    "engines": 1,
    "progress": False,
    "rewards": [{"function": "tests.jobs.rollout.test_groups_job:reward_from_row", "name": "row"}],
}


@pytest.mark.integration
def test_groups_end_to_end_on_ray_with_retries_a_failed_group_and_resume(ray_local, tmp_path):
    from twinkle_agentic.jobs.rollout.job import run

    prompts = write_prompts(
        tmp_path / "prompts.jsonl",
        [
            {"id": "good", "prompt": "a", "scores": [1, 0, 0]},
            {"id": "flaky", "prompt": "b", "scores": [0, 1, 1], "explode_ids": ["flaky/s0"]},  # its retry succeeds
            {"id": "dead", "prompt": "c", "scores": [1, 1, 1], "explode": True},  # every member, every attempt
            {"id": "single", "prompt": "d", "scores": [1, 1, 1], "explode_ids": ["single/s1", "single/s1/retry1"]},
        ],
    )
    settings = {**SCRIPTED_JOB, "prompts": str(prompts), "output": str(tmp_path / "out"), "groups": {"epsilon": 0.0}}
    summary = run(config_from_mapping(settings).validate())
    figures = summary.figures()
    assert figures["trajectories"] == 12 and figures["groups"] == 4 and figures["failed_groups"] == 2
    assert figures["member_retries"] == 1 + 3 + 1  # flaky/s0, dead/s0..s2, single/s1
    records = read_journal(Path(summary.files["journal"]))
    assert sorted(r["trajectory_id"] for r in records) == sorted(f"{p}/s{k}" for p in ("good", "flaky", "dead", "single") for k in range(3))
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(record["group_id"], []).append(record)
    for gid, members in groups.items():
        members.sort(key=lambda r: r["sample_index"])
        assert all(m["group_size"] == 3 for m in members), gid
    # good: rewards 1, 0, 0 -> mean 1/3, population std sqrt(2)/3: advantages sqrt(2), -1/sqrt(2) twice
    assert [m["advantage"] for m in groups["good"]] == pytest.approx([2**0.5, -(2**-0.5), -(2**-0.5)])
    assert [m["reward_components"] for m in groups["good"]] == [{"row": 1.0}, {"row": 0.0}, {"row": 0.0}]
    flaky = groups["flaky"]
    assert [m["member_attempts"] for m in flaky] == [2, 1, 1] and [m["advantage"] for m in flaky] == pytest.approx([-(2**0.5), 2**-0.5, 2**-0.5])
    for gid in ("dead", "single"):
        assert all(m["group_failed"] and m["advantage"] is None for m in groups[gid]), gid
    assert groups["dead"][0]["stop_reason"] == "error" and "cannot roll out dead/s0/retry1" in groups["dead"][0]["error"]
    assert groups["single"][0]["reward"] == 1.0 and groups["single"][0]["stop_reason"] == "stop"
    assert groups["single"][0]["group_error"].startswith("member single/s1: rollout failed:")
    written = json.loads(Path(summary.files["summary"]).read_text())
    assert written["groups_in_output"]["groups"] == 4 and written["groups_in_output"]["failed_groups"] == 2
    assert written["this_run"]["failed_groups"] == 2 and "groups         4 (2 failed, 5 member retries)" in summary.render()

    # a crash that tore the last group: the next run cuts it and rolls that whole group out again
    journal = Path(summary.files["journal"])
    lines = journal.read_text().splitlines(keepends=True)
    last_group = json.loads(lines[-1])["group_id"]
    journal.write_text("".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    again = run(config_from_mapping(settings).validate())
    assert again.figures()["trajectories"] == 3 and again.resumed == 9 and again.figures()["groups"] == 1
    records = read_journal(journal)
    assert len(records) == 12 and len({r["trajectory_id"] for r in records}) == 12
    assert [r["group_id"] for r in records[-3:]] == [last_group] * 3
