"""Loading what a configuration names: an object by ``"module:attr"``, a YAML file of options.

Configs name user code as ``"package.module:Name"`` (steps, rollout modes, tools, envs) and are read
from YAML files; both are done here once, so a bad name or a bad file is reported the same way
everywhere: what was asked for, what went wrong, and what to write instead.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import ConfigError


class LoadError(ConfigError):
    """A ``module:attr`` spec or a config file could not be loaded; the message names it and the fix."""


def load_object(spec: str, *, what: str, error: type[ConfigError] = LoadError) -> Any:
    """The object at ``"package.module:attr"`` (``attr`` may be dotted: ``"mod:Outer.Inner"``).

    ``what`` names the setting in messages (``"step"``, ``"rollout mode"``); ``error`` is the
    ``ConfigError`` subclass raised, so a caller keeps its own error type.
    """
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise error(f"{what} {spec!r} must look like 'package.module:Name' (an import path, a colon, a name)")
    module_name, _, attribute = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(
            f"{what} {spec!r}: cannot import module {module_name!r} ({exc}); install it or fix the path"
        ) from exc
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(
                f"{what} {spec!r}: module {module_name!r} has no attribute {attribute!r}; fix the name after ':'"
            ) from None
    return obj


def load_yaml(path: str, *, error: type[ConfigError] = LoadError) -> dict[str, Any]:
    """The mapping of options in the YAML file at ``path`` (an empty file is an empty mapping)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise error(f"cannot read the config file {path}: {exc.strerror or exc}; check the path") from exc
    except UnicodeDecodeError as exc:
        raise error(f"config file {path} is not UTF-8 text ({exc}); save it as UTF-8") from exc
    except yaml.YAMLError as exc:
        raise error(f"config file {path} is not valid YAML: {exc}; fix the syntax at the place shown") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(
            f"config file {path} must hold a mapping of options (key: value lines), got a {type(data).__name__}"
        )
    return data
