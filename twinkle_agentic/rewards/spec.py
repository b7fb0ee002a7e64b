"""``RewardSpec``: one reward function of a rollout, named by import path, with its weight and deadline.

A rollout's reward is the weighted sum of its reward functions' values. Each function is configured
once, as ``{function: "my_pkg.rewards:exact_answer", weight: 1.0}`` in a job's ``rewards:`` list or a
``RewardSpec`` in Python, and checked here once (path, weight, name, deadline), so a mistake is
reported before any engine starts rather than as a reward error on every trajectory.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from twinkle_agentic.errors import ConfigError
from twinkle_agentic.loading import load_object

DEFAULT_REWARD_TIMEOUT_S = 30.0
ENV_COMPONENT_PREFIX = "env:"  # env episode rewards are components named env:<environment>


class RewardConfigError(ConfigError):
    """A reward function setting is invalid; the message names the setting and the fix."""


@dataclass(frozen=True)
class RewardSpec:
    """A reward function: ``function`` (``"module:function"``, or in Python the function itself; sync or
    async, called with the finished trajectory, returning a number), its ``weight`` in the trajectory's
    reward, its ``name`` among the reward components (default: the function's name) and ``timeout_s``,
    the deadline of one call. ``kwargs`` are passed to every call.

    Batch mode (``batch: true``) calls the function once per batch with the list of its finished
    trajectories; it returns one number per trajectory, in order. ``function`` may also name an
    ``Env`` class (``"module:MyEnv"``): it is built once per worker with ``kwargs`` and its
    ``evaluate(trajectories)`` scores each batch, so ``batch`` is implied."""

    function: str | Callable[[Any], Any] = field(
        metadata={"help": "import path of the reward function, 'package.module:function'"}
    )
    weight: float = field(default=1.0, metadata={"help": "weight of this function's value in the reward"})
    name: str | None = field(default=None, metadata={"help": "component name (default: the function's name)"})
    timeout_s: float = field(
        default=DEFAULT_REWARD_TIMEOUT_S, metadata={"help": "deadline of one call, in seconds"}
    )
    batch: bool = field(default=False, metadata={"help": "call once per batch with the list of trajectories"})
    kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "keyword arguments of each call (of an Env class: its constructor)"}
    )

    @classmethod
    def from_value(cls, value: Any, where: str = "rewards") -> RewardSpec:
        """A ``RewardSpec`` from itself, a mapping of its fields, a ``"module:function"`` string or a function."""
        if isinstance(value, RewardSpec):
            return value
        if isinstance(value, str) or _is_function(value):
            return cls(function=value)
        if isinstance(value, Mapping):
            known = [f.name for f in fields(cls)]
            unknown = sorted(set(value) - set(known))
            if unknown:
                raise RewardConfigError(f"{where}: unknown key(s) {unknown}; a reward function takes {known}")
            if "function" not in value:
                raise RewardConfigError(f"{where}: 'function' is required, e.g. function: my_pkg.rewards:exact_answer")
            return cls(**dict(value))
        raise RewardConfigError(
            f"{where} must be a mapping (function, weight, name, timeout_s, batch, kwargs) or a 'module:function' string, "
            f"got {type(value).__name__}"
        )

    @property
    def component(self) -> str:
        """The name of this function's value in ``reward_components``."""
        if self.name is not None:
            return self.name
        if not isinstance(self.function, str):
            return str(getattr(self.function, "__name__", type(self.function).__name__))
        return self.function.rpartition(":")[2].rpartition(".")[2]

    def check(self, where: str = "rewards") -> RewardSpec:
        """Check the values (not the import path; ``load`` does that); returns ``self``."""
        if not (_is_function(self.function) or _is_evaluator_class(self.function)) and (
            not isinstance(self.function, str) or self.function.count(":") != 1 or not all(self.function.split(":"))
        ):
            raise RewardConfigError(
                f"{where}.function {self.function!r} must look like 'package.module:function' (an import path, "
                "a colon, a name), or be the function itself"
            )
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not math.isfinite(self.weight):
            raise RewardConfigError(f"{where}.weight must be a finite number (negative for a penalty), got {self.weight!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not (
            math.isfinite(self.timeout_s) and self.timeout_s > 0
        ):
            raise RewardConfigError(f"{where}.timeout_s must be a number of seconds > 0, got {self.timeout_s!r}")
        if not isinstance(self.batch, bool):
            raise RewardConfigError(f"{where}.batch must be true or false, got {self.batch!r}")
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise RewardConfigError(f"{where}.kwargs must be a mapping of keyword arguments, got {self.kwargs!r}")
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise RewardConfigError(f"{where}.name must be a non-empty string (or left out), got {self.name!r}")
        if self.component.startswith(ENV_COMPONENT_PREFIX):
            raise RewardConfigError(
                f"{where}.name {self.component!r}: names starting with {ENV_COMPONENT_PREFIX!r} are the components "
                "of env episode rewards; choose another name"
            )
        return self

    def load(self, where: str = "rewards") -> Any:
        """The function (or ``Env`` class) at ``function``; ``RewardConfigError`` when it cannot be
        imported or is neither."""
        if not isinstance(self.function, str):
            return self.check(where).function
        obj = load_object(self.function, what=f"{where}.function", error=RewardConfigError)
        if not (_is_function(obj) or _is_evaluator_class(obj)):
            raise RewardConfigError(
                f"{where}.function {self.function!r} is a {type(obj).__name__}, not a function; name a function "
                "that takes the finished trajectory and returns a number (or an Env class, whose evaluate scores "
                "a batch)"
            )
        return obj

    def bind(self, where: str = "rewards") -> tuple[Callable[[Any], Any], bool]:
        """``(callable, batch)``: the loaded function with ``kwargs`` bound, or a built ``Env``'s ``evaluate``
        (batch mode). An ``Env`` that cannot be built raises ``RewardConfigError``."""
        obj = self.load(where)
        kwargs = dict(self.kwargs)
        if not _is_evaluator_class(obj):
            return (functools.partial(obj, **kwargs) if kwargs else obj), self.batch
        try:
            instance = obj(**kwargs)
        except Exception as exc:
            raise RewardConfigError(
                f"{where}: cannot build {self.function!r} with kwargs {kwargs}: {type(exc).__name__}: {exc}; fix its kwargs"
            ) from exc
        return instance.evaluate, True


def _is_function(value: Any) -> bool:
    """A callable that is not a class (a class would be instantiated, not scored with)."""
    return callable(value) and not inspect.isclass(value)


def _is_evaluator_class(value: Any) -> bool:
    """A class with an ``evaluate`` method, such as an ``Env``: built once, it scores whole batches."""
    return inspect.isclass(value) and callable(getattr(value, "evaluate", None))


def check_reward_specs(values: Any, *, load: bool = True) -> list[RewardSpec]:
    """The reward functions of a rollout as checked ``RewardSpec`` objects (mappings and strings are
    converted). Component names must be unique; with ``load`` every function is imported as well."""
    if values is None:
        return []
    if isinstance(values, (str, Mapping)) or not isinstance(values, Sequence):
        raise RewardConfigError(
            f"rewards must be a list of reward functions (mappings with 'function'), got {type(values).__name__}"
        )
    specs = [RewardSpec.from_value(v, f"rewards[{i}]").check(f"rewards[{i}]") for i, v in enumerate(values)]
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.component in seen:
            raise RewardConfigError(
                f"rewards[{i}]: the name {spec.component!r} is taken by rewards[{seen[spec.component]}]; give one of "
                "them a distinct 'name'"
            )
        seen[spec.component] = i
        if load:
            spec.load(f"rewards[{i}]")
    return specs
