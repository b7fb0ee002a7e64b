"""Overlapped rollout: the farm generates the next steps' groups while the trainer trains, with staleness bounded in policy versions.

One background thread owns the farm (``RolloutFarm`` is not thread-safe) and reads one farm run that
lasts the whole training, fed through a ``LiveFeed`` (``twinkle_agentic.rollout.feed``). Whenever a
batch comes back, or the trainer posts weights or sends a group back (which wakes the run), that
thread loads the newest posted weights (``farm.update_weights`` with ``on_update``; under
``abort_and_resume`` trajectories in flight go on under the new weights at once instead of holding
the update until they end) and then puts into the feed every group to regenerate, every failed
member to retry, and every step the gate (below) lets start. So a step starts the moment its
weights are loaded, while the slow tail of the step before is still in flight, and a step is handed
over as soon as its own groups are out. With ``run_steps=k`` (at most ``max_staleness + 1``) steps
are put ``k`` at a time, once the gate lets ``k`` start (or all the steps left), so that they
start on the same weights. The trainer's thread calls, once per step,
``next_step()`` (the step's complete groups) and ``finish_step(weights)`` (the step's new weights, or
None when weights are not pushed). Posted weights go to a one-slot mailbox: a newer post replaces an
older one not yet applied, so the farm always loads the newest weights and never a backlog.

Staleness is ``trainer_version - v``, where ``trainer_version`` is the version of the weights the
trainer last posted and ``v`` the oldest policy version of any token of the group (its members'
``policy_versions`` spans, else their ``policy_version``). Two rules keep it within
``max_staleness``:

- **gate**: step ``j`` starts rolling out only once the trainer has finished step ``j - max_staleness``
  (its ``finish_step``); the farm is at most ``max_staleness`` steps ahead, and with
  ``max_staleness=0`` the loop is synchronous;
- **check at hand-over**: ``next_step`` hands a group over only if its staleness is at most
  ``max_staleness``; a staler group (a worker that served old weights, a trainer that posts more
  than once per step) is counted in ``stale_groups`` and, by ``on_stale``, rolled out again from its
  inputs (``regenerate``: ``next_step`` waits for it) or dropped (``drop``, counted in
  ``dropped_groups``).

Every group of a step is handed over or counted as dropped; an error in the background thread is
raised in the trainer's thread by the next ``next_step``, ``finish_step`` or ``close``.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from twinkle_agentic.errors import ConfigError
from twinkle_agentic.sampler.weights import ON_UPDATE_MODES

from .feed import LiveFeed
from .groups import GroupCollector, GroupConfig

ON_STALE = ("regenerate", "drop")
POLL_S = 0.2  # how often a waiting next_step checks that the background thread is alive


class Farm(Protocol):
    """What the overlap needs of a farm (``RolloutFarm``)."""

    policy_version: int

    def run(self, trajectories: LiveFeed) -> Iterable[Any]: ...

    def update_weights(self, weights: Any, *, version: int | None = None) -> int: ...

    # also ``update_weights(..., on_update=mode)`` when ``OverlappedRollout`` is given ``on_update``;
    # ``run`` takes a ``LiveFeed``: it yields batches (``.trajectories``), and an empty one on ``wake``


@dataclass
class OverlapStep:
    """One step's groups as handed to the trainer, with how they were obtained."""

    step: int
    groups: list[list[dict[str, Any]]]
    trainer_version: int  # the version of the weights the trainer last posted when it got them
    oldest_version: int | None  # the oldest policy version of any handed token (None: no versions)
    stale_groups: int = 0  # groups of this step found staler than max_staleness
    regenerated_groups: int = 0  # of those, rolled out again (and handed over fresh)
    dropped_groups: int = 0  # of those, dropped (on_stale="drop")
    failed_groups: int = 0  # handed groups marked failed (group_failed)
    retried_members: int = 0  # failed members rolled out again in a fresh rollout
    rollout_s: float = 0.0  # from when the step was put into the feed to its last group (regenerations added)
    wait_s: float = 0.0  # how long next_step waited for it
    queued_s: float = 0.0  # from when the gate let the step start to when it was put into the feed

    @property
    def staleness(self) -> int:
        """The largest staleness among the handed groups (0 when there are no versions)."""
        return 0 if self.oldest_version is None else self.trainer_version - self.oldest_version


@dataclass
class _Pending:
    """A step as the trainer's side collects it from the background thread."""

    arrived: deque = field(default_factory=deque)  # (group, its inputs, regenerated) not yet judged
    ended: bool = False
    regenerating: int = 0  # groups sent back to be rolled out again and not yet returned
    rollout_s: float = 0.0
    retried_members: int = 0
    queued_s: float = 0.0


def oldest_version(trajectory: Mapping[str, Any]) -> int | None:
    """The oldest policy version of any generated token: the smallest ``policy_versions`` span, else
    ``policy_version`` (None for a trajectory with no tokens or no versions)."""
    spans = trajectory.get("policy_versions") or ()
    versions = [span["version"] for span in spans]
    if versions:
        return min(versions)
    return trajectory.get("policy_version")


def group_version(group: list[dict[str, Any]]) -> int | None:
    """The oldest policy version of any token of the group (None when no member carries one)."""
    versions = [v for v in map(oldest_version, group) if v is not None]
    return min(versions) if versions else None


def snapshot(weights: Any) -> Any:
    """A copy of ``weights`` that later optimizer steps cannot change: ``model.state_dict()`` shares
    the parameters' storage, and the background thread loads them while the trainer trains on."""
    if weights is None or isinstance(weights, (str, os.PathLike)):
        return weights
    items = weights.items() if isinstance(weights, Mapping) else weights
    copied = [
        (name, tensor.detach().clone() if hasattr(tensor, "detach") else tensor) for name, tensor in items
    ]
    return dict(copied) if isinstance(weights, Mapping) else copied


class OverlappedRollout:
    """Rolls out steps ahead of the trainer on a background thread (module docstring).

    ``make_items(step)`` gives a step's trajectories (each with ``trajectory_id``, ``group_id`` and
    ``group_size``; group ids unique across steps); it is called on the background thread, in step
    order. ``steps`` bounds how many steps are rolled out (None: until ``close``). ``on_update`` is
    passed to ``farm.update_weights`` (None: the farm's default). Use as a context manager, or call
    ``close``.
    """

    def __init__(
        self,
        farm: Farm,
        make_items: Callable[[int], list[dict[str, Any]]],
        *,
        max_staleness: int = 1,
        on_stale: str = "regenerate",
        steps: int | None = None,
        run_steps: int = 1,
        groups: GroupConfig | None = None,
        on_update: str | None = None,
    ):
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, int) or max_staleness < 0:
            raise ConfigError(
                f"max_staleness must be an integer >= 0 (policy versions), got {max_staleness!r}"
            )
        if on_stale not in ON_STALE:
            raise ConfigError(f"on_stale must be one of {list(ON_STALE)}, got {on_stale!r}")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ConfigError(f"steps must be an integer >= 1 or None (until close), got {steps!r}")
        self.farm = farm
        self.make_items = make_items
        self.max_staleness = max_staleness
        self.on_stale = on_stale
        if (
            isinstance(run_steps, bool)
            or not isinstance(run_steps, int)
            or not 1 <= run_steps <= max_staleness + 1
        ):
            raise ConfigError(
                f"run_steps must be an integer from 1 to max_staleness + 1 = {max_staleness + 1} (a run carries "
                f"at most the steps the gate lets start at once), got {run_steps!r}"
            )
        if on_update is not None and on_update not in ON_UPDATE_MODES:
            raise ConfigError(f"on_update must be one of {list(ON_UPDATE_MODES)} or None, got {on_update!r}")
        self.steps = steps
        self.run_steps = run_steps
        self.on_update = on_update
        self.group_config = (groups or GroupConfig()).validate()
        self.stale_groups = 0
        self.regenerated_groups = 0
        self.dropped_groups = 0
        self._version = int(farm.policy_version)  # of the weights the trainer last posted
        self._cond = threading.Condition()
        self._finished = 0  # trainer steps ended by finish_step (guarded by _cond)
        self._finished_at: list[float] = []  # perf_counter of each finish_step (guarded by _cond)
        self._started_at = time.perf_counter()
        self._mailbox: tuple[int, Any] | None = None  # (version, weights) not yet applied (guarded)
        self._regenerate: deque[tuple[int, list[dict[str, Any]]]] = deque()  # (step, group inputs) (guarded)
        self._closing = False  # (guarded)
        self._out: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._feed = LiveFeed()  # the farm run's input; woken whenever the trainer posts something
        self._pending: dict[int, _Pending] = {}
        self._handed = 0  # steps handed to the trainer
        self._error: BaseException | None = None
        self._error_reported = False
        self._thread = threading.Thread(target=self._produce, name="overlapped-rollout", daemon=True)
        self._thread.start()

    # -- the trainer's side ---------------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        """The version of the weights the trainer last posted."""
        return self._version

    def next_step(self) -> OverlapStep:
        """The next step's groups, each within ``max_staleness`` of the trainer's weights; waits for
        them (and for regenerated groups)."""
        self._raise_error()
        if self._closing:
            raise RuntimeError("the overlapped rollout is closed")
        if self._handed > self._finished:
            raise RuntimeError("call finish_step() for the step handed over before asking for the next one")
        if self.steps is not None and self._handed >= self.steps:
            raise RuntimeError(f"all {self.steps} steps were handed over (steps={self.steps})")
        step = self._handed
        pending = self._pending.setdefault(step, _Pending())
        result = OverlapStep(step, [], self._version, None)
        started = time.perf_counter()
        while True:
            while pending.arrived:
                self._judge(step, pending, *pending.arrived.popleft(), result)
            if pending.ended and not pending.regenerating:
                break
            self._receive()
        del self._pending[step]
        versions = [v for v in map(group_version, result.groups) if v is not None]
        result.oldest_version = min(versions) if versions else None
        result.failed_groups = sum(1 for group in result.groups if group and group[0].get("group_failed"))
        result.retried_members = pending.retried_members
        result.rollout_s = round(pending.rollout_s, 6)
        result.queued_s = round(pending.queued_s, 6)
        result.wait_s = round(time.perf_counter() - started, 6)
        self._handed += 1
        return result

    def finish_step(self, weights: Any = None) -> int:
        """End the step handed over last: post its new ``weights`` (a ``state_dict``, copied here; a
        checkpoint directory; or None when the step pushes none) and let the farm start the step that
        waited for this one. Returns the trainer's policy version."""
        self._raise_error()
        if self._finished >= self._handed:
            raise RuntimeError("finish_step() ends a step handed over by next_step(); none is open")
        if weights is not None:
            weights = snapshot(weights)
        with self._cond:
            if weights is not None:
                self._version += 1
                self._mailbox = (self._version, weights)  # replaces older weights not yet applied
            self._finished += 1
            self._finished_at.append(time.perf_counter())
        self._feed.wake()
        return self._version

    def close(self) -> None:
        """Stop the background thread (after the batch it is reading) and wait for it; weights posted
        and not yet applied are applied first, so the farm ends serving the trainer's last weights.
        Raises an error of the background thread that was never raised."""
        with self._cond:
            self._closing = True
        self._feed.wake()
        self._thread.join()
        if self._error is not None and not self._error_reported:
            self._raise_error()

    def __enter__(self) -> OverlappedRollout:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        with contextlib.suppress(Exception):  # the trainer's own error is the one to see
            self.close()

    def _raise_error(self) -> None:
        if self._error is not None and not self._error_reported:
            self._error_reported = True
            raise self._error
        if self._error is not None:
            raise RuntimeError("the overlapped rollout stopped on an error (raised before)") from self._error

    def _receive(self) -> None:
        """File the next message of the background thread under its step."""
        try:
            message = self._out.get(timeout=POLL_S)
        except queue.Empty:
            if not self._thread.is_alive():
                self._error = self._error or RuntimeError("the overlapped rollout's thread stopped")
                self._raise_error()
            return
        kind, step = message[0], message[1]
        if kind == "error":
            self._error = message[2]
            self._raise_error()
        pending = self._pending.setdefault(step, _Pending())
        if kind == "group":
            pending.arrived.append(message[2:])
        elif kind == "rolled":  # a run of the step ended: its time and retries
            pending.rollout_s += message[2]
            pending.retried_members += message[3]
            pending.ended = pending.ended or message[4]
            pending.queued_s += message[5]

    def _judge(
        self, step: int, pending: _Pending, group: list[dict[str, Any]], inputs: list[dict[str, Any]],
        regenerated: bool, result: OverlapStep,
    ) -> None:  # fmt: skip
        """Hand ``group`` over, or count it stale and regenerate or drop it."""
        if regenerated:
            pending.regenerating -= 1
        version = group_version(group)
        if version is None:
            if not group[0].get("group_failed"):
                raise RuntimeError(
                    f"group {group[0].get('group_id')!r} carries no policy_version: an overlapped rollout needs "
                    "engines that stamp each trajectory with the weights' version (API rollouts do not)"
                )
        elif self._version - version > self.max_staleness:
            if regenerated:
                raise RuntimeError(
                    f"group {group[0].get('group_id')!r} was regenerated after the farm loaded version "
                    f"{self._version} but still has tokens of version {version}: the farm does not serve the "
                    "posted weights"
                )
            result.stale_groups += 1
            self.stale_groups += 1
            if self.on_stale == "drop":
                result.dropped_groups += 1
                self.dropped_groups += 1
                return
            pending.regenerating += 1
            with self._cond:
                self._regenerate.append((step, inputs))
            self._feed.wake()
            return
        if regenerated:
            result.regenerated_groups += 1
            self.regenerated_groups += 1
        result.groups.append(group)

    # -- the background thread ------------------------------------------------------------------------

    def _produce(self) -> None:
        try:
            self._feed_run()
        except BaseException as exc:  # raised in the trainer's thread
            self._error = exc
            self._out.put(("error", None, exc))

    def _feed_run(self) -> None:
        """Drive one farm run over the whole training: before reading each batch (or wake-up), load the
        posted weights, then put every regenerated group and every step the gate lets start into the
        feed, so the farm starts them while earlier steps' trajectories are still in flight."""
        tracker = _Tracker(self._out, self.group_config)
        batches = iter(self.farm.run(self._feed))
        step = 0
        failure: Exception | None = None  # of make_items: raised once the steps before it are out
        try:
            while True:
                with self._cond:
                    regenerate = list(self._regenerate)
                    self._regenerate.clear()
                    closing = self._closing
                if closing:
                    break
                self._apply_weights()
                for origin, inputs in regenerate:
                    self._feed.put(tracker.start(origin, inputs, regenerated=True))
                putting = False  # once run_steps steps may start, every step the gate lets start goes too
                while failure is None and (self._run_ready(step) or (putting and self._may_start(step))):
                    try:
                        items = self.make_items(step)
                    except Exception as exc:
                        failure = exc
                        break
                    self._feed.put(tracker.start(step, items, queued_s=time.perf_counter() - self._opened_at(step)))
                    step, putting = step + 1, True
                if failure is not None and not tracker.open_steps:
                    raise failure
                batch = next(batches, None)  # a batch, or an empty one when the trainer woke the feed
                if batch is None:
                    raise RuntimeError("the farm's run ended while its feed was open")
                self._feed.put(tracker.collect(batch.trajectories))
        finally:
            self._feed.close()
            close = getattr(batches, "close", None)
            if close is not None:
                close()
            tracker.abandon()
        self._apply_weights()  # closing: the farm ends serving the trainer's last weights

    def _may_start(self, step: int) -> bool:
        """The gate: step ``step`` may start once the trainer finished step ``step - max_staleness``."""
        return (self.steps is None or step < self.steps) and self._finished >= step - self.max_staleness

    def _run_ready(self, step: int) -> bool:
        """Step ``step`` may go into the feed: the gate lets ``run_steps`` steps start (or all that are left)."""
        last = step + self.run_steps - 1
        if self.steps is not None:
            last = min(last, self.steps - 1)
        return self._may_start(step) and self._may_start(last)

    def _opened_at(self, step: int) -> float:
        """When the gate let ``step`` start: the trainer's ``finish_step`` of step ``step - max_staleness - 1``
        (the start for the first steps)."""
        with self._cond:
            index = step - self.max_staleness - 1
            return self._finished_at[index] if index >= 0 else self._started_at

    def _apply_weights(self) -> None:
        with self._cond:
            posted, self._mailbox = self._mailbox, None
        if posted is not None:
            version, weights = posted
            options = {} if self.on_update is None else {"on_update": self.on_update}
            loaded = self.farm.update_weights(weights, version=version, **options)
            if loaded != version:
                raise RuntimeError(
                    f"the farm loaded the trainer's version {version} as policy version {loaded}"
                )


class _Tracker:
    """The background thread's account of the run: which step each group belongs to, the groups each
    step still waits for, and the messages to the trainer's side (``("group", step, group, inputs,
    regenerated)`` as each group completes; ``("rolled", step, seconds, retried members, complete,
    queued seconds)`` when a step's groups, or a regenerated group, are all out)."""

    def __init__(self, out: queue.Queue, config: GroupConfig):
        self._out = out
        self._collector = GroupCollector(config)
        self._step_of: dict[str, int] = {}  # group id -> its step (kept: a later step may not reuse it)
        self._inputs: dict[str, list[dict[str, Any]]] = {}  # group id -> its members' inputs, until it is out
        self._regenerating: dict[str, float] = {}  # group id -> when it was put again
        self._left: dict[int, int] = {}  # step -> its first-time groups not yet out
        self._put_at: dict[int, float] = {}
        self._queued: dict[int, float] = {}
        self._retried: dict[int, int] = {}

    @property
    def open_steps(self) -> int:
        """Steps put whose groups are not all out yet."""
        return len(self._left)

    def start(
        self, step: int, items: list[dict[str, Any]], *, regenerated: bool = False, queued_s: float = 0.0
    ) -> list[dict[str, Any]]:
        """Register ``items`` (a step's, or one regenerated group's) and return them for the feed."""
        inputs: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            gid = str(item.get("group_id"))
            if self._step_of.setdefault(gid, step) != step:
                raise ValueError(
                    f"group id {gid!r} is used by steps {self._step_of[gid]} and {step}: make_items must give "
                    "each step's groups ids no other step uses (e.g. prefix them with the step)"
                )
            inputs.setdefault(gid, []).append(dict(item))
        self._collector.expect(items)
        self._inputs.update(inputs)
        now = time.perf_counter()
        if regenerated:
            self._regenerating.update(dict.fromkeys(inputs, now))
        else:
            self._left[step] = len(inputs)
            self._put_at[step], self._queued[step], self._retried[step] = now, max(0.0, queued_s), 0
        return items

    def collect(self, trajectories: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """File finished trajectories; send each completed group to the trainer's side. Returns the
        failed members' retries, to be put into the feed."""
        retries: list[dict[str, Any]] = []
        for trajectory in trajectories:
            collected = self._collector.add(trajectory)
            retries += collected.retries
            for group in collected.groups:
                self._send(group)
        return retries

    def _send(self, group: list[dict[str, Any]]) -> None:
        gid = str(group[0]["group_id"])
        step = self._step_of[gid]
        retried = sum(max(0, int(m.get("member_attempts") or 1) - 1) for m in group)
        regenerated_at = self._regenerating.pop(gid, None)
        self._out.put(("group", step, group, self._inputs.pop(gid), regenerated_at is not None))
        now = time.perf_counter()
        if regenerated_at is not None:
            self._out.put(("rolled", step, now - regenerated_at, retried, False, 0.0))
            return
        self._retried[step] += retried
        self._left[step] -= 1
        if not self._left[step]:
            self._rolled(step, now, complete=True)

    def _rolled(self, step: int, now: float, *, complete: bool) -> None:
        del self._left[step]
        self._out.put(
            ("rolled", step, now - self._put_at.pop(step), self._retried.pop(step), complete, self._queued.pop(step))
        )

    def abandon(self) -> None:
        """The run stopped (closing, or an error): the open steps' rollouts ended incomplete."""
        now = time.perf_counter()
        for step in list(self._left):
            self._rolled(step, now, complete=False)
