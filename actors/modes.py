"""Rollout modes: how a worker turns a batch of prompts into trajectories on its engine.

A mode owns the engine and the rollout implementation. The worker picks it from ``EngineConfig.mode``:
a registered name (``MODES`` maps names to lazy ``"module:Class"`` strings) or a ``"module:Class"``
path itself. A path works everywhere; a name added with ``register_mode`` at run time is known only in
the process that registered it, so built-in modes belong in ``MODES``: ``sync`` (``MultiTurnRollout``,
one batched ``sample`` per turn) and ``async`` (``AsyncMultiTurnRollout``, every trajectory on its own
over vLLM's async engine; ``actors/async_mode.py``). A new mode plugs in without changes to the worker,
the driver or the job. A mode class implements:

    __init__(engine: EngineConfig, spec: RolloutSpec, recorder: ActivityRecorder)   # starts the engine
    concurrent_batches: bool           # may two generate() calls share the engine at once?
    ready() -> dict                    # model, max_model_len, device
    rollout(trajectories, managers) -> list[Trajectory]   # one manager per trajectory, same order
    healthy() -> bool                  # False once the engine is unusable (the driver restarts the worker)
    shutdown() -> None
    check_options(options: dict) -> dict   # optional staticmethod: validates RolloutSpec.mode_options
    apply_update(update, *, version, on_update) -> dict   # optional: load new weights (see EngineMode)

Timing contract: every generation request runs inside ``recorder.span("engine")``; tool calls are
timed by the managers they are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twinkle_agentic.data_format import SamplingParams, Trajectory
from twinkle_agentic.loading import load_object

MODES: dict[str, str] = {"sync": "twinkle_agentic.actors.modes:SyncRollout", "async": "twinkle_agentic.actors.async_mode:AsyncRollout"}


def register_mode(name: str, import_path: str) -> None:
    """Make ``EngineConfig(mode=name)`` build workers with the class at ``"module:Class"``."""
    from .config import FarmConfigError

    if not isinstance(name, str) or not name or ":" not in import_path:
        raise FarmConfigError(f"register_mode needs a name and a 'module:Class' path, got {name!r}, {import_path!r}")
    MODES[name] = import_path


def available_modes() -> set[str]:
    return set(MODES)


def is_known_mode(mode: str) -> bool:
    return mode in MODES or (isinstance(mode, str) and mode.count(":") == 1 and all(mode.split(":")))


def mode_class(mode: str) -> type:
    """The class of a registered mode name or of a ``"module:Class"`` path."""
    from .config import FarmConfigError

    if not is_known_mode(mode):
        raise FarmConfigError(f"unknown rollout mode {mode!r}; choose one of {sorted(MODES)}, or give 'module:Class'")
    return load_object(MODES.get(mode, mode), what="rollout mode", error=FarmConfigError)


def check_mode_options(mode: str, options: dict[str, Any]) -> dict[str, Any]:
    """``RolloutSpec.mode_options`` checked by the mode's ``check_options`` (a mode without one takes none).

    A ``"module:Class"`` mode given no options is not imported here (it may exist only on the workers)."""
    from .config import FarmConfigError

    if not options and mode not in MODES:
        return {}
    try:
        cls = mode_class(mode)
    except FarmConfigError as exc:
        raise FarmConfigError(f"{exc} (imported here to check its mode_options)") from exc
    check = getattr(cls, "check_options", None)
    if check is None:
        if options:
            raise FarmConfigError(f"mode {mode!r} takes no mode_options, got {sorted(options)}")
        return {}
    return check(options)


def engine_template(engine: Any, spec: Any, sampler: Any) -> Any:
    """The chat template of ``engine.model`` with the spec's options; ``max_length`` defaults to the
    engine's context length."""
    from twinkle_agentic.template import Template

    template_kwargs = dict(spec.template)
    template_kwargs.setdefault("max_length", sampler.max_model_len)
    return Template(engine.model, **template_kwargs)


class TimedSampler:
    """A sampler whose ``sample`` calls are recorded as engine intervals; everything else passes through."""

    def __init__(self, sampler: Any, recorder: Any):
        self._sampler = sampler
        self._recorder = recorder
        self.device_mesh = getattr(sampler, "device_mesh", None)

    def sample(self, inputs: list[Any], sampling_params: SamplingParams | Sequence[SamplingParams] | None = None):
        with self._recorder.span("engine"):
            return self._sampler.sample(inputs, sampling_params)


class EngineMode:
    """What the built-in modes share: a sampler (``VLLMSampler`` or ``AsyncVLLMSampler``) whose weights
    can be updated, and health that turns false once the engine has died."""

    sampler: Any
    _dead: BaseException | None = None

    def ready(self) -> dict[str, Any]:
        return self.sampler.ready()

    def healthy(self) -> bool:
        return self._dead is None

    def apply_update(self, update: Any, *, version: int, on_update: str) -> dict[str, Any]:
        """Load a checked payload as ``version``; returns the engine's ``UpdateTimings`` as a dict."""
        self.sampler.apply_update(update, version=version, on_update=on_update)
        return self.sampler.last_update.to_dict()

    def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        self.sampler.init_weight_transfer(init_info)

    def close_weight_transfer(self) -> None:
        self.sampler.close_weight_transfer()


class SyncRollout(EngineMode):
    """``MultiTurnRollout`` over an offline vLLM engine: one batched ``sample`` per turn.

    The engine is not thread-safe, so the worker runs one batch at a time on it. A weight update
    waits for the turn being generated, then the batch's next turns run on the new weights.
    """

    concurrent_batches = False

    def __init__(self, engine: Any, spec: Any, recorder: Any):
        from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
        from twinkle_agentic.sampler import VLLMSampler

        self.sampler = VLLMSampler(engine.model, **engine.sampler_kwargs())
        self.template = engine_template(engine, spec, self.sampler)
        self.rollout_impl = MultiTurnRollout(
            TimedSampler(self.sampler, recorder),
            self.template,
            sampling_params=spec.sampling,
            max_turns=spec.max_turns,
            max_trajectory_tokens=spec.max_trajectory_tokens,
            tool_concurrency=spec.tool_concurrency,
            verify_tokens=spec.verify_tokens,
        )

    def rollout(self, trajectories: list[Trajectory], managers: list[Any]) -> list[Trajectory]:
        try:
            return self.rollout_impl(trajectories, tool_manager=managers)
        except Exception as exc:
            if "EngineDead" in type(exc).__name__ or "EngineDead" in str(exc):
                self._dead = exc
            raise

    def shutdown(self) -> None:
        self.sampler.shutdown()
