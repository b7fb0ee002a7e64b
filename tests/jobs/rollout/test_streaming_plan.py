"""The rollout job's driver side streams: the prompts file checked in one pass and named in a second,
the journal's ids held as 16-byte keys, whole groups already written skipped as the plan is read, the
farm fed a generator, rewards tallied as running figures. No cluster: a scripted farm stands in."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from twinkle_agentic.actors.activity import Activity
from twinkle_agentic.actors.driver import FarmBatch
from twinkle_agentic.jobs.rollout.config import config_from_mapping
from twinkle_agentic.jobs.rollout.job import Unfinished, _roll, plan
from twinkle_agentic.jobs.rollout.journal import Journal
from twinkle_agentic.jobs.rollout.keyset import KeySet
from twinkle_agentic.jobs.rollout.prompts import (
    MAX_REPORTED_PROBLEMS,
    PromptError,
    check_prompts,
    load_prompts,
    to_trajectories,
)
from twinkle_agentic.jobs.rollout.summary import RewardStats, RolloutTally, reward_figures

FINGERPRINT = {"model": "m"}

ROWS = [
    {"prompt": "same"},
    {"id": "a", "prompt": "x"},
    {"prompt": "same"},  # a repeat: ~2
    {"messages": [{"role": "user", "content": "m"}], "toolsets": ["t"], "user_data": {"k": 1}},
    {"id": 7, "prompt": "y"},
    {"prompt": "same"},  # ~3
    {"messages": [{"role": "user", "content": "m"}], "toolsets": ["t"], "user_data": {"k": 1}},  # ~2
    {"prompt": "other"},
]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def ids(trajectories) -> list[tuple[str, str, int, int]]:
    return [(t["trajectory_id"], t["group_id"], t["sample_index"], t["group_size"]) for t in trajectories]


@pytest.mark.parametrize("samples", [1, 3])
@pytest.mark.parametrize("limit", [None, 6])
def test_the_streamed_plan_names_every_trajectory_as_the_list_plan_does(tmp_path, samples, limit):
    path = write_jsonl(tmp_path / "p.jsonl", ROWS)
    listed = to_trajectories(load_prompts(str(path), limit), samples)
    checked = check_prompts(str(path), limit, samples)
    streamed = list(checked.trajectories())
    assert streamed == listed  # every key, ids, order and groups included
    assert len(checked) == len(listed) == (limit or len(ROWS)) * samples
    assert [len(g) for g in checked.groups()] == [samples] * (limit or len(ROWS))
    assert len(checked.repeated) == (1 if limit else 2)  # base ids that repeat: only they are counted by string
    pids = [t["prompt_id"] for t in streamed if t["sample_index"] == 0]
    base = pids[0]
    assert pids[2] == f"{base}~2" and pids[1] == "a" and pids[4] == "7"
    if limit is None:
        assert pids[5] == f"{base}~3" and pids[6] == f"{pids[3]}~2"


def test_a_parquet_file_streams_to_the_same_plan(tmp_path):
    rows = [{"id": f"r{i}", "messages": json.dumps([{"role": "user", "content": str(i)}])} for i in range(10_000)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet", row_group_size=1000)
    path = str(tmp_path / "p.parquet")
    checked = check_prompts(path, samples_per_prompt=2)
    assert list(checked.trajectories()) == to_trajectories(load_prompts(path), 2)
    assert len(checked) == 20_000


def test_the_check_pass_lists_bad_rows_and_refuses_repeated_ids(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "ok"}, "not json", *([{"prompt": ""}] * 12)])
    with pytest.raises(PromptError) as info:
        check_prompts(str(bad))
    text = str(info.value)
    assert "13 prompt row(s) cannot be rolled out" in text and "line 2: not JSON" in text
    assert len(re.findall(r"line \d+: ", text)) == MAX_REPORTED_PROBLEMS and "(and 3 more)" in text
    repeated = write_jsonl(tmp_path / "ids.jsonl", [{"id": 1, "prompt": "x"}, {"id": "b", "prompt": "y"}, {"id": "1", "prompt": "z"}])
    with pytest.raises(PromptError, match=r"prompt ids must be unique; repeated: \['1'\]"):
        check_prompts(str(repeated))
    assert len(check_prompts(str(repeated), limit=2)) == 2  # the repeat is past the limit
    with pytest.raises(PromptError, match="holds no prompts"):
        check_prompts(str(write_jsonl(tmp_path / "empty.jsonl", [])))


def test_a_file_changed_between_the_passes_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", ROWS[:3])
    checked = check_prompts(str(path))
    write_jsonl(path, ROWS[:3] + [{"prompt": "new"}])
    with pytest.raises(PromptError, match="changed after it was checked"):
        list(checked.trajectories())
    write_jsonl(path, ROWS[:2] + [{"prompt": ""}])
    with pytest.raises(PromptError, match=r"changed after it was checked \(line 3\)"):
        list(checked.trajectories())


def test_the_job_plan_names_rows_asking_for_what_the_config_does_not_serve(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a"}, {"prompt": "b", "envs": "maze"}, {"prompt": "c", "toolsets": ["x"]}])
    cfg = config_from_mapping({"prompts": str(path), "output": str(tmp_path / "out")}).validate()
    with pytest.raises(PromptError) as info:
        plan(cfg)
    text = str(info.value)
    assert "2 prompt row(s)" in text and "line 2: asks for envs ['maze'], which this config does not serve" in text
    assert "line 3: asks for toolsets ['x']" in text


def member(tid: str, gid: str, size: int, reward: float = 1.0) -> dict:
    return {"trajectory_id": tid, "group_id": gid, "group_size": size, "stop_reason": "stop", "reward": reward}


def test_resume_skips_whole_groups_in_the_compact_done_set_and_reruns_a_partial_one(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", ROWS)
    checked = check_prompts(str(path), samples_per_prompt=2)
    planned = list(checked.groups())
    journal, _ = Journal.open(str(tmp_path / "out"), FINGERPRINT, overwrite=False)
    for group in (planned[0], planned[2], planned[5]):  # "same", "same~2", "same~3"
        journal.append([member(t["trajectory_id"], t["group_id"], 2) for t in group])
    journal.close()
    _, state = Journal.open(str(tmp_path / "out"), FINGERPRINT, overwrite=False)
    assert isinstance(state.ids, KeySet) and len(state.ids) == 6 and state.ids.nbytes == 6 * 16
    assert len(state.groups) == 3 and (state.rewards.count, state.rewards.mean) == (6, 1.0)
    todo = Unfinished(checked.groups(), state.ids)
    left = list(todo)
    assert left == [t for i, g in enumerate(planned) if i not in (0, 2, 5) for t in g]
    assert todo.skipped == 6
    state.ids.add(planned[1][0]["trajectory_id"])  # one member of group "a": the group still runs whole
    assert [t["group_id"] for t in Unfinished(checked.groups(), state.ids)].count("a") == 2


def test_a_journal_line_written_twice_is_counted_once(tmp_path):
    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    journal.append([member("x", "x", 1, 0.0), member("y", "y", 1, 1.0)])
    journal.append([member("x", "x", 1, 0.0)])  # joined by hand, say
    journal.close()
    _, state = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    assert state.ids == {"x", "y"} and state.stop_reasons == {"stop": 2} and state.rewards.count == 2
    assert state.groups == {"x", "y"} and state.ids != {"x"} and state.ids != {"x", "z"}


class EchoFarm:
    """Stands in for RolloutFarm.run: reads its input lazily, two at a time, and answers at once;
    records how many trajectories it had read before each answer."""

    restarts = 0

    def __init__(self):
        self.read = 0
        self.read_at_answer: list[int] = []

    def run(self, todo):
        items = iter(todo)
        while True:
            batch = []
            for t in items:
                self.read += 1
                batch.append(t)
                if len(batch) == 2:
                    break
            if not batch:
                return
            self.read_at_answer.append(self.read)
            out = [{**t, "stop_reason": "stop", "reward": float(t["sample_index"])} for t in batch]
            yield FarmBatch(out, Activity(), len(out), 0, 1)


def test_the_job_loop_feeds_the_farm_a_generator_and_writes_groups_as_they_complete(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{k: v for k, v in r.items() if k != "toolsets"} for r in ROWS])
    cfg = config_from_mapping(
        {"prompts": str(path), "output": str(tmp_path / "out"), "samples_per_prompt": 2,
         "sampling": {"temperature": 1.0}, "progress": False}  # fmt: skip
    ).validate()
    checked = plan(cfg)
    journal, state = Journal.open(cfg.output, FINGERPRINT, overwrite=False)
    farm, tally = EchoFarm(), RolloutTally()
    _roll(cfg, farm, Unfinished(checked.groups(), state.ids), journal, tally, len(checked))
    journal.close()
    assert farm.read_at_answer == list(range(2, 17, 2))  # never read ahead of what it answered
    written = [json.loads(line) for line in Path(journal.path).read_text().splitlines()]
    assert [r["trajectory_id"] for r in written] == [t["trajectory_id"] for t in checked.trajectories()]
    assert tally.groups == 8 and isinstance(tally.rewards, RewardStats)
    assert reward_figures(tally.rewards) == {"scored": 16, "mean_reward": 0.5, "reward_std": 0.5}


def test_reward_stats_match_the_two_pass_figures():
    values = [0.1 * i for i in range(1, 200)] + [3.0] * 50
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    figures = reward_figures(values)
    assert figures["scored"] == len(values)
    assert figures["mean_reward"] == pytest.approx(mean, abs=1e-6) and figures["reward_std"] == pytest.approx(std, abs=1e-6)
    assert reward_figures(RewardStats.of([2.0, 2.0, 2.0])) == {"scored": 3, "mean_reward": 2.0, "reward_std": 0.0}


def traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_streaming_a_plan_holds_bytes_not_rows_per_prompt(tmp_path):
    """Four times the prompts (both files larger than the reader's blocks): the check pass's peak grows
    by its 8-byte keys (and NumPy's sort of them), the naming pass's not at all: nowhere near the
    ~1 KB a prompt's trajectory dict costs."""
    small, large = 6_000, 24_000
    for n in (small, large):
        write_jsonl(tmp_path / f"{n}.jsonl", [{"prompt": f"question {i} " + "x" * 400} for i in range(n)])

    def check(n):
        return lambda: check_prompts(str(tmp_path / f"{n}.jsonl"))

    def stream(n):
        checked = check_prompts(str(tmp_path / f"{n}.jsonl"))
        return lambda: sum(1 for _ in checked.trajectories())

    check_growth = traced_peak(check(large)) - traced_peak(check(small))
    stream_growth = traced_peak(stream(large)) - traced_peak(stream(small))
    assert check_growth < 64 * (large - small)
    assert stream_growth < 64 * 1024  # a constant: no per-prompt state


def test_the_output_figures_add_this_runs_tally_to_the_journals_start(tmp_path):
    """What ``run`` reports for the whole output without reading the journal again equals a re-read."""
    from twinkle_agentic.jobs.rollout.job import in_output

    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    journal.append([member("a/s0", "a", 2, 0.0), member("a/s1", "a", 2, 1.0)])
    journal.close()
    journal, state = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    tally = RolloutTally()
    for gid, rewards, failed in (("b", [0.5, 2.0], False), ("c", [1.0, 1.0], True)):
        group = [{**member(f"{gid}/s{k}", gid, 2, r), "group_failed": failed, "policy_version": 3} for k, r in enumerate(rewards)]
        journal.append(group)
        tally.add_group(group)
    journal.close()
    derived, reread = in_output(journal, state, tally, reread=False), in_output(journal, state, tally, reread=True)
    rewards = derived.pop("rewards_in_output"), reread.pop("rewards_in_output")
    assert derived == reread == {
        "total_in_output": 6, "stop_reasons_in_output": {"stop": 6}, "policy_versions_in_output": {"none": 2, "3": 4},
        "groups_in_output": 3, "failed_groups_in_output": 1,
    }  # fmt: skip
    assert [reward_figures(r) for r in rewards] == [reward_figures([0.0, 1.0, 0.5, 2.0, 1.0, 1.0])] * 2
    assert RewardStats().merged(RewardStats()) == RewardStats()
