"""The configured steps grouped into Ray Data stages.

Step entries are parsed and built by :mod:`twinkle_agentic.preprocessor.step_specs` (shared with the
one-process runner). Grouping: consecutive cheap steps share one ``map_batches`` stage (rows are
decoded once for all of them); a step whose class sets ``needs_actor = True`` gets a stage of its
own run by an actor pool, so its models load once per actor (in ``warmup()`` when it has one); a
``DedupFilter`` becomes the global dedup shuffle, a ``NearDedupFilter`` the near-duplicate exchange
(:mod:`.near_exchange`). Everything here is plain Python and unit-tested without Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.preprocessor.near_dedup import NearDedupFilter
from twinkle_agentic.preprocessor.pipeline import is_global
from twinkle_agentic.preprocessor.quality import step_name
from twinkle_agentic.preprocessor.step_specs import (  # noqa: F401  (the job's names for them)
    STAGE_OPTIONS,
    StepSpec,
    build_step,
    parse_step,
    parse_steps,
    positive_int,
)
from twinkle_agentic.preprocessor.step_specs import PipelineConfigError as ConfigError  # noqa: F401


def pool_size(stage: Stage, actors: int, max_actors: int | None) -> tuple[int, int]:
    """``(min, max)`` actors of a model stage's pool: its own options, else the job's; equal for a
    fixed-size pool. Refuses a maximum below the minimum."""
    low = stage.actors or actors
    high = stage.max_actors or max_actors or low
    if high < low:
        raise ConfigError(
            f"max_actors={high} is below actors={low} for the stage {stage.kind} of steps {stage.positions}; "
            "set max_actors >= actors (or leave it unset for a fixed pool)"
        )
    return low, high


@dataclass
class Stage:
    """One Ray Data stage: ``map`` (task pool), ``actor`` (actor pool), ``dedup`` (shuffle) or
    ``near`` (the NearDedupFilter exchange: four sorts of the frames, and rounds on its links)."""

    kind: str
    positions: list[int] = field(default_factory=list)
    parse: bool = False
    # For map/actor stages: the DedupFilter that follows, whose keys this stage computes.
    dedup_next: Any = None
    actors: int | None = None
    max_actors: int | None = None
    batch_size: int | None = None

    def describe(self, names: list[str]) -> str:
        parts = (["parse"] if self.parse else []) + [names[p] for p in self.positions]
        label = {
            "map": "map_batches",
            "actor": "map_batches (actor pool)",
            "dedup": "dedup shuffle",
            "near": "near-dedup exchange (bands, verify, decide in rounds, mark)",
        }[self.kind]
        extra = " + dedup keys" if self.dedup_next is not None else ""
        if self.kind == "actor" and self.actors:
            extra += f" ({self.actors} actors)" if self.max_actors in (None, self.actors) else f" ({self.actors}-{self.max_actors} actors)"
        return f"{label}: {' -> '.join(parts) or '(nothing)'}{extra}"


def needs_actor(step: Any) -> bool:
    return bool(getattr(step, "needs_actor", False))


def plan_stages(steps: list[Any], specs: list[StepSpec] | None = None) -> list[Stage]:
    """Group steps into stages; the first stage also parses the raw records."""
    specs = specs or [StepSpec(step_name(s)) for s in steps]
    stages: list[Stage] = []
    for position, step in enumerate(steps):
        spec = specs[position]
        if isinstance(step, NearDedupFilter):
            stages.append(Stage("near", [position]))
        elif is_global(step):
            if not stages or stages[-1].kind in ("dedup", "near"):
                stages.append(Stage("map"))
            stages[-1].dedup_next = step
            stages.append(Stage("dedup", [position]))
        elif needs_actor(step):
            stages.append(
                Stage(
                    "actor", [position], actors=spec.actors, max_actors=spec.max_actors, batch_size=spec.batch_size
                )
            )
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
