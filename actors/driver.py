"""``RolloutFarm``: rollout workers on Ray, fed batches, streamed back, restarted when they die.

Sharding is dynamic: the trajectories are cut into batches of ``batch_size`` in input order, and
each ready worker holds up to ``inflight_per_worker`` of them (one running, the next queued inside
the actor so the engine never waits for a round trip). Whenever batches finish (``ray.wait``), their
trajectories are yielded at once and those workers get the next batches, so fast workers take more.
The input is read lazily, only as far as it takes to keep every worker supplied, so the driver's
memory does not grow with the number of prompts, and each wait collects every batch that has
finished, so the driver's work per result does not grow with the number in flight. The input may
also be a ``LiveFeed`` (``twinkle_agentic.rollout.feed``) that other code keeps adding to: the run
takes what has been put without ever waiting for it, lasts until the feed is closed, and yields an
empty batch when the feed is woken, so the loop reading it can update weights or add trajectories
while others are in flight.

When a worker dies (its process is killed, its node goes away, its engine breaks, or a batch
exceeds ``batch_timeout_s``), every batch it held that had not come back goes to the front of the
queue, the dead actor is killed for good, and a replacement is started in the background; the other
workers carry on meanwhile. Batches that came back are never re-run, so **every trajectory comes
back exactly once**. A batch is charged a failure only when the death is surely its doing (it was
alone on the worker, overran ``batch_timeout_s`` or found the engine broken); batches caught together
in a death run alone afterwards until it is clear. A batch charged twice is split in halves, so a
trajectory that crashes engines ends up alone, and at ``max_batch_attempts`` failures its trajectories
come back with ``stop_reason="error"``, as do all remaining ones if every worker slot has used up its
``max_worker_restarts``.

``update_weights`` checks and packs new weights once, puts them in Ray's object store once and sends
one call per live worker, whatever the number of tensors (``FarmOptions.on_update`` says what happens
to the trajectories those workers are running). The farm keeps the latest payload, and every worker
it starts afterwards (a replacement or a late start) loads it before it reports ready. Over a transfer
group (``open_weight_transfer``, ``weight_transfer.py``) the tensors are broadcast instead, and a
worker started afterwards takes work once the next broadcast reaches it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic import metrics
from twinkle_agentic.data_format import Trajectory
from twinkle_agentic.rollout.feed import LiveFeed

from .activity import Activity
from .config import EngineConfig, FarmConfigError, FarmOptions, RolloutSpec
from .worker import CONTROL_GROUP, ID_KEY, RolloutWorker, error_trajectory

logger = logging.getLogger(__name__)

SETTLE_S = 5.0  # how long the calls of a dead worker get to resolve (they fail fast; results in flight arrive)


class FarmStartError(RuntimeError):
    """No rollout worker became ready; carries each slot's failure."""


@dataclass
class Batch:
    """Trajectories sent to a worker together. ``failures`` counts worker deaths (or errors) this batch
    was surely to blame for; ``suspect`` batches were in flight on a worker that died holding several,
    and run alone until that is cleared up."""

    trajectories: list[Trajectory]
    failures: int = 0
    dispatches: int = 0
    suspect: bool = False
    last_error: str | None = None


@dataclass
class FarmBatch:
    """One batch as it came back: trajectories (stamped with ``worker`` and ``attempts``, the times the
    batch was sent to a worker) and accounting."""

    trajectories: list[Trajectory]
    activity: Activity
    generated_tokens: int
    worker: int | None  # slot index; None when the farm gave up on the batch
    attempts: int


@dataclass
class WorkerSlot:
    """One worker position; its actor is replaced when it dies, up to ``max_worker_restarts`` times."""

    index: int
    handle: Any = None
    state: str = "starting"  # starting | ready | lost (killed; its run has yet to requeue its batches) | retired
    ready_ref: Any = None
    launched_at: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    inflight: dict[Any, tuple[Batch, float]] = field(default_factory=dict)
    exclusive: bool = False  # running a suspect batch: nothing else is sent meanwhile
    abandoned: bool = False  # still busy with batches of a run whose caller stopped reading
    errors: list[str] = field(default_factory=list)
    policy_version: int = 0  # of the weights its actor serves (or was started to load)
    group: Any = None  # the placement group of a multi-GPU engine's actor (placement.py)


@dataclass
class FarmUpdate:
    """One ``RolloutFarm.update_weights``: what it sent and where the time went.

    ``prepare_s`` checks and serialises the payload (safetensors buckets), ``put_s`` puts it in the
    object store, ``wall_s`` is the whole call. Each entry of ``workers`` is a worker's own account
    (``wait_s`` for running batches under ``finish``, then the engine's ``drain_s``, ``load_s``,
    ``reset_s``, ``paused_s``, ``rpc_calls``), with ``transfer_s``: the call's round trip less the time
    inside the worker (fetching the payload and scheduling). ``ray_calls`` counts the put and the
    worker calls; ``failed`` names the workers replaced instead."""

    version: int
    tensors: int
    payload_bytes: int
    prepare_s: float
    put_s: float
    wall_s: float = 0.0
    ray_calls: int = 0
    workers: dict[int, dict[str, Any]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)


class RolloutFarm:
    """``options.engines`` rollout workers, each holding one engine of ``engine``."""

    def __init__(
        self,
        engine: EngineConfig,
        spec: RolloutSpec,
        options: FarmOptions | None = None,
        *,
        worker_cls: type = RolloutWorker,
    ):
        self.engine = engine.validate()
        self.spec = spec.validate()
        self.options = (options or FarmOptions()).validate()
        self.worker_cls = worker_cls
        self.slots = [WorkerSlot(i) for i in range(self.options.engines)]
        self.restarts = 0
        self.given_up = 0
        self._owner: dict[Any, WorkerSlot] = {}
        self._out: deque[FarmBatch] = deque()
        self._actor_cls: Any = None
        self._actor_options: dict[str, Any] = {}
        self._group_spec: dict[str, Any] | None = None
        self.policy_version = 0  # of the latest weights; 0 for the ones the engines start with
        self.last_update: FarmUpdate | None = None
        self._weights: Any = None  # ObjectRef of the latest checked payload, which new workers load
        self._weights_version = 0  # the policy version of that payload
        self._warned_stale = False
        self._shapes: dict[str, tuple[int, ...]] | None = None

    # -- workers ---------------------------------------------------------------------------------------

    @property
    def handles(self) -> list[Any]:
        """The current actor handle of each slot (tests kill them with ``ray.kill``)."""
        return [slot.handle for slot in self.slots]

    def _launch(self, slot: WorkerSlot) -> None:
        import ray

        if self._actor_cls is None:
            options = dict(self.worker_cls.ray_options(self.engine))
            groups = options.pop("concurrency_groups", None)  # a class option in Ray, not a call option
            self._group_spec = options.pop("placement_group", None)  # one group per actor, made below
            actor_cls = ray.remote(concurrency_groups=groups)(self.worker_cls) if groups else ray.remote(self.worker_cls)
            self._actor_cls, self._actor_options = actor_cls, options
        options = self._actor_options
        if self._group_spec is not None:
            from .placement import create_group, group_strategy

            slot.group = create_group(self._group_spec)  # not waited for: the actor starts once it is reserved
            options = {**options, "scheduling_strategy": group_strategy(slot.group)}
        slot.handle = self._actor_cls.options(**options).remote(
            self.engine, self.spec, self._weights, self._weights_version
        )
        slot.policy_version = self._weights_version
        slot.ready_ref = slot.handle.ready.remote()
        slot.launched_at = time.monotonic()
        slot.state = "starting"
        self._owner[slot.ready_ref] = slot

    def _kill(self, slot: WorkerSlot) -> None:
        import ray

        if slot.ready_ref is not None:
            self._owner.pop(slot.ready_ref, None)
            slot.ready_ref = None
        with contextlib.suppress(Exception):  # already gone
            ray.kill(slot.handle, no_restart=True)
        if slot.group is not None:  # its GPUs go back to the cluster (a replacement gets a new group)
            from .placement import remove_group

            remove_group(slot.group)
            slot.group = None

    def _replace(self, slot: WorkerSlot, reason: str) -> None:
        """Kill the slot's actor; start a new one unless the slot has used its restarts."""
        slot.errors.append(reason)
        self._kill(slot)
        if slot.restarts >= self.options.max_worker_restarts:
            slot.state = "retired"
            logger.error("worker %d retired after %d restarts: %s", slot.index, slot.restarts, reason)
            return
        slot.restarts += 1
        self.restarts += 1
        metrics.record_restart()
        logger.warning("worker %d: %s; starting a replacement (restart %d)", slot.index, reason, slot.restarts)
        self._launch(slot)

    def _on_ready(self, slot: WorkerSlot, ref: Any) -> None:
        import ray

        self._owner.pop(ref, None)
        slot.ready_ref = None
        try:
            slot.info = ray.get(ref)
        except Exception as exc:
            self._replace(slot, f"failed to start: {_describe(exc)}")
            return
        slot.state = "ready"
        slot.policy_version = int(slot.info.get("policy_version", slot.policy_version))
        logger.info("worker %d ready: %s", slot.index, slot.info)

    def start(self) -> list[dict[str, Any]]:
        """Start every worker and wait until each is ready or retired (at most ``ready_timeout_s`` each)."""
        for slot in self.slots:
            if slot.handle is None:
                self._launch(slot)
        while any(slot.state == "starting" for slot in self.slots):
            self._step(deque())
        ready = [slot.info for slot in self.slots if slot.state == "ready"]
        if not ready:
            reasons = "; ".join(f"worker {s.index}: {s.errors[-1] if s.errors else 'unknown'}" for s in self.slots)
            raise FarmStartError(f"no rollout worker became ready ({reasons})")
        return ready

    def shutdown(self) -> None:
        """Stop every worker: idle ones shut their engines down first; busy or starting ones are killed."""
        import ray

        idle = [s.handle for s in self.slots if s.state == "ready" and not s.inflight and not s.abandoned]
        refs = []
        for handle in idle:
            with contextlib.suppress(Exception):
                refs.append(handle.shutdown.remote())
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=15)
        for slot in self.slots:
            if slot.handle is not None and slot.state != "retired":
                self._kill(slot)
            slot.state, slot.handle, slot.inflight = "retired", None, {}
        self._owner.clear()

    # -- weights -------------------------------------------------------------------------------------

    def update_weights(self, weights: Any, *, version: int | None = None, on_update: str | None = None) -> int:
        """Load new policy weights into every worker and return the new policy version.

        ``weights`` is a checkpoint directory (Hugging Face layout, safetensors, on storage every node
        sees) or in-memory tensors (a mapping or an iterable of ``(name, torch.Tensor)`` under the
        checkpoint's names), as for ``VLLMSampler.update_weights``, or a ``WeightTransfer``
        (``open_weight_transfer``), whose source is broadcast over the trainer's process group. It is
        checked against the model's checkpoint first: a missing, extra or misshaped tensor raises
        ``WeightUpdateError`` and nothing is sent. Returns when every live worker serves the new version
        (workers still starting are waited for); a worker that fails meanwhile is replaced. A worker
        started after a checkpoint or tensor update loads those weights before it takes work; one
        started after a transfer-group update joins the group at the next update and takes work once
        it serves it. Call it between runs, or from the loop that reads ``run``; ``on_update`` (default
        ``FarmOptions.on_update``) says what happens to running trajectories.
        """
        import ray

        from twinkle_agentic.sampler.weights import Stopwatch, check_on_update, next_version, prepare_update

        from .weight_transfer import WeightTransfer

        watch = Stopwatch()
        on_update = check_on_update(on_update or self.options.on_update)
        new_version = next_version(self.policy_version, version)
        if isinstance(weights, WeightTransfer):
            weights.send(new_version, on_update)
            metrics.record_update(self.last_update.wall_s, new_version, path="transfer")
            return new_version
        update = prepare_update(weights, self._checkpoint_shapes())
        report = FarmUpdate(new_version, update.tensors, update.nbytes, prepare_s=watch.lap(), put_s=0.0)
        ref = ray.put(update)
        report.put_s = watch.lap()
        self._weights, self._weights_version = ref, new_version  # from here on, new workers load it
        self.policy_version = new_version
        self._settle_starting(new_version)
        calls = self._submit_update(ref, new_version, on_update, self._behind(new_version))
        self._collect_update(calls, report)
        report.wall_s = watch.lap() + report.prepare_s + report.put_s
        metrics.record_update(report.wall_s, new_version, path="payload")
        return new_version

    def open_weight_transfer(self, source: Any, **options: Any) -> Any:
        """A process group of the trainer (this process) and every engine, through vLLM's transfer
        engines; pass it to ``update_weights`` to broadcast the source's current tensors. ``source`` is
        the trainer's ``torch.nn.Module`` or a vLLM ``WeightSource``; ``options`` as for
        ``WeightTransfer``. The engines must be started with ``weight_transfer`` (``nccl`` on GPUs,
        ``gloo`` on CPUs)."""
        from .weight_transfer import WeightTransfer

        transfer = WeightTransfer(self, source, **options)
        transfer.open()
        return transfer

    def _behind(self, version: int) -> list[WorkerSlot]:
        return [s for s in self.slots if s.state == "ready" and s.policy_version < version]

    def _submit_update(
        self, ref: Any, version: int, on_update: str, slots: list[WorkerSlot]
    ) -> dict[Any, tuple[WorkerSlot, float]]:
        """Send a payload (an ObjectRef of a checked ``WeightUpdate``) to ``slots``, one call each."""
        return {
            slot.handle.update_weights.options(concurrency_group=CONTROL_GROUP).remote(
                ref, version, on_update, self.options.finish_timeout_s
            ): (slot, time.perf_counter())
            for slot in slots
        }

    def _collect_update(self, calls: dict[Any, tuple[WorkerSlot, float]], report: FarmUpdate) -> None:
        """Wait for the calls of ``_submit_update``, account each worker, replace those that failed."""
        import ray

        options = self.options
        report.ray_calls = 1 + len(calls)
        limit = options.finish_timeout_s + options.ready_timeout_s
        done, _ = ray.wait(list(calls), num_returns=len(calls), timeout=limit) if calls else ([], [])
        for ref, (slot, sent) in calls.items():
            try:
                if ref not in done:
                    raise TimeoutError(f"no answer within {limit:g} s")
                account = ray.get(ref)
            except Exception as exc:
                report.failed[slot.index] = _describe(exc)
                continue
            account["transfer_s"] = round(max(0.0, time.perf_counter() - sent - account.get("total_s", 0.0)), 6)
            report.workers[slot.index] = account
            slot.policy_version = report.version
        for index, reason in report.failed.items():
            logger.warning("worker %d failed to load policy version %d: %s", index, report.version, reason)
            self._drop(self.slots[index], f"weight update failed: {reason}")
        self.last_update = report

    def _drop(self, slot: WorkerSlot, reason: str) -> None:
        """Replace a worker outside a batch's failure: at once, or, while a run is reading its batches,
        once that run has collected them (no batch is blamed)."""
        if slot.inflight:
            self._kill(slot)
            slot.state = "lost"
            slot.errors.append(reason)
        else:
            self._replace(slot, reason)

    def _checkpoint_shapes(self) -> dict[str, tuple[int, ...]]:
        from twinkle_agentic.sampler.weights import checkpoint_shapes, model_directory

        if self._shapes is None:
            self._shapes = checkpoint_shapes(model_directory(self.engine.model))
        return self._shapes

    def _settle_starting(self, version: int) -> None:
        """Wait until no worker is still starting on weights older than ``version``: each becomes ready
        (and is then updated) or is replaced (and the replacement loads the latest weights)."""
        import ray

        while True:
            starting = [s for s in self.slots if s.state == "starting" and s.policy_version < version]
            if not starting:
                return
            now = time.monotonic()
            timeout = max(0.0, min(s.launched_at + self.options.ready_timeout_s for s in starting) - now)
            done, _ = ray.wait([s.ready_ref for s in starting], num_returns=1, timeout=timeout)
            if done:
                self._on_ready(self._owner[done[0]], done[0])
                continue
            for slot in starting:
                if time.monotonic() - slot.launched_at >= self.options.ready_timeout_s:
                    self._replace(slot, f"not ready after ready_timeout_s={self.options.ready_timeout_s:g}")

    # -- work ------------------------------------------------------------------------------------------

    def run(self, trajectories: Iterable[Trajectory] | LiveFeed) -> Iterator[FarmBatch]:
        """Roll out every trajectory; yields batches as they finish (in completion order).

        ``trajectories`` may be any iterable, e.g. a generator over a large file: it is read lazily,
        only as far as it takes to keep every worker's ``inflight_per_worker`` batches supplied plus
        one spare batch. Each trajectory needs a ``trajectory_id`` that no other trajectory
        the farm holds (queued or in flight) has; ids of trajectories already yielded are not
        remembered. A bad trajectory raises when it is read: before any worker starts if it is in
        the first window, otherwise from the loop reading ``run``. Call ``start()`` first (``run``
        starts the workers itself if it was not called).

        From a ``LiveFeed`` the run takes what has been put (a partial batch rather than none), runs
        until the feed is closed and all it took has come back, and yields an empty ``FarmBatch`` (no
        trajectories, ``worker`` None, ``attempts`` 0) after each ``wake``: the caller may then call
        ``update_weights`` or put more before reading on.
        """
        feed = _Feed(trajectories, self.options.batch_size)
        queue: deque[Batch] = deque()
        feed.fill(queue, self._window())
        if not queue and feed.exhausted:
            return
        if all(slot.handle is None for slot in self.slots):
            self.start()
        for slot in self.slots:
            if slot.abandoned:  # it may still be running an earlier run's batches: start it afresh
                slot.abandoned = False
                self._kill(slot)
                self._launch(slot)
        try:
            yield from self._drive(queue, feed)
        finally:
            self._out.clear()
            for slot in self.slots:  # the caller stopped early: forget this run's batches
                if slot.inflight:
                    for ref in slot.inflight:
                        self._owner.pop(ref, None)
                    slot.inflight, slot.exclusive, slot.abandoned = {}, False, True

    def _window(self) -> int:
        """How many batches the queue should hold: enough to give every worker ``inflight_per_worker``
        (less what is in flight), and one spare. The queue is topped up before every hand-out, so the
        input is read no further ahead than that."""
        return max(0, len(self.slots) * self.options.inflight_per_worker - len(self._owner)) + 1

    def _drive(self, queue: deque[Batch], feed: _Feed) -> Iterator[FarmBatch]:
        while True:
            while self._out:
                finished = self._out.popleft()
                feed.release(finished.trajectories)
                yield finished
            if feed.woken():  # the caller asked for control (a live feed)
                yield FarmBatch([], Activity(), 0, None, 0)
            for slot in self.slots:
                if slot.state == "lost" and not slot.inflight:  # everything it held has come back or failed
                    self._replace(slot, slot.errors.pop())
            feed.fill(queue, self._window())
            if not queue and not any(slot.inflight for slot in self.slots):
                if feed.exhausted:
                    break
                if not self._owner:  # a live feed with nothing put: wait for input or a wake-up
                    feed.wait()
                    continue
            if not any(slot.state != "retired" for slot in self.slots):
                while queue:
                    self._give_up(queue.popleft(), "no rollout worker is left (every slot used its restarts)")
                continue
            self._dispatch(queue)
            self._step(queue, feed.poll_s)

    def _dispatch(self, queue: deque[Batch]) -> None:
        """Hand out batches round-robin until every ready worker holds ``inflight_per_worker``; a suspect
        batch only goes to an idle worker, and has it to itself."""
        limit = self.options.inflight_per_worker
        serving = self._serving()
        progress = True
        while queue and progress:
            progress = False
            ready = [s for s in serving if not s.exclusive and len(s.inflight) < limit]
            for slot in sorted(ready, key=lambda s: len(s.inflight)):
                index = next((i for i, b in enumerate(queue) if not (b.suspect and slot.inflight)), None)
                if index is None:
                    continue
                batch = queue[index]
                del queue[index]
                batch.dispatches += 1
                if batch.dispatches == 1:
                    metrics.record_started(len(batch.trajectories))
                slot.exclusive = batch.suspect
                ref = slot.handle.run_batch.remote(batch.trajectories)
                slot.inflight[ref] = (batch, time.monotonic())
                self._owner[ref] = slot
                progress = True

    def _serving(self) -> list[WorkerSlot]:
        """Ready workers that serve the latest policy version. A worker started after a transfer-group
        update serves an older one until the next update reaches it; if no worker serves the latest,
        the others work on, their trajectories stamped with the version they ran."""
        ready = [s for s in self.slots if s.state == "ready"]
        current = [s for s in ready if s.policy_version >= self.policy_version]
        if current or not ready:
            return current
        if not self._warned_stale:
            logger.warning(
                "no worker serves policy version %d yet (those started since the last transfer-group update "
                "serve older weights until the next one); they take work meanwhile",
                self.policy_version,
            )
            self._warned_stale = True
        return ready

    def _step(self, queue: deque[Batch], poll_s: float | None = None) -> None:
        """Handle every event that has happened (batches back, workers ready), waiting for the next one
        (or a deadline, or at most ``poll_s``) only when there is none; finished batches go to
        ``self._out``."""
        import ray

        if not self._owner:
            return
        refs = list(self._owner)
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)  # all that are ready, in one call
        if not done:
            timeout = self._next_deadline()
            if poll_s is not None:
                timeout = poll_s if timeout is None else min(timeout, poll_s)
            done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
            if not done:
                self._expire(queue)
                return
        for ref in done:
            slot = self._owner.get(ref)
            if slot is None:  # a worker lost while handling an earlier ref settled this one
                continue
            if ref == slot.ready_ref:
                self._on_ready(slot, ref)
                continue
            result = self._on_result(slot, ref, queue)
            if result is not None:
                self._out.append(result)

    def _on_result(self, slot: WorkerSlot, ref: Any, queue: deque[Batch]) -> FarmBatch | None:
        import ray
        from ray.exceptions import RayTaskError

        self._owner.pop(ref, None)
        batch, submitted = slot.inflight.pop(ref)
        slot.exclusive = slot.exclusive and bool(slot.inflight)
        try:
            result = ray.get(ref)
        except RayTaskError as exc:
            if _cause_name(exc) == "WorkerUnhealthy":  # this batch found the engine broken
                self._lose(slot, (batch, submitted), _describe(exc), queue, culprit=True)
            else:  # the worker is alive but the call failed (e.g. arguments it could not take)
                self._retry(batch, _describe(exc), queue)
            return None
        except Exception as exc:  # the actor died or is unreachable
            self._lose(slot, (batch, submitted), f"died: {_describe(exc)}", queue, culprit=False)
            return None
        return self._finished(slot, batch, result)

    def _finished(self, slot: WorkerSlot, batch: Batch, result: Any) -> FarmBatch:
        for trajectory in result.trajectories:
            trajectory["worker"] = slot.index
            trajectory["attempts"] = batch.dispatches
        metrics.record_batch(result.trajectories, result.activity, result.generated_tokens, source="worker")
        return FarmBatch(result.trajectories, result.activity, result.generated_tokens, slot.index, batch.dispatches)

    def _lose(
        self, slot: WorkerSlot, failed: tuple[Batch, float], reason: str, queue: deque[Batch], *, culprit: bool
    ) -> None:
        """A worker is gone: keep what it had returned, requeue the rest in order, replace the worker.

        Blame: with ``culprit`` (the batch overran its deadline or found the engine broken) the failed
        batch is charged. Otherwise a death with one unfinished batch charges it, and a death with
        several charges none but marks them all suspect, so each next runs alone and the next death
        is unambiguous. (A crashing process can lose a reply it already sent, so "the oldest batch
        was running" cannot be trusted.)
        """
        import ray

        held = {id(failed[0]): failed}
        held.update({id(batch): (batch, t) for batch, t in slot.inflight.values()})
        refs = {id(batch): ref for ref, (batch, _) in slot.inflight.items()}
        for ref in slot.inflight:
            self._owner.pop(ref, None)
        # a result the worker sent just before dying may still be on its way: let each call settle
        pending = list(slot.inflight)
        done = set(ray.wait(pending, num_returns=len(pending), timeout=SETTLE_S)[0]) if pending else set()
        slot.inflight, slot.exclusive = {}, False
        unfinished = []
        for key, (batch, submitted) in held.items():
            ref = refs.get(key)
            if ref is not None and ref in done:
                try:
                    self._out.append(self._finished(slot, batch, ray.get(ref, timeout=0)))
                    continue
                except Exception:
                    pass
            unfinished.append((submitted, batch))
        unfinished.sort(key=lambda item: item[0])
        if slot.state == "lost":  # killed after a failed weight update: no batch is to blame
            blamed = None
        else:
            blamed = failed[0] if culprit else unfinished[0][1] if len(unfinished) == 1 else None
        error = f"worker {slot.index} {reason}"
        for _, batch in reversed(unfinished):
            if batch is blamed:
                self._retry(batch, error, queue)
            else:
                batch.suspect = batch.suspect or (not culprit and len(unfinished) > 1)
                batch.last_error = error
                queue.appendleft(batch)
        self._replace(slot, reason)

    def _retry(self, batch: Batch, error: str, queue: deque[Batch]) -> None:
        """Charge ``batch`` a failure: requeue it to run alone, halve it from its second failure on (to
        isolate a trajectory that breaks workers), give up at ``max_batch_attempts``."""
        batch.failures += 1
        batch.last_error = error
        if batch.failures >= self.options.max_batch_attempts:
            self._give_up(batch, f"gave up after {batch.failures} failures; last: {error}")
        elif batch.failures >= 2 and len(batch.trajectories) > 1:
            half = len(batch.trajectories) // 2
            for part in (batch.trajectories[half:], batch.trajectories[:half]):
                queue.appendleft(Batch(part, batch.failures, batch.dispatches, True, error))
        else:
            batch.suspect = True
            queue.appendleft(batch)

    def _give_up(self, batch: Batch, reason: str) -> None:
        self.given_up += len(batch.trajectories)
        failed = []
        for trajectory in batch.trajectories:
            out = error_trajectory(trajectory, f"RolloutFarmError: {reason}")
            out.update(worker=None, attempts=batch.dispatches)
            failed.append(out)
        metrics.record_batch(failed, Activity(), 0, source="farm")
        self._out.append(FarmBatch(failed, Activity(), 0, None, batch.dispatches))

    # -- deadlines -------------------------------------------------------------------------------------

    def _next_deadline(self) -> float | None:
        now = time.monotonic()
        deadlines = [s.launched_at + self.options.ready_timeout_s for s in self.slots if s.state == "starting"]
        if self.options.batch_timeout_s is not None:
            deadlines += [t + self.options.batch_timeout_s for s in self.slots for _, t in s.inflight.values()]
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _expire(self, queue: deque[Batch]) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.state == "starting" and now - slot.launched_at >= self.options.ready_timeout_s:
                self._replace(slot, f"not ready after ready_timeout_s={self.options.ready_timeout_s:g}")
                continue
            limit = self.options.batch_timeout_s
            overdue = [ref for ref, (_, t) in slot.inflight.items() if limit is not None and now - t >= limit]
            if overdue:
                self._owner.pop(overdue[0], None)
                self._lose(slot, slot.inflight.pop(overdue[0]), f"exceeded batch_timeout_s={limit:g}", queue, culprit=True)


class _Feed:
    """A run's input, cut into batches as the queue needs them; ids are checked against the trajectories
    the farm holds (read and not yet yielded), so the check, like the rest, does not grow with the run.
    A ``LiveFeed`` gives what has been put so far (``poll_s`` bounds the driver's waits meanwhile)."""

    def __init__(self, trajectories: Iterable[Trajectory] | LiveFeed, batch_size: int):
        self._live = trajectories if isinstance(trajectories, LiveFeed) else None
        self._items = iter(()) if self._live is not None else iter(trajectories)
        self._size = batch_size
        self._read = 0
        self._held: set[Any] = set()
        self._ended = False
        self.poll_s = self._live.poll_s if self._live is not None else None

    @property
    def exhausted(self) -> bool:
        """No more input will come."""
        return self._live.exhausted if self._live is not None else self._ended

    def woken(self) -> bool:
        return self._live is not None and self._live.take_wake()

    def wait(self) -> None:
        """Nothing is queued or in flight: wait for a live feed's next input, close or wake-up."""
        if self._live is not None:
            self._live.wait(1.0)

    def fill(self, queue: deque[Batch], target: int) -> None:
        """Append batches until ``queue`` holds ``target`` or the input ends (or, live, has no more yet)."""
        while not self._ended and len(queue) < target:
            if self._live is not None:
                batch = self._live.take(self._size)
                if not batch:
                    return
            else:
                batch = list(itertools.islice(self._items, self._size))
                self._ended = len(batch) < self._size
            for trajectory in batch:
                self._admit(trajectory)
            if batch:
                queue.append(Batch(batch))

    def release(self, trajectories: list[Trajectory]) -> None:
        """These came back: their ids may be used again."""
        for trajectory in trajectories:
            self._held.discard(trajectory.get(ID_KEY))

    def _admit(self, trajectory: Any) -> None:
        index = self._read
        self._read += 1
        if not isinstance(trajectory, dict):
            raise TypeError(f"trajectory {index} must be a dict, got {type(trajectory).__name__}")
        tid = trajectory.get(ID_KEY)
        if tid is None:
            raise FarmConfigError(f"trajectory {index} has no {ID_KEY!r}; the farm tracks every trajectory by it")
        if tid in self._held:
            raise FarmConfigError(
                f"{ID_KEY} {tid!r} appears twice among the trajectories the farm holds; ids must be unique within a run"
            )
        self._held.add(tid)


def _cause_name(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    return type(cause).__name__ if cause is not None else ""


def _describe(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    target = cause if isinstance(cause, BaseException) else exc
    text = str(target).strip().splitlines()
    return f"{type(target).__name__}: {text[-1] if text else ''}"[:500]
