"""Lazy package exports (PEP 562), so that importing a package pulls in none of its optional stacks.

A package lists which submodule defines each public name; the first access imports that submodule
and keeps the value in the package's namespace, so later accesses are plain attribute reads.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of ``package``: ``exports`` maps each public name to the
    submodule that defines it, relative to ``package`` (``".base"``)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
