"""``RewardScorer``: the reward of finished trajectories, from reward functions and env episode rewards.

Every reward function is called once per trajectory with the finished trajectory (its ``messages``
with tool calls and tool results, its ``tools``, and every field of its prompt row, e.g.
``ground_truth``), all calls of a batch at once: ``async def`` functions on the scorer's event loop,
the others each on a thread of their own, so one deadline (``timeout_s``) holds for both kinds. A
batch-mode function (``batch``, or an ``Env`` class's ``evaluate``) is called once with the list of
graded trajectories instead (an element that is an exception is that trajectory's error). Env
episode rewards the rollout recorded (``env_rewards``) join as components ``env:<name>`` of weight 1.

Each scored trajectory gets ``reward`` (the weighted sum), ``reward_components`` (``{name: value}``) and
``reward_error``. A function that raises, overruns its deadline or returns something other than a
finite number sets ``reward_error`` (naming it and what happened) and leaves ``reward`` None, on that
trajectory only: a failed grade is never a silent 0.0. Trajectories whose rollout failed are not
graded (``reward`` None, ``reward_error`` says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import numbers
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twinkle_agentic.data_format import Trajectory
from twinkle_agentic.rollout.base import API_ERROR, ERROR, format_error

from .spec import ENV_COMPONENT_PREFIX, RewardSpec, check_reward_specs

REWARD = "reward"
COMPONENTS = "reward_components"
REWARD_ERROR = "reward_error"
ENV_REWARDS = "env_rewards"
UNSCORED_STOP_REASONS = (ERROR, API_ERROR)
DEFAULT_MAX_THREADS = 32  # sync reward calls running at once in one scorer


class _Slots:
    """Threads for sync reward calls: at most ``size`` run at once, counting calls that overran their
    deadline until they really return (a thread cannot be stopped, so a hung function keeps its slot)."""

    def __init__(self, size: int):
        self.semaphore = asyncio.Semaphore(size)
        self.overrunning = 0


class RewardScorer:
    """Scores finished trajectories with ``specs`` (``RewardSpec`` objects, their mappings, ``"module:function"``
    strings or functions); functions are imported and ``Env`` classes built once, here. ``score`` may be
    called from several threads at once (a worker's concurrent batches)."""

    def __init__(self, specs: Sequence[RewardSpec | Mapping[str, Any] | str] = (), *, max_threads: int = DEFAULT_MAX_THREADS):
        self.specs = check_reward_specs(list(specs), load=False)
        self._functions: list[_Bound] = []
        for i, spec in enumerate(self.specs):
            function, batch = spec.bind(f"rewards[{i}]")
            self._functions.append(_Bound(spec, function, _is_async(function), batch))
        self.max_threads = max_threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._slots: _Slots | None = None
        self._start_lock = threading.Lock()

    def applies_to(self, trajectory: Trajectory) -> bool:
        """Whether ``trajectory`` gets reward fields: some reward function is configured, or it holds env rewards."""
        return bool(self._functions) or bool(trajectory.get(ENV_REWARDS))

    def score(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        """Set ``reward``, ``reward_components`` and ``reward_error`` on each trajectory it applies to
        (in place); returns the list. Never raises for a reward function's sake."""
        if not any(self.applies_to(t) for t in trajectories):
            return trajectories
        loop = self._ensure_loop()
        asyncio.run_coroutine_threadsafe(self._score_all(trajectories), loop).result()
        return trajectories

    async def _score_all(self, trajectories: list[Trajectory]) -> None:
        if self._slots is None:
            self._slots = _Slots(self.max_threads)
        graded = []
        for trajectory in trajectories:
            if not self.applies_to(trajectory):
                continue
            stop_reason = trajectory.get("stop_reason")
            if stop_reason in UNSCORED_STOP_REASONS:
                trajectory.update({
                    REWARD: None,
                    COMPONENTS: {},
                    REWARD_ERROR: f"not scored: the rollout ended with stop_reason {stop_reason!r}",
                })
            else:
                graded.append(trajectory)
        if not graded:
            return
        columns = await asyncio.gather(*(self._column(bound, graded) for bound in self._functions))
        for i, trajectory in enumerate(graded):
            _settle(trajectory, [(bound.spec, column[i]) for bound, column in zip(self._functions, columns, strict=True)])

    async def _column(self, bound: _Bound, graded: list[Trajectory]) -> list[Outcome]:
        """One function's outcome on each graded trajectory: a call each, or one call in batch mode."""
        name = bound.spec.component
        if not bound.batch:
            results = await asyncio.gather(*(self._call(bound, t) for t in graded))
            return [_outcome(name, result) for result in results]
        result, error = await self._call(bound, graded)
        if error is not None:
            return [(None, error)] * len(graded)
        if not isinstance(result, (list, tuple)) or len(result) != len(graded):
            got = f"{len(result)} values" if isinstance(result, (list, tuple)) else type(result).__name__
            problem = f"{name}: returned {got} for a batch of {len(graded)}; return one number per trajectory, in order"
            return [(None, problem)] * len(graded)
        return [
            (None, f"{name}: {format_error(value)}") if isinstance(value, Exception) else _outcome(name, (value, None))
            for value in result
        ]

    async def _call(self, bound: _Bound, argument: Any) -> tuple[Any, str | None]:
        """``(result, None)`` or ``(None, error)`` for one call of one function."""
        spec = bound.spec
        try:
            call = bound.function(argument) if bound.is_async else self._in_thread(spec, bound.function, argument)
            task = asyncio.ensure_future(call)
        except Exception as exc:  # an async-declared callable that raised at once or returned no awaitable
            return None, f"{spec.component}: {format_error(exc)}"
        done, _ = await asyncio.wait([task], timeout=spec.timeout_s)
        if not done:
            task.cancel()
            note = ""
            if not bound.is_async and self._slots is not None and self._slots.overrunning:  # threads held
                note = f" ({self._slots.overrunning} sync reward calls that overran their deadline are still running)"
            return None, f"{spec.component}: timed out after {spec.timeout_s:g} s{note}"
        try:
            return task.result(), None
        except Exception as exc:
            return None, f"{spec.component}: {format_error(exc)}"

    async def _in_thread(self, spec: RewardSpec, function: Callable[[Any], Any], trajectory: Trajectory) -> Any:
        """Run a sync function on a daemon thread of its own and await its result (cancellable: the thread
        then finishes unobserved, holding its slot until it returns)."""
        loop = asyncio.get_running_loop()
        slots = self._slots
        assert slots is not None
        await slots.semaphore.acquire()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            slots.semaphore.release()
            if future.done():  # the caller gave up (deadline): the slot is free again
                slots.overrunning -= 1
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def run() -> None:
            try:
                result = function(trajectory)
            except BaseException as exc:
                outcome: tuple[Any, BaseException | None] = (None, exc)
            else:
                outcome = (result, None)
            with contextlib.suppress(RuntimeError):  # the scorer was closed meanwhile
                loop.call_soon_threadsafe(settle, *outcome)

        threading.Thread(target=run, name=f"reward-{spec.component}", daemon=True).start()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():
                future.cancel()
                slots.overrunning += 1
            raise

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=serve, name="reward-scorer", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Stop the scorer's event loop (sync calls still running finish unobserved)."""
        with self._start_lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            if not thread.is_alive():
                loop.close()


Outcome = tuple[float | None, str | None]  # (value, None) or (None, error)


@dataclass(frozen=True)
class _Bound:
    """A checked spec with its loaded callable: ``is_async`` (awaited on the loop) and ``batch`` (one call
    per batch)."""

    spec: RewardSpec
    function: Callable[[Any], Any]
    is_async: bool
    batch: bool


def _outcome(name: str, result: tuple[Any, str | None]) -> Outcome:
    value, error = result
    if error is not None:
        return None, error
    try:
        return _as_number(value), None
    except _BadValue as exc:
        return None, f"{name}: {exc}"


def _settle(trajectory: Trajectory, outcomes: list[tuple[RewardSpec, Outcome]]) -> None:
    """Write the reward fields from the functions' outcomes and the trajectory's env rewards."""
    components: dict[str, float] = {}
    errors: list[str] = []
    total = 0.0
    for spec, (value, error) in outcomes:
        if error is not None:
            errors.append(error)
            continue
        components[spec.component] = value
        total += spec.weight * value
    for env, raw in (trajectory.get(ENV_REWARDS) or {}).items():
        name = f"{ENV_COMPONENT_PREFIX}{env}"
        try:
            value = _as_number(raw)
        except _BadValue as exc:
            errors.append(f"{name}: {exc}")
            continue
        components[name] = value
        total += value
    trajectory.update({
        REWARD: None if errors else total,
        COMPONENTS: components,
        REWARD_ERROR: "; ".join(errors) if errors else None,
    })


class _BadValue(ValueError):
    """A reward function returned something other than a finite number."""


def _as_number(value: Any) -> float:
    if isinstance(value, numbers.Real):  # bool, int, float, numpy scalars
        number = float(value)
        if math.isfinite(number):
            return number
        raise _BadValue(f"returned {value!r}, not a finite number")
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never awaited: close it rather than leave a warning behind
        raise _BadValue(f"returned an awaitable ({type(value).__name__}); declare the function 'async def'")
    text = repr(value)
    raise _BadValue(f"returned {text[:80]}{'...' if len(text) > 80 else ''} ({type(value).__name__}), not a number")


def _is_async(function: Callable[[Any], Any]) -> bool:
    """``async def`` functions, and objects whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(function):
        return True
    return not inspect.isroutine(function) and inspect.iscoroutinefunction(type(function).__call__)


def score_trajectories(trajectories: list[Trajectory], rewards: Sequence[RewardSpec | Mapping[str, Any] | str]) -> list[Trajectory]:
    """Score ``trajectories`` in place with ``rewards`` once (a scorer is built and closed here)."""
    scorer = RewardScorer(rewards)
    try:
        return scorer.score(trajectories)
    finally:
        scorer.close()
