"""Event loops we own: which implementation (``uvloop``, libuv-based and cheaper per I/O event
than the stdlib selector loop, when it is installed), and ``KeptLoop``, one loop kept across
blocking calls so that connections made on it are reused."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import selectors
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

EVENT_LOOPS = ("auto", "uvloop", "asyncio", "precise")
T = TypeVar("T")


def check_event_loop(name: Any) -> str:
    if name not in EVENT_LOOPS:
        raise ValueError(f"event_loop must be one of {EVENT_LOOPS}, got {name!r}")
    if name == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError as exc:
            raise ValueError("event_loop='uvloop' needs the uvloop package (pip install uvloop)") from exc
    return name


def precise_loop() -> asyncio.AbstractEventLoop:
    """The stdlib loop on ``select()``, whose timeouts are in microseconds: timers fire on time.

    epoll (the stdlib default) and libuv (uvloop) wait in whole milliseconds, so a timer fires up to
    a millisecond early or late, and timers due within the same millisecond fire together. For a
    server that injects latency that means answers before the latency is up and answers in bursts.
    ``select()`` watches at most ``FD_SETSIZE`` (1024) descriptors: for servers with few connections.
    """
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


def loop_factory(name: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A factory for ``asyncio.Runner``; None means the standard loop."""
    name = check_event_loop(name)
    if name == "asyncio":
        return None
    if name == "precise":
        return precise_loop
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(coroutine: Coroutine[Any, Any, T], event_loop: str = "auto") -> T:
    """``asyncio.run`` on the chosen loop implementation."""
    with asyncio.Runner(loop_factory=loop_factory(event_loop)) as runner:
        return runner.run(coroutine)


class KeptLoop:
    """An event loop kept between blocking calls, so that what lives on it (an API client's
    keep-alive connections and TLS sessions) serves the next call instead of being rebuilt.

    ``run(coroutine, holder)`` runs on it from any thread, one call at a time; a call that finds
    it busy (another thread) runs on a fresh loop instead. ``holder.session()`` (an async context
    manager, e.g. ``OpenAI.session``) is entered on the first call and held open until ``close()``.
    """

    def __init__(self, event_loop: str = "auto"):
        self.event_loop = check_event_loop(event_loop)
        self._runner = asyncio.Runner(loop_factory=loop_factory(event_loop))
        self._lock = threading.Lock()
        self._sessions = contextlib.AsyncExitStack()
        self._held: dict[int, Any] = {}
        self._closed = False

    def run(self, coroutine: Coroutine[Any, Any, T], holder: Any = None) -> T:
        if not self._lock.acquire(blocking=False):
            return run(coroutine, self.event_loop)
        try:
            if self._closed:
                coroutine.close()
                raise RuntimeError("this event loop was closed")
            result: list[T] = []
            self._runner.run(self._holding(coroutine, holder, result))
            return result[0]
        finally:
            self._lock.release()

    async def _holding(self, coroutine: Coroutine[Any, Any, T], holder: Any, result: list[T]) -> None:
        """Run ``coroutine`` inside ``holder``'s session; its value goes to ``result``, not to the
        runner's task. (In the main thread, ``asyncio.Runner`` formats the ``repr`` of its task,
        result included, when it restores the SIGINT handler: ~3 ms for a batch of 1,000
        trajectories.)"""
        session = getattr(holder, "session", None)
        if callable(session) and id(holder) not in self._held:
            try:
                await self._sessions.enter_async_context(session())
            except BaseException:
                coroutine.close()
                raise
            self._held[id(holder)] = holder
        result.append(await coroutine)

    def close(self) -> None:
        """Close the held sessions (their connections) and the loop; idempotent.

        Also safe where another event loop runs in this thread (a finalizer called by the garbage
        collector inside async code): the kept loop is then closed from a helper thread."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._close()
            return
        closer = threading.Thread(target=self._close, name="kept-loop-close")
        closer.start()
        closer.join()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._held:
                    self._runner.run(self._sessions.aclose())
            finally:
                self._held.clear()
                self._runner.close()


_retired: queue.SimpleQueue[KeptLoop] = queue.SimpleQueue()
_reaper: threading.Thread | None = None
_reaper_lock = threading.Lock()


def _reap() -> None:
    while True:
        loop = _retired.get()
        with contextlib.suppress(Exception):  # nobody is left to tell
            loop._close()


def close_when_collected(owner: Any, loop: KeptLoop) -> None:
    """Close ``loop`` once ``owner`` is garbage collected, on a reaper thread started here.

    A finalizer runs in whatever thread the collector interrupts, possibly inside ``threading``'s own
    bookkeeping while it holds the lock every thread start and join needs; closing the loop there
    (its runner joins its executor's threads) would deadlock. The finalizer only queues the loop
    (``SimpleQueue.put`` is safe from finalizers)."""
    global _reaper
    with _reaper_lock:
        if _reaper is None:
            _reaper = threading.Thread(target=_reap, name="kept-loop-reaper", daemon=True)
            _reaper.start()
    weakref.finalize(owner, _retired.put, loop)
