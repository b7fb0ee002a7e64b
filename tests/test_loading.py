"""twinkle_agentic.loading and twinkle_agentic.checks: the config primitives every layer uses, and the
one root of configuration errors."""

from __future__ import annotations

import importlib

import pytest

from twinkle_agentic.checks import check_positive, type_problem
from twinkle_agentic.errors import ConfigError
from twinkle_agentic.loading import LoadError, load_object, load_yaml


def test_load_object_follows_a_dotted_attribute():
    assert load_object("collections:OrderedDict.fromkeys", what="x") == importlib.import_module("collections").OrderedDict.fromkeys


@pytest.mark.parametrize(
    "spec, message",
    [
        ("collections", "step 'collections' must look like 'package.module:Name'"),
        ("a:b:c", "must look like"),
        (3, "must look like"),
        ("no_such_module_xyz:Thing", "cannot import module 'no_such_module_xyz'.*install it or fix the path"),
        ("collections:Missing", "module 'collections' has no attribute 'Missing'; fix the name after ':'"),
    ],
)
def test_load_object_names_the_spec_and_the_fix(spec, message):
    with pytest.raises(LoadError, match=message) as info:
        load_object(spec, what="step")
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)


def test_load_object_raises_the_callers_error_class():
    class StepError(ConfigError):
        pass

    with pytest.raises(StepError):
        load_object("collections:Missing", what="step", error=StepError)


def test_load_yaml_reads_a_mapping_and_names_the_file_on_errors(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("a: 1\nb: [x]\n")
    assert load_yaml(str(good)) == {"a": 1, "b": ["x"]}
    (tmp_path / "empty.yaml").write_text("")
    assert load_yaml(str(tmp_path / "empty.yaml")) == {}
    cases = {
        "broken.yaml": ("a: [1\n", r"(?s)broken.yaml is not valid YAML: .*fix the syntax"),
        "list.yaml": ("- a\n", r"list.yaml must hold a mapping of options .*got a list"),
        "latin1.yaml": (None, r"latin1.yaml is not UTF-8 text"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(text.encode() if text is not None else b"a: caf\xe9\n")
        with pytest.raises(LoadError, match=message):
            load_yaml(str(path))
    with pytest.raises(LoadError, match=r"cannot read the config file .*missing.yaml.*check the path"):
        load_yaml(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    "value, options, message",
    [
        (0, {"integer": True}, "n must be a positive integer, got 0"),
        (2.5, {"integer": True}, "n must be a positive integer, got 2.5"),
        (True, {"integer": True}, "n must be a positive integer, got True"),
        (-1, {"allow_zero": True}, "n must be a number >= 0, got -1"),
        (None, {}, "n must be a positive number, got None"),
        ("3", {"allow_none": True}, "n must be a positive number or null, got '3'"),
    ],
)
def test_check_positive_refuses_naming_the_setting(value, options, message):
    with pytest.raises(ConfigError, match=f"^{message}$"):
        check_positive("n", value, **options)


def test_check_positive_passes_good_values_through():
    assert check_positive("n", 3, integer=True) == 3
    assert check_positive("n", 0, allow_zero=True) == 0
    assert check_positive("n", None, allow_none=True) is None


def test_type_problem_judges_plain_hints_only():
    assert type_problem("x", 3, int | None) is None and type_problem("x", 3, float) is None
    assert type_problem("x", True, int) == "x must be an integer, got True (bool)"
    assert type_problem("x", "a", list[int]) is None  # not a plain hint: its owner judges it


def test_every_config_error_class_has_the_one_root():
    classes = [
        ("twinkle_agentic.actors.config", "FarmConfigError"),
        ("twinkle_agentic.actors.catalog", "SelectionError"),
        ("twinkle_agentic.jobs.rollout.config", "ConfigError"),
        ("twinkle_agentic.jobs.rollout.prompts", "PromptError"),
        ("twinkle_agentic.jobs.preprocess.steps", "ConfigError"),
        ("twinkle_agentic.cluster.auth", "ClusterConfigError"),
        ("twinkle_agentic.deployments.common", "DeploymentConfigError"),
        ("twinkle_agentic.rollout.failure_policy", "FailurePolicyError"),
        ("twinkle_agentic.rollout.tool_scheduler", "ToolLimitError"),
        ("twinkle_agentic.preprocessor.pii.filter", "PIIConfigError"),
        ("twinkle_agentic.data_format.sampling", "SamplingConfigError"),
        ("twinkle_agentic.sampler.engine", "EngineConfigError"),
        ("twinkle_agentic.sampler.weights", "WeightUpdateError"),
        ("twinkle_agentic.preprocessor.step_specs", "PipelineConfigError"),
        ("twinkle_agentic.io.inputs", "InputError"),
        ("twinkle_agentic.loading", "LoadError"),
    ]
    for module, name in classes:
        assert issubclass(getattr(importlib.import_module(module), name), ConfigError), f"{module}.{name}"
