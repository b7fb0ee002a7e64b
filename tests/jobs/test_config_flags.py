"""Flags generated from a job's config dataclasses (jobs/config_flags.py) and the config tree they come
from (twinkle_agentic/config_tree.py), without Ray."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest
from twinkle_agentic.jobs.config_flags import add_field_flags, cli_fields, flag_values, option, yaml_only

from twinkle_agentic.config_tree import build, section, to_mapping
from twinkle_agentic.errors import ConfigError


@dataclass
class Settings:
    output: str = field(default="", metadata=option("where to write", metavar="DIR"))
    limit: int | None = field(default=None, metadata=option("first N only"))
    ratio: float = field(default=0.5, metadata=option("a fraction"))
    kind: str = field(default="a", metadata=option("which kind", choices=("a", "b"), flag="--type"))
    overwrite: bool = field(default=False, metadata=option("replace"))
    progress: bool = field(default=True, metadata=option("hide the bar", negate="--no-progress"))
    nested: dict = field(default_factory=dict, metadata=yaml_only("YAML only"))


def parser() -> argparse.ArgumentParser:
    built = argparse.ArgumentParser()
    add_field_flags(built, Settings)
    return built


def test_flags_not_given_leave_no_attribute_so_the_yaml_value_stands():
    assert vars(parser().parse_args([])) == {}


def test_flags_parse_to_the_field_types_and_names():
    args = parser().parse_args(
        ["--output", "o", "--limit", "3", "--ratio", "0.25", "--type", "b", "--overwrite", "--no-progress"]
    )
    assert vars(args) == {
        "output": "o", "limit": 3, "ratio": 0.25, "kind": "b", "overwrite": True, "progress": False,
    }  # fmt: skip


def test_yaml_only_fields_have_no_flag_and_choices_are_checked(capsys):
    names = [f.name for f in cli_fields(Settings)]
    assert names == ["output", "limit", "ratio", "kind", "overwrite", "progress"]
    with pytest.raises(SystemExit):
        parser().parse_args(["--nested", "x"])
    with pytest.raises(SystemExit):
        parser().parse_args(["--type", "c"])
    assert "invalid choice: 'c'" in capsys.readouterr().err


def test_a_negated_flag_shows_its_own_help():
    text = parser().format_help()
    assert "--no-progress" in text and "hide the bar" in text
    assert "--progress" not in text.replace("--no-progress", "")


# -- sections of a config tree -----------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    model: str = "m"
    max_len: int | None = None
    prefix_cache: bool | None = None
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Farm:
    workers: int = field(default=1, metadata=option("how many"))


@dataclass(frozen=True)
class Tree:
    engine: Engine = field(default_factory=Engine, metadata=section("engine", hoist=("model",)))
    farm: Farm = field(default_factory=Farm, metadata=section("farm", flatten=True))
    limit: int | None = field(default=None, metadata=option("first N only"))


def tree_args(*argv: str) -> argparse.Namespace:
    built = argparse.ArgumentParser()
    add_field_flags(built, Tree)
    return built.parse_args(list(argv))


def test_sections_get_nested_flattened_and_hoisted_flags():
    args = tree_args("--engine.max_len", "512", "--engine.prefix-cache", "false", "--workers", "2", "--model", "x")
    assert flag_values(args, Tree) == {"engine": {"max_len": 512, "prefix_cache": False}, "workers": 2, "model": "x"}
    assert flag_values(tree_args("--engine.max_len", "null"), Tree) == {"engine": {"max_len": None}}
    with pytest.raises(SystemExit):
        tree_args("--engine.kwargs", "{}")  # mappings are YAML only
    with pytest.raises(SystemExit):
        tree_args("--engine.max_len", "big")


def test_the_tree_builds_from_a_mapping_merged_over_defaults_and_dumps_back():
    built = build(Tree, {"engine": {"max_len": 8}, "model": "x", "workers": 3}, "config", ConfigError)
    assert built == Tree(Engine(model="x", max_len=8), Farm(workers=3))
    assert to_mapping(built) == {"model": "x", "engine": {"max_len": 8, "prefix_cache": None, "kwargs": {}},
                                 "workers": 3, "limit": None}  # fmt: skip
    assert build(Tree, to_mapping(built), "config", ConfigError) == built
    for data, message in (
        ({"engine": {"max_len": "8"}}, r"engine.max_len must be an integer or null, got '8' \(str\)"),
        ({"farm": {"workers": 2}}, r"unknown key\(s\) \['farm'\]"),  # flattened: its keys sit at the top
        ({"engine": {"model": "x"}}, "engine.model: write it at the top level"),
        ({"engine": 3}, "engine must be a mapping"),
    ):
        with pytest.raises(ConfigError, match=message):
            build(Tree, data, "config", ConfigError)


def test_help_lists_the_settings_only_the_yaml_sets():
    from twinkle_agentic.jobs.preprocess.config import build_parser as preprocess_parser
    from twinkle_agentic.jobs.rollout.config import build_parser as rollout_parser

    rollout = rollout_parser().format_help()
    assert "settings set in the YAML only (--config):" in rollout
    assert "  template: Template options: renderer (auto or a family)" in rollout
    assert "  rewards: " in rollout and "  engine.resources: " in rollout
    assert "--template" not in rollout  # a mapping: no flag
    assert "  steps: pipeline steps in order" in preprocess_parser().format_help()
