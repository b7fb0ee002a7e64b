"""SamplerBackend's plumbing: padding to the data-parallel size, trimming, per-item failure isolation,
decoding, and the Ray actor-handle path (a real local Ray actor).

The engine here is a scripted sampler (pure logic); the real engine is exercised in test_tiny_model.py.
"""

from __future__ import annotations

import logging

import pytest

from twinkle_agentic.data_format import SampledSequence, SampleResponse
from twinkle_agentic.preprocessor.score import SamplerBackend


class ByteTemplate:
    """Renders ChatML and tokenises to UTF-8 bytes."""

    class tokenizer:  # noqa: N801 - mirrors the template contract's attribute
        @staticmethod
        def encode(text, add_special_tokens=False):
            return list(text.encode())

        @staticmethod
        def decode(ids, skip_special_tokens=True):
            return bytes(ids).decode(errors="replace")

    @staticmethod
    def render(messages, tools=None, add_generation_prompt=False):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class ScriptedSampler:
    """Prompt logprob of token t is -t/100; generation echoes the prompt's last 3 bytes n times."""

    def __init__(self, fail_on_len: int | None = None):
        self.sizes: list[int] = []
        self.fail_on_len = fail_on_len

    def recorded(self):
        return self.sizes

    def sample(self, inputs, params):
        self.sizes.append(len(inputs))
        if self.fail_on_len is not None and any(len(f["input_ids"]) == self.fail_on_len for f in inputs):
            raise ValueError("prompt too long for the engine")
        out = []
        for f in inputs:
            ids = f["input_ids"]
            seqs = [
                SampledSequence(tokens=ids[-3:], decoded="" if k else None) for k in range(params.num_samples)
            ]
            out.append(
                SampleResponse(
                    sequences=seqs, prompt_token_ids=ids, prompt_logprobs=[None] + [-t / 100 for t in ids[1:]]
                )
            )
        return out


def test_padding_and_trimming():
    sampler = ScriptedSampler()
    backend = SamplerBackend(sampler, ByteTemplate(), dp_size=4)
    out = backend.prompt_logprobs([[1, 2], [3, 4, 5]])
    assert sampler.sizes == [4] and out == [[None, -0.02], [None, -0.04, -0.05]]
    backend.prompt_logprobs([[1, 2]] * 8)
    assert sampler.sizes[-1] == 8  # already a multiple: no padding


def test_data_parallel_size_from_the_device_mesh():
    from twinkle_agentic.sampler import DeviceMesh

    sampler = ScriptedSampler()
    sampler.device_mesh = DeviceMesh(data_world_size=3)
    SamplerBackend(sampler, ByteTemplate()).prompt_logprobs([[1, 2]])
    assert sampler.sizes == [3]


def test_engine_failure_costs_only_the_failing_item(caplog):
    sampler = ScriptedSampler(fail_on_len=5)
    backend = SamplerBackend(sampler, ByteTemplate(), max_batch_size=2)
    with caplog.at_level(logging.WARNING):
        out = backend.prompt_logprobs([[1, 2], [1, 2, 3, 4, 5], [7, 8]])
    assert out == [[None, -0.02], None, [None, -0.08]]
    assert sampler.sizes == [2, 1, 1, 1]  # chunk 1 failed and was retried item by item; chunk 2 went through
    assert "retrying one at a time" in caplog.text


def test_chat_decodes_when_the_engine_did_not():
    backend = SamplerBackend(ScriptedSampler(), ByteTemplate())
    (samples,) = backend.chat([[{"role": "user", "content": "hi"}]], n=2, temperature=0.5, max_tokens=4)
    assert samples == ["nt\n", "nt\n"]  # 'decoded' None or '' -> the template decodes the tokens


def test_actor_handle_sampler(ray_local):
    actor = ray_local.remote(ScriptedSampler).remote()
    backend = SamplerBackend(actor, ByteTemplate(), dp_size=2)
    assert backend.prompt_logprobs([[1, 2, 3]]) == [[None, -0.02, -0.03]]
    assert ray_local.get(actor.recorded.remote()) == [2]  # padded in the driver, sampled in the actor
    ray_local.kill(actor)


def test_requires_a_sampler_and_its_template():
    with pytest.raises(TypeError, match="sample"):
        SamplerBackend(object(), ByteTemplate())
    with pytest.raises(ValueError, match="template"):
        SamplerBackend(ScriptedSampler(), None)
