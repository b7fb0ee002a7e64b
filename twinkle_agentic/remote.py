"""``@remote_class``: the same class, usable locally or as a Ray actor.

``Cls(...)`` builds a local object and never touches Ray. ``Cls.remote(...)`` and
``Cls.options(**overrides).remote(...)`` build a Ray actor of ``ray.remote(Cls)``. Ray is imported
only when an actor is requested, so the library imports without it.

``remote`` and ``options`` are installed as descriptors that return plain callable objects (not
functions or methods), so Ray does not mistake them for actor methods when it wraps the class.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

DEFAULT_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 1, "num_gpus": 0, "max_concurrency": 1}
ALLOWED_OPTIONS = frozenset(
    {
        "name",
        "namespace",
        "num_cpus",
        "num_gpus",
        "memory",
        "resources",
        "accelerator_type",
        "scheduling_strategy",
        "runtime_env",
        "max_concurrency",
        "max_restarts",
        "max_task_retries",
        "lifetime",
        "get_if_exists",
        "concurrency_groups",
    }
)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Cls.remote(...) needs Ray: pip install 'ray[default]' (or install twinkle-agentic with its "
            "base dependencies)"
        ) from exc
    if not ray.is_initialized():
        ray.init()  # honours RAY_ADDRESS; otherwise starts or joins a local cluster
    return ray


def _check_options(options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - ALLOWED_OPTIONS)
    if unknown:
        raise TypeError(
            f"unknown actor option(s) {unknown}; allowed: {sorted(ALLOWED_OPTIONS)}"
        )


class _DropOverwriteWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "overwrites attribute remote" not in record.getMessage()


def _ray_remote_quietly(ray: Any, cls: type) -> Any:
    """``ray.remote(cls)`` without Ray's warning that its ``remote`` shadows ours (that is intended)."""
    logger = logging.getLogger("ray.actor")
    quiet = _DropOverwriteWarning()
    logger.addFilter(quiet)
    try:
        return ray.remote(cls)
    finally:
        logger.removeFilter(quiet)


class ActorLauncher:
    """Builds Ray actors of one class with a fixed set of actor options."""

    def __init__(self, cls: type, options: dict[str, Any]):
        _check_options(options)
        self._cls = cls
        self._options = options

    def options(self, **overrides: Any) -> ActorLauncher:
        return ActorLauncher(self._cls, {**self._options, **overrides})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        ray = _import_ray()
        actor_cls = self._cls.__dict__.get("_ray_actor_class")
        if actor_cls is None:
            actor_cls = _ray_remote_quietly(ray, self._cls)
            type.__setattr__(self._cls, "_ray_actor_class", actor_cls)
        return actor_cls.options(**self._options).remote(*args, **kwargs)

    __call__ = remote

    def __repr__(self) -> str:
        return f"ActorLauncher({self._cls.__qualname__}, {self._options})"


class _OptionsCaller:
    """``Cls.options(**overrides)``; an object rather than a method so Ray does not export it."""

    def __init__(self, launcher: ActorLauncher):
        self._launcher = launcher

    def __call__(self, **overrides: Any) -> ActorLauncher:
        return self._launcher.options(**overrides)


class _LauncherDescriptor:
    def __init__(self, defaults: dict[str, Any], attribute: str):
        self._defaults = defaults
        self._attribute = attribute

    def __get__(self, instance: Any, owner: type) -> Any:
        if instance is not None:
            raise AttributeError(
                f"{self._attribute!r} is a class attribute: call {owner.__name__}.{self._attribute}(...)"
            )
        launcher = ActorLauncher(owner, dict(self._defaults))
        return launcher if self._attribute == "remote" else _OptionsCaller(launcher)


def remote_class(**default_actor_options: Any):
    """Class decorator adding ``Cls.remote(...)`` and ``Cls.options(...).remote(...)``.

    ``default_actor_options`` override the defaults ``num_cpus=1, num_gpus=0, max_concurrency=1``.
    """
    defaults = {**DEFAULT_ACTOR_OPTIONS, **default_actor_options}
    _check_options(defaults)

    def decorate(cls: T) -> T:
        cls.remote = _LauncherDescriptor(defaults, "remote")
        cls.options = _LauncherDescriptor(defaults, "options")
        return cls

    return decorate
