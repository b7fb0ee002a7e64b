"""The weight-update payload without an engine: checks that name the tensor, buckets, versions.

The engine side (loading, cache reset, logprobs after an update) is in test_weight_update.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load, load_file, save_file  # noqa: E402

from twinkle_agentic.errors import ConfigError  # noqa: E402
from twinkle_agentic.sampler.weights import (  # noqa: E402
    LOAD_BUCKET,
    LOAD_CHECKPOINT,
    LOADER_EXTENSION,
    WeightUpdateError,
    buckets,
    checkpoint_shapes,
    next_version,
    prepare_update,
    with_loader_extension,
)


@pytest.fixture(scope="module")
def tiny_tensors(tiny_model_path):
    return load_file(f"{tiny_model_path}/model.safetensors")


@pytest.fixture(scope="module")
def expected(tiny_model_path):
    return checkpoint_shapes(tiny_model_path)


def test_checkpoint_shapes_come_from_the_headers(expected, tiny_tensors):
    assert expected == {name: tuple(t.shape) for name, t in tiny_tensors.items()}


def test_a_checkpoint_directory_is_one_load_call(tiny_model_path, expected):
    update = prepare_update(tiny_model_path, expected)
    assert update.loads == [(LOAD_CHECKPOINT, (str(Path(tiny_model_path).resolve()), []))]
    assert update.tensors == len(expected)


def test_tensors_travel_in_buckets_that_read_back(tiny_tensors, expected):
    total = sum(t.numel() * t.element_size() for t in tiny_tensors.values())
    update = prepare_update(tiny_tensors, expected, bucket_bytes=total // 4)
    assert 4 <= len(update.loads) <= 6
    assert {method for method, _ in update.loads} == {LOAD_BUCKET}
    back = {}
    for _, (blob,) in update.loads:
        back.update(load(blob))
    assert back.keys() == tiny_tensors.keys()
    assert all(torch.equal(back[name], tiny_tensors[name]) for name in tiny_tensors)


def test_calls_do_not_grow_with_the_parameter_count():
    many = {f"p{i}": torch.zeros(4) for i in range(2000)}
    update = prepare_update(list(many.items()), {name: (4,) for name in many})
    assert len(update.loads) == 1 and update.tensors == 2000


def test_a_tensor_larger_than_a_bucket_is_a_bucket_of_its_own():
    pairs = [("a", torch.zeros(10)), ("big", torch.zeros(1000)), ("b", torch.zeros(10)), ("c", torch.zeros(10))]
    assert [[n for n, _ in b] for b in buckets(pairs, bucket_bytes=100)] == [["a"], ["big"], ["b", "c"]]


def test_a_tied_head_from_a_state_dict_is_skipped(tiny_tensors, expected):
    state = dict(tiny_tensors)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # what a tied model's state_dict() holds
    update = prepare_update(state, expected)
    assert update.tensors == len(expected)
    assert "lm_head.weight" not in load(update.loads[0][1][0])


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda w: w.pop("model.norm.weight"), r"missing tensor\(s\): model\.norm\.weight"),
        (lambda w: w.__setitem__("model.layers.7.foo", torch.zeros(2)), r"does not have: model\.layers\.7\.foo"),
        (
            lambda w: w.__setitem__("model.norm.weight", torch.zeros(3)),
            r"misshaped tensor\(s\): model\.norm\.weight \[3\] \(expected \[128\]\)",
        ),
        (lambda w: w.__setitem__("model.norm.weight", [0.0] * 128), r"tensor model\.norm\.weight is a list"),
    ],
    ids=["missing", "extra", "misshaped", "not-a-tensor"],
)
def test_bad_tensors_are_refused_by_name(tiny_tensors, expected, change, message):
    bad = dict(tiny_tensors)
    change(bad)
    with pytest.raises(WeightUpdateError, match=message):
        prepare_update(bad, expected)


def test_a_misshaped_checkpoint_is_refused_from_its_headers(tmp_path, tiny_model_path, tiny_tensors, expected):
    for path in Path(tiny_model_path).iterdir():
        if path.suffix != ".safetensors":
            shutil.copy(path, tmp_path / path.name)
    bad = dict(tiny_tensors)
    bad["model.layers.0.mlp.up_proj.weight"] = bad["model.layers.0.mlp.up_proj.weight"][:-1].clone()
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(WeightUpdateError, match=r"misshaped tensor\(s\): model\.layers\.0\.mlp\.up_proj\.weight"):
        prepare_update(tmp_path, expected)


@pytest.mark.parametrize(
    "weights, message",
    [
        (b"bytes", "pass a checkpoint directory"),
        (3, "pass a checkpoint directory"),
        ("/nonexistent/checkpoint", "does not exist"),
        ([("a", torch.zeros(1)), ("a", torch.zeros(1))], "tensor a appears twice"),
        ([(1, torch.zeros(1))], "tensor names are checkpoint names"),
        ([torch.zeros(1)], r"expected a \(name, torch.Tensor\) pair"),
    ],
)
def test_payloads_of_the_wrong_kind_are_refused(weights, message):
    with pytest.raises(WeightUpdateError, match=message):
        prepare_update(weights, {"a": (1,)})


def test_a_directory_without_safetensors_is_refused(tmp_path):
    with pytest.raises(WeightUpdateError, match=r"no \*\.safetensors files"):
        prepare_update(tmp_path, {"a": (1,)})


def test_refusals_are_configuration_errors():
    assert issubclass(WeightUpdateError, ConfigError) and issubclass(WeightUpdateError, ValueError)


def test_versions_only_grow():
    assert next_version(0, None) == 1
    assert next_version(4, 10) == 10
    for bad, message in [(4, "not greater"), (3, "not greater"), (True, "must be an integer"), ("5", "integer")]:
        with pytest.raises(WeightUpdateError, match=message):
            next_version(4, bad)


def test_the_loader_extension_is_added_and_a_foreign_one_refused():
    assert with_loader_extension({"seed": 1}) == {"seed": 1, "worker_extension_cls": LOADER_EXTENSION}
    with pytest.raises(WeightUpdateError, match="drop the setting"):
        with_loader_extension({"worker_extension_cls": "my.Extension"})
