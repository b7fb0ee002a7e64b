"""Flags generated from a job's config dataclass (jobs/config_flags.py), without Ray."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest
from twinkle_agentic.jobs.config_flags import add_field_flags, cli_fields, option, yaml_only


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
