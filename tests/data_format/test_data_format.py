import math

import pytest

from twinkle_agentic.data_format import (
    SampledSequence,
    SampleResponse,
    SamplingParams,
    pack_value,
    user_data_get,
    user_data_set,
)


def test_seed_example_and_defaults():
    sp = SamplingParams(temperature=0.7, max_tokens=512)
    assert (sp.temperature, sp.max_tokens) == (0.7, 512)
    d = SamplingParams()
    assert (d.max_tokens, d.seed, d.stop, d.temperature, d.top_k, d.top_p) == (None, None, None, 1.0, -1, 1.0)
    assert (d.repetition_penalty, d.logprobs, d.prompt_logprobs, d.num_samples) == (1.0, None, None, 1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"temperature": 0},
        {"top_k": -1},
        {"top_k": 1},
        {"top_p": 1.0},
        {"top_p": 1e-6},
        {"repetition_penalty": 0.01},
        {"logprobs": 0},
        {"prompt_logprobs": 5},
        {"num_samples": 3},
        {"stop": "\n"},
        {"stop": ["a", "b"]},
        {"stop": [2, 7]},
        {"seed": 0},
    ],
)
def test_valid_values(kwargs):
    SamplingParams(**kwargs)


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_tokens", -1),
        ("max_tokens", 1.5),
        ("temperature", -0.1),
        ("temperature", math.nan),
        ("temperature", "hot"),
        ("top_k", 0),
        ("top_k", -2),
        ("top_p", 0.0),
        ("top_p", 1.01),
        ("repetition_penalty", 0),
        ("logprobs", -1),
        ("prompt_logprobs", -3),
        ("num_samples", 0),
        ("num_samples", True),
        ("stop", ["a", 1]),
        ("stop", [-1]),
        ("stop", 5),
        ("seed", "x"),
    ],
)
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field}\b"):
        SamplingParams(**{field: value})


def test_from_dict_maps_max_new_tokens_and_keeps_other_keys_for_vllm():
    sp = SamplingParams.from_dict({"max_new_tokens": 64, "temperature": 0.2, "min_p": 0.1})
    assert sp.max_tokens == 64 and sp.temperature == 0.2 and sp.extra == {"min_p": 0.1}
    assert SamplingParams.from_dict({"max_tokens": 8, "max_new_tokens": 64}).max_tokens == 8
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams.from_dict({"temperature": -1})


def test_stop_split_into_strings_and_token_ids():
    assert SamplingParams(stop="x").stop_strings == ["x"]
    assert SamplingParams(stop=[3, 4]).stop_token_ids == [3, 4]
    assert SamplingParams(stop=[3, 4]).stop_strings == []


def test_to_vllm_maps_fields():
    pytest.importorskip("vllm")
    v = SamplingParams(
        max_tokens=7, seed=3, stop=[5, 6], temperature=0.5, top_k=-1, logprobs=1, prompt_logprobs=0, num_samples=2
    ).to_vllm()
    assert v.max_tokens == 7 and v.seed == 3 and v.n == 2
    assert list(v.stop_token_ids) == [5, 6] and not v.stop
    assert v.logprobs == 1 and v.prompt_logprobs == 0 and v.temperature == 0.5 and v.top_k in (0, -1)
    assert SamplingParams(stop="END", top_k=5).to_vllm().stop == ["END"]


def test_sampler_outputs():
    seq = SampledSequence(tokens=[1, 2], logprobs=[-0.1, -0.2], stop_reason="length", decoded="ab")
    resp = SampleResponse(sequences=[seq], prompt_token_ids=[9])
    assert resp.sequences[0].stop_reason == "length" and SampleResponse().sequences == []


def test_user_data_helpers():
    items = [("id", pack_value("a/1")), ("n", "3"), ("id", '"dup"'), ("raw", "not json")]
    assert user_data_get(items, "id") == "a/1"
    assert user_data_get(items, "n") == 3
    assert user_data_get(items, "raw") == "not json"
    assert user_data_get(items, "missing", default=0) == 0
    assert user_data_get({"n": "[1, 2]"}, "n") == [1, 2]
    out = user_data_set(items, "id", {"k": "中文"})
    assert out[-1] == ("id", '{"k": "中文"}') and sum(k == "id" for k, _ in out) == 1
    assert items[0] == ("id", '"a/1"')  # input untouched
    assert user_data_set(None, "x", 1) == [("x", "1")]
