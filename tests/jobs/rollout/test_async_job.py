"""The rollout job with ``mode: async``: a farm worker (Ray actor) running AsyncMultiTurnRollout over vLLM's
async engine, the demo tools on Ray Serve (127.0.0.1), two batches sharing the engine; and the summary's
engine figures, defined the same way in both modes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twinkle_agentic.actors.activity import Activity, ToolCallTiming
from twinkle_agentic.jobs.rollout.config import ConfigError, config_from_mapping
from twinkle_agentic.jobs.rollout.summary import RolloutTally, rollout_figures

from tests.support.farm_settings import job_settings

MODE_OPTIONS = {
    "tool_limits": {"get_weather": {"max_concurrency": 2, "timeout_s": 30}},
    "default_tool_limit": {"timeout_s": 30},
    "failure_policy": {"max_retries": 1},
}


def settings(tmp_path: Path, serve_port: int, **overrides) -> dict:
    """The farm tests' job config in async mode: the first six demo prompts (weather), the demo tools only,
    batches of three (two on the worker at once: inflight_per_worker=2)."""
    return {
        **job_settings(tmp_path, serve_port, limit=6),
        "mode": "async",
        "mode_options": MODE_OPTIONS,
        "batch_size": 3,
        "envs": [],
        **overrides,
    }


@pytest.mark.integration
@pytest.mark.vllm
def test_rollout_job_in_async_mode_end_to_end(ray_local, tmp_path, free_port):
    from twinkle_agentic.jobs.rollout.job import run

    summary = run(config_from_mapping(settings(tmp_path, free_port)).validate())
    figures = summary.figures()
    assert figures["trajectories"] == 6 and figures["stop_reasons"] == {"stop": 6}
    assert figures["tool_calls"] >= 6 and figures["tools"]["get_weather"]["errors"] == 0
    assert (
        0.0 <= figures["engine_idle_share"] <= 1.0 and 0.0 <= figures["engine_idle_waiting_for_tools"] <= 1.0
    )
    assert figures["engine_busy_share"] > 0 and figures["trajectory_retries"] == 0
    assert "engine idle" in summary.render()
    records = [json.loads(line) for line in Path(summary.files["journal"]).read_text().splitlines()]
    assert sorted(r["trajectory_id"] for r in records) == [f"weather-{i:03d}" for i in range(1, 7)]
    for record in records:
        assert record["rollout_attempts"] == 1 and record["worker"] == 0
        assert len(record["input_ids"]) == len(record["labels"]) and record["token_drift"] == 0
        assert sum(label != -100 for label in record["labels"]) == len(record["logprobs"]) > 0
        assert record["messages"][2]["role"] == "tool" and " C" in record["messages"][2]["content"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"mode_options": {"failure_policy": {"on_failure": "drop"}}}, "cannot be used in a farm"),
        ({"mode_options": {"tool_limits": {"get_weather": {"max_concurrency": 0}}}}, "max_concurrency"),
        ({"mode_options": {"timeouts": 1}}, "unknown key"),
        ({"mode": "sync"}, "mode 'sync' takes no mode_options"),
        ({"mode_options": ["x"]}, "mode_options must be a mapping"),
    ],
)
def test_bad_mode_options_are_refused_naming_the_setting(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        config_from_mapping(settings(tmp_path, 8000, **change)).validate()


def test_mode_options_reach_the_workers_and_the_resume_fingerprint(tmp_path):
    cfg = config_from_mapping(settings(tmp_path, 8000)).validate()
    assert (
        cfg.rollout_spec().mode_options == MODE_OPTIONS and cfg.fingerprint()["mode_options"] == MODE_OPTIONS
    )
    plain = config_from_mapping(settings(tmp_path, 8000, mode="sync", mode_options={})).validate()
    assert "mode_options" not in plain.fingerprint()  # journals of runs without options still resume


def test_engine_idle_share_is_wall_time_with_no_request_in_flight():
    tally = RolloutTally()
    activity = Activity(
        active_s=8.0, engine_busy_s=6.0, tool_wait_s=1.5, tool_calls=[ToolCallTiming("t", 0.1, True)]
    )
    tally.add([{"stop_reason": "stop", "rollout_attempts": 2}, {"stop_reason": "stop"}], activity, 10)
    figures = rollout_figures(tally, rollout_s=5.0, engines=2)
    assert figures["engine_idle_share"] == 0.4  # 1 - 6 / (2 engines x 5 s)
    assert (
        figures["engine_idle_waiting_for_tools"] == round(1.5 / 8.0, 4) and figures["trajectory_retries"] == 1
    )
