"""The pipeline as configured: step specs from YAML, step objects, and their grouping into stages.

A step entry in ``steps:`` is one of

- ``HardFilter`` - an export of ``twinkle_agentic.preprocessor``, default arguments;
- ``{HardFilter: {min_user_chars: 10}}`` - with keyword arguments;
- ``{"my_pkg.steps:MyFilter": {...}}`` - any importable callable step (``module:attribute``);
- any of these plus stage options beside the name: ``{PIIPresidioFilter: {...}, actors: 2,
  batch_size: 64}``.

Grouping into Ray Data stages: consecutive cheap steps share one ``map_batches`` stage (rows are
decoded once for all of them); a step whose class sets ``needs_actor = True`` gets a stage of its
own run by an actor pool, so its models load once per actor (in ``warmup()`` when it has one); a
``DedupFilter`` becomes the global dedup shuffle. Everything here is plain Python and unit-tested
without Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.checks import check_positive
from twinkle_agentic.errors import ConfigError as BaseConfigError
from twinkle_agentic.loading import load_object
from twinkle_agentic.preprocessor.pipeline import is_global
from twinkle_agentic.preprocessor.quality import step_name

from .step_kwargs import kwargs_problem

STAGE_OPTIONS = ("actors", "batch_size")
# Exports of twinkle_agentic.preprocessor that are not steps.
NOT_STEPS = ("Filter", "Mapper", "PipelineRun", "StepStats", "merge_log_shards", "run_pipeline")


class ConfigError(BaseConfigError):
    """The pipeline configuration is invalid; the message names the entry and the fix."""


@dataclass
class StepSpec:
    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    actors: int | None = None
    batch_size: int | None = None

    def to_config(self) -> Any:
        """The YAML form of this entry (for --dry-run and stats.json)."""
        options = {k: getattr(self, k) for k in STAGE_OPTIONS if getattr(self, k) is not None}
        if not self.kwargs and not options:
            return self.name
        return {self.name: dict(self.kwargs), **options}


def positive_int(value: Any, label: str) -> int:
    return check_positive(label, value, integer=True, error=ConfigError)


def parse_step(entry: Any, index: int) -> StepSpec:
    where = f"steps[{index}]"
    if isinstance(entry, str):
        return StepSpec(entry)
    if not isinstance(entry, dict) or not entry:
        raise ConfigError(f"{where}: expected a step name or {{StepName: {{kwargs}}}}, got {entry!r}")
    names = [k for k in entry if k not in STAGE_OPTIONS]
    if len(names) != 1:
        raise ConfigError(
            f"{where}: expected exactly one step name beside the options {STAGE_OPTIONS}, got keys {list(entry)}"
        )
    name = names[0]
    kwargs = entry[name]
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{where}: the arguments of {name} must be a mapping, got {kwargs!r}")
    spec = StepSpec(str(name), dict(kwargs))
    for option in STAGE_OPTIONS:
        if option in entry:
            setattr(spec, option, positive_int(entry[option], f"{where}.{option}"))
    return spec


def parse_steps(entries: Any) -> list[StepSpec]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"steps must be a list, got {type(entries).__name__}")
    return [parse_step(entry, i) for i, entry in enumerate(entries)]


def resolve_step_class(name: str) -> Any:
    if ":" in name:
        return load_object(name, what="step", error=ConfigError)
    import twinkle_agentic.preprocessor as library

    if name not in library.__all__ or name in NOT_STEPS:
        known = ", ".join(n for n in library.__all__ if n not in NOT_STEPS)
        raise ConfigError(f"unknown step {name!r}; known steps: {known}; or use 'module:Class' for your own")
    try:
        return getattr(library, name)
    except ImportError as exc:
        raise ConfigError(f"step {name!r} is not available in this installation: {exc}") from exc


def build_step(spec: StepSpec) -> Any:
    factory = resolve_step_class(spec.name)
    problem = kwargs_problem(factory, spec.kwargs)
    if problem:
        raise ConfigError(f"step {spec.name}: {problem}")
    try:
        step = factory(**spec.kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"step {spec.name} with {spec.kwargs}: {exc}") from exc
    if not callable(step):
        raise ConfigError(f"step {spec.name} built a {type(step).__name__}, which is not callable")
    return step


@dataclass
class Stage:
    """One Ray Data stage: ``map`` (task pool), ``actor`` (actor pool) or ``dedup`` (shuffle)."""

    kind: str
    positions: list[int] = field(default_factory=list)
    parse: bool = False
    # For map/actor stages: the DedupFilter that follows, whose keys this stage computes.
    dedup_next: Any = None
    actors: int | None = None
    batch_size: int | None = None

    def describe(self, names: list[str]) -> str:
        parts = (["parse"] if self.parse else []) + [names[p] for p in self.positions]
        label = {"map": "map_batches", "actor": "map_batches (actor pool)", "dedup": "dedup shuffle"}[
            self.kind
        ]
        extra = " + dedup keys" if self.dedup_next is not None else ""
        return f"{label}: {' -> '.join(parts) or '(nothing)'}{extra}"


def needs_actor(step: Any) -> bool:
    return bool(getattr(step, "needs_actor", False))


def plan_stages(steps: list[Any], specs: list[StepSpec] | None = None) -> list[Stage]:
    """Group steps into stages; the first stage also parses the raw records."""
    specs = specs or [StepSpec(step_name(s)) for s in steps]
    stages: list[Stage] = []
    for position, step in enumerate(steps):
        spec = specs[position]
        if is_global(step):
            if not stages or stages[-1].kind == "dedup":
                stages.append(Stage("map"))
            stages[-1].dedup_next = step
            stages.append(Stage("dedup", [position]))
        elif needs_actor(step):
            stages.append(Stage("actor", [position], actors=spec.actors, batch_size=spec.batch_size))
        else:
            last = stages[-1] if stages else None
            if last is None or last.kind != "map" or last.dedup_next is not None:
                stages.append(Stage("map"))
                last = stages[-1]
            last.positions.append(position)
            if spec.batch_size is not None:
                last.batch_size = min(last.batch_size or spec.batch_size, spec.batch_size)
    if not stages or stages[0].kind != "map":
        stages.insert(0, Stage("map"))
    stages[0].parse = True
    return stages
