"""A simulated Ray for driving the real ``RolloutFarm`` in one process: the calls ``actors/driver.py``
makes (``remote``, ``wait``, ``get``, ``put``, ``kill``, ``ray.exceptions``) on a virtual clock, so a
farm of 1,000 engines fits on two cores. Used by ``bench/farm_scale.py`` and its test only.

Time: the virtual clock runs at real speed while the driver works (its own CPU time between calls
into this module), and jumps to the next completion when the driver blocks in ``wait``/``get`` with
nothing ready; time spent inside this module does not count. Each actor runs its calls one after the
other (as a synchronous Ray actor does), each taking what the actor's ``latency(method, args)`` says,
unless the actor schedules its calls itself (``schedule(now, duration)`` returns when one finishes).
Results are the very objects the methods return: nothing is serialised, and there is no object
store, network or GCS.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import operator
import sys
import time
import types
from collections.abc import Iterator
from typing import Any


class RayTaskError(Exception):
    """A method raised; ``cause`` is its exception (as in Ray)."""

    def __init__(self, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


class RayActorError(Exception):
    """The actor was killed before the call finished."""


class GetTimeoutError(TimeoutError):
    """``get`` with a timeout found the result not ready."""


_is_done = operator.attrgetter("done")


class SimRef:
    """An ObjectRef: ready at ``ready_at`` on the virtual clock, holding a value or an error."""

    __slots__ = ("ready_at", "value", "error", "done", "actor", "__weakref__")

    def __init__(self, ready_at: float, value: Any = None, error: BaseException | None = None, actor: Any = None):
        self.ready_at, self.value, self.error, self.done, self.actor = ready_at, value, error, False, actor


class _Method:
    __slots__ = ("_actor", "_name")

    def __init__(self, actor: SimActor, name: str):
        self._actor, self._name = actor, name

    def options(self, **_: Any) -> _Method:
        return self

    def remote(self, *args: Any, **kwargs: Any) -> SimRef:
        return self._actor._call(self._name, args, kwargs)


class SimActor:
    """An actor handle: ``handle.method.remote(...)`` runs the method on the in-process instance now and
    hands back a ref that is ready once the actor's earlier calls and this one's latency have passed."""

    def __init__(self, ray: SimRay, instance: Any):
        self._ray, self._instance = ray, instance
        self._busy_until = 0.0
        self._pending: set[SimRef] = set()
        self.dead = False

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    def _call(self, name: str, args: tuple, kwargs: dict) -> SimRef:
        ray = self._ray
        with ray._inside():
            if self.dead:
                return ray._finish(SimRef(ray.now, error=RayActorError("the actor is dead")))
            value, error = None, None
            try:
                value = getattr(self._instance, name)(*args, **kwargs)
            except Exception as exc:
                error = RayTaskError(exc)
            duration = self._instance.latency(name, args)
            schedule = getattr(self._instance, "schedule", None)
            if schedule is not None:  # the instance models its own concurrency
                ready_at = schedule(ray.now, duration)
            else:  # one call at a time
                ready_at = self._busy_until = max(ray.now, self._busy_until) + duration
            ref = SimRef(ready_at, value, error, self)
            self._pending.add(ref)
            heapq.heappush(ray._heap, (ref.ready_at, next(ray._seq), ref))
            ray.calls["remote"] += 1
            return ref


class _ActorClass:
    def __init__(self, ray: SimRay, cls: type):
        self._ray, self._cls = ray, cls

    def options(self, **_: Any) -> _ActorClass:
        return self

    def remote(self, *args: Any, **kwargs: Any) -> SimActor:
        self._ray.calls["actors"] += 1
        return SimActor(self._ray, self._cls(*args, **kwargs))


class SimRay:
    """The state of one simulated cluster; ``install()`` makes it ``import ray`` for the driver."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, SimRef]] = []
        self._seq = itertools.count()
        self._left_at = time.perf_counter()
        self.inside_cpu_s = 0.0  # process CPU spent in this module (not the driver's)
        self.calls = {"remote": 0, "wait": 0, "get": 0, "put": 0, "kill": 0, "actors": 0}
        self.max_wait_refs = 0

    # -- the clock -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _inside(self) -> Iterator[None]:
        """Advance the clock by the driver's time since the last call, and keep this call's own time out."""
        cpu = time.process_time()
        self.now += time.perf_counter() - self._left_at
        try:
            yield
        finally:
            self._left_at = time.perf_counter()
            self.inside_cpu_s += time.process_time() - cpu

    def _settle(self) -> None:
        heap = self._heap
        while heap and heap[0][0] <= self.now:
            self._finish(heapq.heappop(heap)[2])

    def _finish(self, ref: SimRef) -> SimRef:
        ref.done = True
        if ref.actor is not None:
            ref.actor._pending.discard(ref)
        return ref

    def _jump(self, deadline: float | None) -> None:
        """Nothing the caller waits for is ready: move the clock to the next completion (or ``deadline``)."""
        if self._heap and (deadline is None or self._heap[0][0] <= deadline):
            self.now = max(self.now, self._heap[0][0])
            self._settle()
        elif deadline is not None:
            self.now = max(self.now, deadline)

    # -- what driver.py calls --------------------------------------------------------------------------

    def remote(self, cls: type | None = None, **_: Any) -> Any:
        if cls is None:
            return lambda c: _ActorClass(self, c)
        return _ActorClass(self, cls)

    def wait(
        self, refs: list[SimRef], *, num_returns: int = 1, timeout: float | None = None, fetch_local: bool = True
    ) -> tuple[list[SimRef], list[SimRef]]:
        if not isinstance(refs, list):
            raise TypeError("wait() expected a list of ObjectRef")
        with self._inside():
            self.calls["wait"] += 1
            self.max_wait_refs = max(self.max_wait_refs, len(refs))
            deadline = None if timeout is None else self.now + timeout
            while True:
                self._settle()
                flags = list(map(_is_done, refs))
                ready = flags.count(True)
                if ready >= num_returns or (deadline is not None and self.now >= deadline):
                    break
                if not self._heap:
                    if deadline is None:
                        raise RuntimeError("wait() would block forever: nothing is running")
                    self.now = deadline
                    break
                self._jump(deadline)
            done = list(itertools.compress(refs, flags))
            if ready <= num_returns:
                return done, list(itertools.compress(refs, map(operator.not_, flags)))
            chosen = set(done[:num_returns])
            return done[:num_returns], [r for r in refs if r not in chosen]

    def get(self, ref: SimRef, *, timeout: float | None = None) -> Any:
        with self._inside():
            self.calls["get"] += 1
            self._settle()
            if not ref.done:
                if timeout is not None and ref.ready_at > self.now + timeout:
                    self.now += timeout
                    raise GetTimeoutError("result not ready")
                while not ref.done:
                    self._jump(None)
            if ref.error is not None:
                raise ref.error
            return ref.value

    def put(self, value: Any) -> SimRef:
        with self._inside():
            self.calls["put"] += 1
            return self._finish(SimRef(self.now, value))

    def kill(self, handle: SimActor, *, no_restart: bool = True) -> None:
        """Kill the actor: every call it has not finished fails now with ``RayActorError``."""
        with self._inside():
            self.calls["kill"] += 1
            handle.dead = True
            for ref in list(handle._pending):
                ref.value, ref.error, ref.ready_at = None, RayActorError("the actor was killed"), self.now
                self._finish(ref)

    # -- installing ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def install(self) -> Iterator[SimRay]:
        """Make ``import ray`` and ``ray.exceptions`` this simulation inside the block; the previous
        modules (real Ray, if imported) are put back afterwards."""
        exceptions = types.ModuleType("ray.exceptions")
        exceptions.RayTaskError, exceptions.RayActorError, exceptions.GetTimeoutError = (
            RayTaskError,
            RayActorError,
            GetTimeoutError,
        )
        module = types.ModuleType("ray")
        for name in ("remote", "wait", "get", "put", "kill"):
            setattr(module, name, getattr(self, name))
        module.is_initialized = lambda: False  # no metrics endpoint: twinkle_agentic.metrics records nothing
        module.exceptions = exceptions
        saved = {name: sys.modules.get(name) for name in ("ray", "ray.exceptions")}
        sys.modules["ray"], sys.modules["ray.exceptions"] = module, exceptions
        self._left_at = time.perf_counter()
        try:
            yield self
        finally:
            for name, old in saved.items():
                if old is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = old
