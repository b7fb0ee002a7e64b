"""``RewardScorer``: the reward of finished trajectories, from reward functions and env episode rewards.

Every reward function is called once per trajectory with the finished trajectory (its ``messages``
with tool calls and tool results, its ``tools``, and every field of its prompt row, e.g.
``ground_truth``), all calls of a batch at once: ``async def`` functions on the scorer's event loop,
the others each on a thread of their own, so one deadline (``timeout_s``) holds for both kinds. Env
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
import logging
import math
import numbers
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twinkle_agentic.data_format import Trajectory
from twinkle_agentic.rollout.base import API_ERROR, ERROR, format_error

from .spec import ENV_COMPONENT_PREFIX, RewardSpec, check_reward_specs

logger = logging.getLogger(__name__)

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
    """Scores finished trajectories with ``specs`` (``RewardSpec`` objects, mappings or ``"module:function"``
    strings); the functions are imported once, here. ``score`` may be called from several threads."""

    def __init__(self, specs: Sequence[RewardSpec | Mapping[str, Any] | str] = (), *, max_threads: int = DEFAULT_MAX_THREADS):
        self.specs = check_reward_specs(list(specs), load=False)
        self._functions: list[tuple[RewardSpec, Callable[[Any], Any], bool]] = []
        for i, spec in enumerate(self.specs):
            function = spec.load(f"rewards[{i}]")
            self._functions.append((spec, function, _is_async(function)))
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

    async def _score_all(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        if self._slots is None:
            self._slots = _Slots(self.max_threads)
        await asyncio.gather(*(self._score_one(t) for t in trajectories if self.applies_to(t)))
        return trajectories

    async def _score_one(self, trajectory: Trajectory) -> None:
        stop_reason = trajectory.get("stop_reason")
        if stop_reason in UNSCORED_STOP_REASONS:
            trajectory.update({
                REWARD: None,
                COMPONENTS: {},
                REWARD_ERROR: f"not scored: the rollout ended with stop_reason {stop_reason!r}",
            })
            return
        outcomes = await asyncio.gather(*(self._call(spec, fn, is_async, trajectory) for spec, fn, is_async in self._functions))
        components: dict[str, float] = {}
        errors: list[str] = []
        total = 0.0
        for (spec, _, _), (value, error) in zip(self._functions, outcomes, strict=True):
            if error is not None:
                errors.append(error)
                continue
            components[spec.component] = value
            total += spec.weight * value
        for env, raw in (trajectory.get(ENV_REWARDS) or {}).items():
            name = f"{ENV_COMPONENT_PREFIX}{env}"
            try:
                value = _as_number(raw)
            except (TypeError, ValueError) as exc:
                errors.append(f"{name}: {exc}")
                continue
            components[name] = value
            total += value
        trajectory.update({
            REWARD: None if errors else total,
            COMPONENTS: components,
            REWARD_ERROR: "; ".join(errors) if errors else None,
        })

    async def _call(
        self, spec: RewardSpec, function: Callable[[Any], Any], is_async: bool, trajectory: Trajectory
    ) -> tuple[float | None, str | None]:
        """``(value, None)`` or ``(None, error)`` for one call of one function on one trajectory."""
        call = function(trajectory) if is_async else self._in_thread(spec, function, trajectory)
        try:
            task = asyncio.ensure_future(call)
        except Exception as exc:  # an async-declared callable that returned no awaitable
            return None, f"{spec.component}: {format_error(exc)}"
        done, _ = await asyncio.wait([task], timeout=spec.timeout_s)
        if not done:
            task.cancel()
            note = ""
            if self._slots is not None and self._slots.overrunning:
                note = f" ({self._slots.overrunning} sync reward calls that overran their deadline are still running)"
            return None, f"{spec.component}: timed out after {spec.timeout_s:g} s{note}"
        try:
            return _as_number(task.result()), None
        except _BadValue as exc:
            return None, f"{spec.component}: {exc}"
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
