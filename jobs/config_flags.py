"""Command-line flags generated from a job's config dataclass, so a setting has one name, default and
help in YAML and on the command line.

Each field's ``metadata`` holds its ``help``; optionally ``flag`` (another flag name), ``negate`` (a
``--no-...`` flag that sets a default-true bool to false; its help says what the flag does) and any
``argparse`` keyword (``choices``, ``nargs``, ``metavar``...). Fields with ``cli: False`` are YAML only.
Flags default to ``argparse.SUPPRESS``, so a flag given overrides the YAML and one not given leaves it.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any


def option(help_: str, **extra: Any) -> dict[str, Any]:
    """A field's metadata: its help and flag options."""
    return {"help": help_, **extra}


def yaml_only(help_: str) -> dict[str, Any]:
    """The metadata of a field that has no flag."""
    return {"help": help_, "cli": False}


def cli_fields(config_class: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(config_class) if f.metadata.get("cli", True)]


def add_field_flags(parser: argparse.ArgumentParser, config_class: type) -> None:
    """One flag per field of ``config_class`` that is not YAML only."""
    for f in cli_fields(config_class):
        meta = dict(f.metadata)
        flag = meta.pop("flag", "--" + f.name.replace("_", "-"))
        negate = meta.pop("negate", None)
        kwargs: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": meta.pop("help")}
        type_name = str(f.type)
        if type_name in ("bool", str(bool)):
            parser.add_argument(negate or flag, action="store_false" if negate else "store_true", **kwargs)
            continue
        if type_name in ("int", "int | None"):
            kwargs["type"] = int
        elif type_name in ("float", "float | None"):
            kwargs["type"] = float
        kwargs.update(meta)
        parser.add_argument(flag, **kwargs)
