"""``RewardSpec`` and ``RolloutSpec.rewards``: each setting checked once, errors naming the setting and the fix."""

from __future__ import annotations

import pytest
from twinkle_agentic.actors import RolloutSpec
from twinkle_agentic.actors.config import FarmConfigError

from twinkle_agentic.errors import ConfigError
from twinkle_agentic.rewards import RewardConfigError, RewardScorer, RewardSpec, check_reward_specs

F = "tests.support.reward_functions:"


def test_defaults_name_weight_and_deadline():
    spec = RewardSpec(F + "raises")
    assert (spec.component, spec.weight, spec.timeout_s) == ("raises", 1.0, 30.0)
    assert RewardSpec(F + "raises", name="grader").component == "grader"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([{"function": "no_colon"}], r"rewards\[0\]\.function 'no_colon' must look like 'package.module:function'"),
        ([{"function": dict}], r"rewards\[0\]\.function <class 'dict'> must look like .*, or be the function itself"),
        ([{"function": "tests.support.nothing_here:f"}], r"rewards\[0\]\.function .*cannot import module 'tests.support.nothing_here'"),
        ([{"function": F + "missing"}], r"rewards\[0\]\.function .* has no attribute 'missing'; fix the name after ':'"),
        ([{"function": F + "NOT_CALLABLE"}], r"rewards\[0\]\.function .* is a int, not a function"),
        ([{"function": F + "raises", "weight": float("nan")}], r"rewards\[0\]\.weight must be a finite number"),
        ([{"function": F + "raises", "weight": "1"}], r"rewards\[0\]\.weight must be a finite number"),
        ([{"function": F + "raises", "timeout_s": 0}], r"rewards\[0\]\.timeout_s must be a number of seconds > 0"),
        ([{"function": F + "raises", "name": ""}], r"rewards\[0\]\.name must be a non-empty string"),
        ([{"function": F + "raises", "name": "env:maze"}], r"names starting with 'env:' are the components of env"),
        ([F + "raises", F + "raises"], r"rewards\[1\]: the name 'raises' is taken by rewards\[0\]; give one of them a distinct 'name'"),
        ([{"weight": 1.0}], r"rewards\[0\]: 'function' is required"),
        ([{"function": F + "raises", "batch": "yes"}], r"rewards\[0\]\.batch must be true or false"),
        ([{"function": F + "raises", "kwargs": [1]}], r"rewards\[0\]\.kwargs must be a mapping of keyword arguments"),
        ([{"function": F + "raises", "wieght": 2}], r"rewards\[0\]: unknown key\(s\) \['wieght'\]"),
        ([3], r"rewards\[0\] must be a mapping \(function, weight, name, timeout_s, batch, kwargs\) or a 'module:function' string"),
        ({"function": F + "raises"}, r"rewards must be a list of reward functions"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_and_the_fix(value, message):
    with pytest.raises(RewardConfigError, match=message):
        check_reward_specs(value)
    if isinstance(value, list):
        with pytest.raises(ConfigError, match=message):
            RewardScorer(value)


def test_an_env_class_is_built_by_the_scorer_and_bad_kwargs_are_refused_there():
    check_reward_specs([F + "PickyEnv"])  # imported, not built, where the config is checked
    with pytest.raises(RewardConfigError, match=r"rewards\[0\]: cannot build '.*PickyEnv' with kwargs \{\}: TypeError: .*threshold.*; fix its kwargs"):
        RewardScorer([F + "PickyEnv"])


def test_rollout_spec_converts_mappings_and_refuses_bad_ones_as_farm_errors():
    spec = RolloutSpec(rewards=[{"function": F + "raises", "weight": 2}, F + "nan"]).validate()
    assert spec.rewards == [RewardSpec(F + "raises", weight=2), RewardSpec(F + "nan")]
    with pytest.raises(FarmConfigError, match=r"rewards\[1\]: the name 'nan' is taken"):
        RolloutSpec(rewards=[F + "nan", F + "nan"]).validate()
    with pytest.raises(FarmConfigError, match=r"rewards\[0\] must be a mapping"):
        RolloutSpec(rewards=[None])


def test_the_rollout_job_takes_rewards_as_a_yaml_list(tmp_path):
    from twinkle_agentic.jobs.rollout.config import ConfigError as JobConfigError
    from twinkle_agentic.jobs.rollout.config import config_from_mapping

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    rewards = [{"function": "twinkle_agentic.rewards.builtin:contains_ground_truth", "weight": 2, "timeout_s": 5}]
    config = config_from_mapping({"prompts": str(prompts), "output": str(tmp_path / "out"), "rewards": rewards}).validate()
    assert config.rollout_spec().rewards == [RewardSpec(rewards[0]["function"], weight=2, timeout_s=5)]
    assert config.to_dict()["rewards"][0]["weight"] == 2
    bad = {"prompts": str(prompts), "output": str(tmp_path / "out"), "rewards": [{"function": "my_graders:exact"}]}
    with pytest.raises(JobConfigError, match=r"rewards\[0\]\.function 'my_graders:exact': cannot import module 'my_graders'"):
        config_from_mapping(bad).validate()
    with pytest.raises(JobConfigError, match=r"rewards\[0\]\.weight must be a number, got .heavy."):
        config_from_mapping({**bad, "rewards": [{"function": "m:f", "weight": "heavy"}]})
