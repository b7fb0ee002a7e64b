"""Command-line flags generated from a job's config dataclasses, so a setting has one name, default and
help in YAML and on the command line.

Each field's ``metadata`` holds its ``help``; optionally ``flag`` (another flag name), ``negate`` (a
``--no-...`` flag that sets a default-true bool to false; its help says what the flag does) and any
``argparse`` keyword (``choices``, ``nargs``, ``metavar``...). Fields with ``cli: False`` are YAML only.
Sections of the config tree (``twinkle_agentic/config_tree.py``) give their fields flags too: a nested section's
as ``--engine.tensor_parallel_size 2`` (or ``--engine.tensor-parallel-size``), a flattened one's at the
top level. A section whose ``extra`` mapping passes keys through (sampling: any vllm.SamplingParams
field) also takes ``--sampling.KEY VALUE`` for a key it has no field for, read with
:class:`ConfigArgumentParser`. Flags default to ``argparse.SUPPRESS``, so a flag given overrides the
YAML and one not given leaves it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

import yaml

from twinkle_agentic.checks import plain_types
from twinkle_agentic.config_tree import set_path, walk

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NULL = {"null", "none", "~"}


def option(help_: str, **extra: Any) -> dict[str, Any]:
    """A field's metadata: its help and flag options."""
    return {"help": help_, **extra}


def yaml_only(help_: str) -> dict[str, Any]:
    """The metadata of a field that has no flag."""
    return {"help": help_, "cli": False}


def cli_fields(config_class: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(config_class) if f.metadata.get("cli", True)]


def value_parser(allowed: tuple[type, ...]) -> Callable[[str], Any]:
    """Parse a flag's text as one of the plain types ``allowed`` (``null`` for None, true/false for bools)."""

    def parse(text: str) -> Any:
        lowered = text.strip().lower()
        if type(None) in allowed and lowered in _NULL:
            return None
        if bool in allowed and lowered in _TRUE | _FALSE:
            return lowered in _TRUE
        for kind in (int, float):
            if kind in allowed:
                try:
                    return kind(text)
                except ValueError:
                    continue
        if str in allowed:
            return text
        names = "/".join("null" if t is type(None) else t.__name__ for t in allowed)
        raise argparse.ArgumentTypeError(f"expected {names}, got {text!r}")

    return parse


class ConfigArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that also reads ``--SECTION.KEY VALUE`` (or ``=VALUE``) for the sections of
    ``passthrough``; the values are read as YAML scalars and checked with the rest of the config."""

    passthrough: tuple[str, ...] = ()

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, rest = self.parse_known_args(args, namespace)
        given: dict[str, dict[str, Any]] = {}
        unknown: list[str] = []
        tokens = iter(rest)
        for token in tokens:
            section, dot, key = token[2:].partition(".") if token.startswith("--") else ("", "", "")
            if not (dot and key and section in self.passthrough):
                unknown.append(token)
                continue
            key, eq, text = key.partition("=")
            if not eq:
                text = next(tokens, None)
                if text is None:
                    self.error(f"argument {token}: expected one argument")
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                value = text
            given.setdefault(section, {})[key.replace("-", "_")] = value
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        parsed.passthrough = given
        return parsed


def flag_settings(config_class: type) -> list[tuple[str, dataclasses.Field, Any]]:
    """The settings of ``config_class``'s tree that get a flag: ``(surface path, field, hint)``."""
    out = []
    for path, f, hint in walk(config_class):
        if not f.metadata.get("cli", True) or f.metadata.get("passthrough"):
            continue
        if not plain_types(hint) and "nargs" not in f.metadata and "action" not in f.metadata:
            continue  # mappings and lists are set in the YAML
        out.append((path, f, hint))
    return out


def yaml_only_help(config_class: type) -> str:
    """The settings of ``config_class``'s tree that have no flag (mappings, lists, YAML-only fields),
    with their help: the epilog of a job's ``--help``."""
    flagged = {path for path, _, _ in flag_settings(config_class)}
    lines = [
        f"  {path}: {f.metadata.get('help') or hint}"
        for path, f, hint in walk(config_class)
        if path not in flagged and not f.metadata.get("passthrough") and not f.metadata.get("section")
    ]
    return "settings set in the YAML only (--config):\n" + "\n".join(lines) if lines else ""


def add_field_flags(parser: argparse.ArgumentParser, config_class: type) -> None:
    """One flag per setting of ``config_class`` (its sections included) that is not YAML only; the
    others are listed in the parser's epilog."""
    if isinstance(parser, ConfigArgumentParser):
        parser.passthrough = tuple(
            path.rpartition(".")[0] for path, f, _ in walk(config_class) if f.metadata.get("passthrough")
        )
    epilog = yaml_only_help(config_class)
    if epilog:
        parser.epilog = epilog
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for path, f, hint in flag_settings(config_class):
        meta = {k: v for k, v in f.metadata.items() if k not in ("cli", "section", "config")}
        nested = "." in path
        default_flag = "--" + (path if nested else path.replace("_", "-"))
        flag = meta.pop("flag", default_flag)
        flags = [flag] + ([default_flag.replace("_", "-")] if nested and "_" in default_flag else [])
        negate = meta.pop("negate", None)
        kwargs: dict[str, Any] = {"dest": path, "default": argparse.SUPPRESS, "help": meta.pop("help", None)}
        allowed = plain_types(hint)
        if allowed == (bool,) and not nested:
            parser.add_argument(negate or flag, action="store_false" if negate else "store_true", **kwargs)
            continue
        if allowed and allowed != (str,):
            kwargs["type"] = value_parser(allowed)
            kwargs.setdefault("metavar", "/".join("null" if t is type(None) else t.__name__ for t in allowed).upper())
        kwargs.update(meta)
        parser.add_argument(*flags, **kwargs)


def flag_values(args: argparse.Namespace, config_class: type) -> dict[str, Any]:
    """The flags given, as a YAML-shaped mapping (nested sections as nested mappings)."""
    data: dict[str, Any] = {}
    for path, _, _ in flag_settings(config_class):
        if hasattr(args, path):
            set_path(data, path, getattr(args, path))
    for section, values in getattr(args, "passthrough", {}).items():
        for key, value in values.items():
            set_path(data, f"{section}.{key}", value)
    return data
