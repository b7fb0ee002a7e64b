"""Pure parts of the transfer-group path: the bucket plan both sides cut a broadcast by, the engine
setting that opens vLLM's transfer engine, and the update a trainer's metadata becomes."""

from __future__ import annotations

import pytest
from twinkle_agentic.actors import EngineConfig

from twinkle_agentic.errors import ConfigError
from twinkle_agentic.sampler.engine import VLLMEngineConfig
from twinkle_agentic.sampler.weights import RECEIVE_TRANSFER, transfer_update


def test_buckets_hold_aligned_views_and_a_large_tensor_alone():
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm")
    from twinkle_agentic.sampler.transfer import ALIGN, bucket_plan, bucket_size

    dtypes = [torch.float32, torch.bfloat16, torch.float32, torch.float32]
    shapes = [[3], [5], [100], [2, 2]]
    plan = bucket_plan(dtypes, shapes, bucket_bytes=256)
    assert [[s.index for s in b] for b in plan] == [[0, 1], [2], [3]]  # 400 bytes: a bucket of its own
    assert [(s.offset, s.nbytes) for s in plan[0]] == [(0, 12), (ALIGN, 10)]
    assert bucket_size(plan[0]) == ALIGN + 10 and bucket_size(plan[1]) == 400
    buffer = torch.zeros(bucket_size(plan[0]), dtype=torch.uint8)
    view = buffer[plan[0][1].offset : plan[0][1].offset + plan[0][1].nbytes].view(torch.bfloat16)
    assert view.shape == (5,)


def test_weight_transfer_setting_becomes_vllms_config_and_is_checked():
    config = VLLMEngineConfig(model="m", weight_transfer="gloo")
    assert config.to_engine_kwargs()["weight_transfer_config"] == {"backend": "gloo"}
    assert "weight_transfer_config" not in VLLMEngineConfig(model="m").to_engine_kwargs()
    with pytest.raises(ConfigError, match="weight_transfer must be null, gloo or nccl"):
        VLLMEngineConfig(model="m", weight_transfer="ipc")
    with pytest.raises(ConfigError, match="'nccl' needs GPU engines"):
        EngineConfig("m", weight_transfer="nccl").validate()
    EngineConfig("m", weight_transfer="nccl", num_gpus=1).validate()


def test_a_broadcast_is_one_receive_call_per_engine():
    update = transfer_update({"names": ["a", "b"], "dtype_names": ["float32"] * 2, "shapes": [[1], [2]]})
    assert update.loads == [(RECEIVE_TRANSFER, ({"names": ["a", "b"], "dtype_names": ["float32"] * 2, "shapes": [[1], [2]]},))]
    assert update.tensors == 2 and update.rpc_calls == 3
