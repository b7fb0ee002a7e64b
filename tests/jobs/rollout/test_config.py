"""The rollout job's typed config tree (jobs/rollout/config.py), without Ray: YAML and flags to frozen
objects, nested flags, sampling keys passed through to vLLM, one name and one default per setting."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from twinkle_agentic.actors.catalog import EnvEndpoint, ToolServerEndpoint
from twinkle_agentic.actors.config import EngineConfig, FarmOptions, RolloutSpec
from twinkle_agentic.jobs.rollout.config import (
    ConfigError,
    EnvServerSpec,
    RolloutJobConfig,
    ToolServerSpec,
    build_parser,
    config_from_mapping,
    model_identity,
    resolve_config,
)

from tests.support.paths import REPO_ROOT
from twinkle_agentic.config_tree import surface_keys
from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.demo import tiny_model_path
from twinkle_agentic.envs.openenv import OpenEnv
from twinkle_agentic.errors import ConfigError as RootConfigError
from twinkle_agentic.sampler.engine import VLLMEngineConfig
from twinkle_agentic.tools.remote import HttpPolicy

DEMO_CONFIG = REPO_ROOT / "jobs" / "configs" / "demo_rollout.yaml"


def resolve(*argv: str) -> RolloutJobConfig:
    return resolve_config(build_parser().parse_args(["--config", str(DEMO_CONFIG), "--output", "out", *argv]))


def minimal(**changes) -> dict:
    return {"prompts": "p.jsonl", "output": "out", **changes}


def test_the_demo_yaml_becomes_frozen_typed_objects():
    cfg = resolve()
    assert type(cfg.engine) is EngineConfig and isinstance(cfg.engine, VLLMEngineConfig)
    assert (cfg.engine.max_model_len, cfg.engine.kv_cache_space_gb, cfg.engine.num_cpus) == (1024, 1, 1)
    assert cfg.engine.model == tiny_model_path() and cfg.engine.mode == "sync"
    assert cfg.rollout.sampling == SamplingParams(temperature=0.0, max_tokens=96)
    assert cfg.farm == FarmOptions(engines=2, batch_size=8)
    assert [type(s) for s in cfg.tools] == [ToolServerSpec] and [type(s) for s in cfg.envs] == [EnvServerSpec]
    for frozen in (cfg, cfg.engine, cfg.rollout, cfg.rollout.sampling, cfg.farm, cfg.tools[0]):
        with pytest.raises(dataclasses.FrozenInstanceError):
            frozen.batch_size = 1  # type: ignore[misc]
    # what the farm receives is the tree's own objects, not copies rebuilt field by field
    assert cfg.engine_config() is cfg.engine and cfg.farm_options() is cfg.farm
    assert cfg.rollout_spec("catalog").sampling is cfg.rollout.sampling


def test_nested_flags_come_from_the_tree_and_merge_over_the_yaml():
    cfg = resolve(
        "--engine.tensor_parallel_size", "2", "--engine.num-gpus", "2", "--engine.kv_cache_space_gb", "null",
        "--sampling.temperature", "0.7", "--engines", "1", "--max-turns", "3", "--model", str(tiny_model_path()),
    )  # fmt: skip
    assert (cfg.engine.tensor_parallel_size, cfg.engine.num_gpus, cfg.engine.kv_cache_space_gb) == (2, 2, None)
    assert cfg.engine.max_model_len == 1024  # from the YAML: a flag changes one key of a section
    assert cfg.rollout.sampling.temperature == 0.7 and cfg.rollout.sampling.max_tokens == 96
    assert cfg.farm.engines == 1 and cfg.rollout.max_turns == 3
    help_text = build_parser().format_help()
    for flag in ("--engine.tensor_parallel_size", "--sampling.temperature", "--engines", "--max-turns", "--mode"):
        assert flag in help_text
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--engine.max_model_len", "1k"])


def test_extra_sampling_keys_reach_vllm_sampling_params():
    cfg = config_from_mapping(minimal(sampling={"temperature": 0.5, "min_p": 0.1, "presence_penalty": 0.5})).validate()
    params = cfg.rollout_spec().sampling
    assert params.extra == {"min_p": 0.1, "presence_penalty": 0.5}
    vllm_params = params.to_vllm()
    assert (vllm_params.min_p, vllm_params.presence_penalty, vllm_params.temperature) == (0.1, 0.5, 0.5)
    assert cfg.fingerprint()["sampling"] == {"temperature": 0.5, "max_tokens": 128, "min_p": 0.1, "presence_penalty": 0.5}


def test_extra_sampling_keys_are_flags_too():
    cfg = resolve("--sampling.min_p", "0.1", "--sampling.presence-penalty=0.5", "--sampling.stop", "[x, y]")
    assert cfg.rollout.sampling.extra == {"min_p": 0.1, "presence_penalty": 0.5}
    assert cfg.rollout.sampling.stop == ["x", "y"] and cfg.rollout.sampling.max_tokens == 96
    with pytest.raises(RootConfigError, match=r"\['min_pp'\] are neither"):
        resolve("--sampling.min_pp", "0.1")
    for argv in (["--sampling.min_p"], ["--samplings.min_p", "1"], ["--frobnicate", "2"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sampling": {"min_pp": 0.1}}, r"sampling key\(s\) \['min_pp'\] are neither .* fix the spelling"),
        ({"sampling": {"n": 2}}, "'n' is set through 'num_samples'"),
        ({"sampling": {"min_p": "high"}}, "vLLM refuses them"),
        ({"sampling": {"top_p": 0}}, r"SamplingParams.top_p must be a finite number in \(0, 1\]"),
        ({"engine": {"max_model_len": "1k"}}, r"engine.max_model_len must be an integer or null, got '1k' \(str\)"),
        ({"engine": {"model": "x"}}, "engine.model: write it at the top level as 'model:'"),
        ({"engine": {"gpus": 1}}, r"engine: unknown key\(s\) \['gpus'\]"),
        ({"max_turns": "six"}, "max_turns must be an integer, got 'six'"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"verify_tokens": "no"}, "verify_tokens must be true or false"),
        ({"tools": [{"name": "t", "tools": ["m:f"], "timeout_s": "1m"}]}, r"tools\[0\].timeout_s must be a number"),
        ({"sampling": ["temperature"]}, "sampling must be a mapping, got list"),
        ({"tools": [{"tools": ["m:f"]}]}, r"tools\[0\].name is required: add 'name:' to tools\[0\]"),
    ],
)
def test_a_wrong_type_or_unknown_key_is_refused_naming_the_setting(change, message):
    with pytest.raises(ConfigError, match=message) as info:
        config_from_mapping(minimal(**change)).validate()
    assert isinstance(info.value, RootConfigError)


def test_each_setting_has_one_name_and_one_default():
    keys = surface_keys(RolloutJobConfig)
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert "workers" not in keys and "tool_workers" not in keys
    cfg = config_from_mapping({})
    assert cfg.farm == FarmOptions() and cfg.rollout == RolloutSpec() and cfg.engine == EngineConfig(tiny_model_path())
    assert cfg.rollout.sampling == RolloutSpec().sampling  # the rollout default: greedy, 128 tokens


def test_server_specs_take_the_clients_defaults():
    """A tools entry's timeout_s and retries are HttpPolicy's, an envs entry's retry_attempts OpenEnv's,
    through the endpoints the workers receive."""
    tool_spec, tool_endpoint, policy = ToolServerSpec("t", url="u"), ToolServerEndpoint("t", "u"), HttpPolicy()
    assert (tool_spec.timeout_s, tool_spec.retries) == (tool_endpoint.timeout_s, tool_endpoint.retries)
    assert (tool_endpoint.timeout_s, tool_endpoint.retries) == (policy.timeout_s, policy.retries)
    retry_default = inspect.signature(OpenEnv).parameters["retry_attempts"].default
    assert EnvServerSpec("e", url="u").retry_attempts == EnvEndpoint("e", "u").retry_attempts == retry_default


def test_the_resolved_config_reads_back_as_itself():
    cfg = resolve("--sampling.seed", "7")
    data = cfg.to_dict()
    assert data["model"] == tiny_model_path() and "model" not in data["engine"] and data["engines"] == 2
    assert config_from_mapping(data) == cfg


def test_the_resume_fingerprint_of_the_demo_config_is_unchanged():
    """The journal refuses to resume a run whose fingerprint differs: the typed tree gives the same
    fingerprint as the untyped sampling mapping did for a config that spells its sampling out."""
    cfg = resolve()
    assert cfg.fingerprint() == {
        "model": model_identity(tiny_model_path()),
        "mode": "sync",
        "sampling": {"temperature": 0.0, "max_tokens": 96},
        "max_turns": 6,
        "max_trajectory_tokens": None,
        "samples_per_prompt": 1,
        "template": {},
        "tools": ["demo_tools"],
        "envs": ["guess_number"],
    }
    default = config_from_mapping(minimal())
    assert default.fingerprint()["sampling"] == {"temperature": 0.0, "max_tokens": 128}
