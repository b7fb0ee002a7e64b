"""Pipeline steps as configured: a YAML step entry parsed, checked and built into a step object.

A step entry (the ``steps:`` list of a pipeline config) is one of

- ``HardFilter`` - an export of ``twinkle_agentic.preprocessor``, default arguments;
- ``{HardFilter: {min_user_chars: 10}}`` - with keyword arguments;
- ``{"my_pkg.steps:MyFilter": {...}}`` - any importable callable step (``module:attribute``);
- any of these plus the job's stage options beside the name: ``{PIIPresidioFilter: {...}, actors: 2,
  max_actors: 8, batch_size: 64}`` (a model step's actor pool starts at ``actors`` and, with
  ``max_actors``, grows while work is queued and the cluster has room).

Keyword arguments are checked against the step's annotated parameters before anything runs, so
``min_user_chars: 10k`` is refused here, not in the first batch on a cluster. Both the one-process
runner and the Ray job build their steps through this module.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from twinkle_agentic.checks import check_positive, type_problem
from twinkle_agentic.errors import ConfigError
from twinkle_agentic.loading import load_object, load_yaml

DEFAULT_PIPELINE = "default_pipeline.yaml"

STAGE_OPTIONS = ("actors", "max_actors", "batch_size")
# Exports of twinkle_agentic.preprocessor that are not steps.
NOT_STEPS = ("Filter", "Mapper", "PipelineRun", "StepStats", "merge_log_shards", "run_pipeline")


class PipelineConfigError(ConfigError):
    """The pipeline configuration (its steps, inputs, output or options) is invalid; the message names
    the entry and the fix."""


@dataclass
class StepSpec:
    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    actors: int | None = None
    max_actors: int | None = None
    batch_size: int | None = None

    def to_config(self) -> Any:
        """The YAML form of this entry (for --dry-run and stats.json)."""
        options = {k: getattr(self, k) for k in STAGE_OPTIONS if getattr(self, k) is not None}
        if not self.kwargs and not options:
            return self.name
        return {self.name: dict(self.kwargs), **options}


def positive_int(value: Any, label: str) -> int:
    return check_positive(label, value, integer=True, error=PipelineConfigError)


def parse_step(entry: Any, index: int) -> StepSpec:
    where = f"steps[{index}]"
    if isinstance(entry, str):
        return StepSpec(entry)
    if not isinstance(entry, dict) or not entry:
        raise PipelineConfigError(f"{where}: expected a step name or {{StepName: {{kwargs}}}}, got {entry!r}")
    names = [k for k in entry if k not in STAGE_OPTIONS]
    if len(names) != 1:
        raise PipelineConfigError(
            f"{where}: expected exactly one step name beside the options {STAGE_OPTIONS}, got keys {list(entry)}"
        )
    name = names[0]
    kwargs = entry[name]
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise PipelineConfigError(f"{where}: the arguments of {name} must be a mapping, got {kwargs!r}")
    spec = StepSpec(str(name), dict(kwargs))
    for option in STAGE_OPTIONS:
        if option in entry:
            setattr(spec, option, positive_int(entry[option], f"{where}.{option}"))
    return spec


def parse_steps(entries: Any) -> list[StepSpec]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise PipelineConfigError(f"steps must be a list, got {type(entries).__name__}")
    return [parse_step(entry, i) for i, entry in enumerate(entries)]


def resolve_step_class(name: str) -> Any:
    if ":" in name:
        return load_object(name, what="step", error=PipelineConfigError)
    import twinkle_agentic.preprocessor as library

    if name not in library.__all__ or name in NOT_STEPS:
        known = ", ".join(n for n in library.__all__ if n not in NOT_STEPS)
        raise PipelineConfigError(f"unknown step {name!r}; known steps: {known}; or use 'module:Class' for your own")
    try:
        return getattr(library, name)
    except ImportError as exc:
        raise PipelineConfigError(f"step {name!r} is not available in this installation: {exc}") from exc


def build_step(spec: StepSpec) -> Any:
    factory = resolve_step_class(spec.name)
    problem = kwargs_problem(factory, spec.kwargs)
    if problem:
        raise PipelineConfigError(f"step {spec.name}: {problem}")
    try:
        step = factory(**spec.kwargs)
    except (TypeError, ValueError) as exc:
        raise PipelineConfigError(f"step {spec.name} with {spec.kwargs}: {exc}") from exc
    if not callable(step):
        raise PipelineConfigError(f"step {spec.name} built a {type(step).__name__}, which is not callable")
    return step


def kwargs_problem(factory: Any, kwargs: dict[str, Any]) -> str | None:
    """What is wrong with ``kwargs`` for ``factory`` (a class or function), judged by its
    annotations; None when nothing is, or when the annotations cannot be resolved."""
    target = factory.__init__ if isinstance(factory, type) else factory
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # annotations naming what this process cannot import: the constructor judges
        return None
    for name, value in kwargs.items():
        problem = type_problem(name, value, hints[name]) if name in hints else None
        if problem:
            return problem
    return None


def build_steps(entries: Any) -> list[Any]:
    """Step objects for a ``steps:`` list (names, ``{Name: {kwargs}}`` entries or step objects)."""
    if entries is None or isinstance(entries, (str, dict)):
        entries = [] if entries is None else [entries]
    return [
        entry if _is_step_object(entry) else build_step(parse_step(entry, i)) for i, entry in enumerate(entries)
    ]


def _is_step_object(entry: Any) -> bool:
    return not isinstance(entry, (str, dict)) and callable(entry)


def read_pipeline_config(path: str | None = None) -> tuple[dict[str, Any], str]:
    """(the mapping of a pipeline YAML file, a label naming it); ``None`` reads the bundled default."""
    if path is not None:
        return load_yaml(str(path), error=PipelineConfigError), str(path)
    bundled = resources.files("twinkle_agentic.jobs.configs").joinpath(DEFAULT_PIPELINE)
    with resources.as_file(bundled) as file:
        return load_yaml(str(file), error=PipelineConfigError), f"<bundled {DEFAULT_PIPELINE}>"
