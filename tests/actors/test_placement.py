"""Placement of engines (``actors/placement.py``), computed without Ray: the bundles and strategy of a
multi-GPU engine's placement group, the plain resources of a one-GPU engine, the worker's actor
options and the settings' checks."""

from __future__ import annotations

import pytest
from twinkle_agentic.actors.config import EngineConfig, FarmConfigError
from twinkle_agentic.actors.placement import ACCELERATOR_AMOUNT, default_strategy, engine_placement
from twinkle_agentic.actors.worker import RolloutWorker

from twinkle_agentic.sampler.engine import EngineConfigError


def test_a_tensor_parallel_engine_gets_a_worker_bundle_and_one_gpu_bundle_per_shard_on_one_node():
    cfg = EngineConfig("m", num_cpus=2, num_gpus=8, tensor_parallel_size=8, accelerator_type="H100", resources={"rack": 1})
    placement = engine_placement(cfg.validate())
    shard = {"GPU": 1.0, "rack": 1.0, "accelerator_type:H100": ACCELERATOR_AMOUNT}
    assert placement.bundles == ({"CPU": 2.0}, *([shard] * 8))
    assert placement.strategy == "STRICT_PACK" and placement.uses_group
    assert placement.actor_options() == {"num_cpus": 2, "num_gpus": 0.0}  # the GPUs are the shards'
    assert cfg.sampler_kwargs()["engine_kwargs"] == {"distributed_executor_backend": "ray"}


def test_pipeline_stages_default_to_pack_and_count_every_shard():
    cfg = EngineConfig("m", num_gpus=8, tensor_parallel_size=4, pipeline_parallel_size=2).validate()
    placement = cfg.placement()
    assert cfg.world_size == 8 and len(placement.bundles) == 9 and placement.strategy == "PACK"
    assert default_strategy(1, 1) == "STRICT_PACK" and default_strategy(2, 3) == "PACK"
    spread = EngineConfig("m", num_gpus=4, pipeline_parallel_size=4, placement_strategy="STRICT_SPREAD").placement()
    assert spread.strategy == "STRICT_SPREAD"
    # a user's own executor choice wins over the default
    mine = EngineConfig("m", num_gpus=2, tensor_parallel_size=2, engine_kwargs={"distributed_executor_backend": "mp"})
    assert mine.sampler_kwargs()["engine_kwargs"] == {"distributed_executor_backend": "mp"}


def test_a_one_gpu_engine_has_no_group_but_keeps_accelerator_type_and_resources():
    cfg = EngineConfig("m", num_gpus=1, accelerator_type="L4", resources={"spot": 0.5})
    placement = cfg.placement()
    assert not placement.uses_group and placement.strategy is None
    assert placement.actor_options() == {
        "num_cpus": 1.0, "num_gpus": 1, "resources": {"spot": 0.5, "accelerator_type:L4": ACCELERATOR_AMOUNT},
    }
    assert "distributed_executor_backend" not in cfg.sampler_kwargs()["engine_kwargs"]
    cpu = EngineConfig("m", resources={"spot": 1}).placement()
    assert cpu.actor_options() == {"num_cpus": 1.0, "num_gpus": 0.0, "resources": {"spot": 1.0}}


def test_worker_ray_options_carry_the_group_spec_the_driver_makes_groups_from():
    options = RolloutWorker.ray_options(EngineConfig("m", num_gpus=2, tensor_parallel_size=2, accelerator_type="A100"))
    shard = {"GPU": 1.0, "accelerator_type:A100": ACCELERATOR_AMOUNT}
    assert options["placement_group"] == {"bundles": [{"CPU": 1.0}, shard, shard], "strategy": "STRICT_PACK"}
    assert (options["num_cpus"], options["num_gpus"]) == (1.0, 0.0) and "resources" not in options
    single = RolloutWorker.ray_options(EngineConfig("m", num_gpus=1, accelerator_type="A100"))
    assert "placement_group" not in single and single["num_gpus"] == 1
    assert single["resources"] == {"accelerator_type:A100": ACCELERATOR_AMOUNT}


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"num_gpus": 4, "tensor_parallel_size": 2, "pipeline_parallel_size": 3}, "needs num_gpus=6"),
        ({"num_gpus": 2, "tensor_parallel_size": 2, "num_cpus": 0}, "num_cpus > 0"),
        ({"num_gpus": 2, "tensor_parallel_size": 2, "placement_strategy": "SPREAD"}, "split a tensor-parallel"),
        ({"num_gpus": 2, "pipeline_parallel_size": 2, "placement_strategy": "pack"}, "placement_strategy must be one"),
        ({"num_gpus": 1, "placement_strategy": "PACK"}, "applies to engines of several GPUs"),
        ({"accelerator_type": "H100"}, "give num_gpus > 0"),
        ({"num_gpus": 1, "accelerator_type": "accelerator_type:H100"}, "GPU model as Ray names it"),
        ({"num_gpus": 1, "resources": {"GPU": 1}}, "use num_cpus / num_gpus"),
        ({"num_gpus": 1, "resources": {"accelerator_type:H100": 1}}, "as accelerator_type: H100"),
        ({"num_gpus": 1, "resources": {"rack": 0}}, "must be a number > 0"),
        ({"num_gpus": 1, "resources": ["rack"]}, "resources must be a mapping"),
    ],
)
def test_bad_placement_settings_are_refused_naming_the_fix(settings, message):
    with pytest.raises(FarmConfigError, match=message):
        EngineConfig("m", **settings).validate()


def test_pipeline_parallel_size_is_a_vllm_argument():
    with pytest.raises(EngineConfigError, match="pipeline_parallel_size must be an integer >= 1"):
        EngineConfig("m", pipeline_parallel_size=0)
    kwargs = EngineConfig("m", num_gpus=2, pipeline_parallel_size=2).to_engine_kwargs()
    assert kwargs["pipeline_parallel_size"] == 2 and kwargs["tensor_parallel_size"] == 1
