"""Run the rollout job: prompts -> services on Serve -> worker farm -> journal -> summary.

::

    prompts file, streamed once: every bad row reported, the ids that repeat found (prompts.py)
      -> the journal's ids as 16-byte keys (journal.py, keyset.py)
      -> the file streamed again: trajectories named as they are read, whole groups already in the
         journal skipped, the rest fed to the farm as it asks for more
      -> connect to Ray (address, RAY_ADDRESS, or an embedded cluster sized to the plan)
      -> check the cluster can hold the plan's engines and Serve replicas (capacity.py)
      -> deploy tool servers and env servers on Serve; list their tools
      -> RolloutFarm: N workers, one engine each; batches streamed back as they finish
      -> trajectories collected into groups (the samples of one prompt); a failed member rolled out
         again, fresh, up to groups.max_member_retries times (another farm run after this one)
      -> each complete group, with its advantages, into the journal (journal.py: trajectories.jsonl
         appended and fsynced locally, segments on object stores); progress bar
      -> (parquet), summary.json (the output's figures: the journal's at the start plus this run's tally),
         the printed summary
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from twinkle_agentic.actors.catalog import ENVS_KEY, TOOLSETS_KEY

from twinkle_agentic.rollout.groups import GroupCollector, roll_groups

from .capacity import Demand, check_schedulable, cluster_capacity, plan_demand
from .config import RolloutJobConfig
from .journal import Journal, JournalState
from .prompts import PromptPlan, check_prompts
from .summary import RolloutSummary, RolloutTally

logger = logging.getLogger(__name__)


def plan(cfg: RolloutJobConfig) -> PromptPlan:
    """The prompts file checked (streamed once, no Ray): every bad row, and every row asking for tools or
    envs this config does not serve, in one ``PromptError``; the plan streams the trajectories."""
    known = {TOOLSETS_KEY: {s.name for s in cfg.tools}, ENVS_KEY: {s.name for s in cfg.envs}}

    def served(row: dict[str, Any]) -> str | None:
        for key, names in known.items():
            asked = row.get(key)
            asked = [asked] if isinstance(asked, str) else list(asked or [])
            unknown = sorted(set(asked) - names)
            if unknown:
                return f"asks for {key} {unknown}, which this config does not serve (it serves {sorted(names) or 'none'})"
        return None

    return check_prompts(cfg.prompts, cfg.limit, cfg.samples_per_prompt, served)


def demand(cfg: RolloutJobConfig) -> Demand:
    """The resources the plan's actors reserve at start: the engines' workers and the Serve replicas."""
    from twinkle_agentic.actors.worker import RolloutWorker

    return plan_demand(cfg, RolloutWorker.ray_options(cfg.engine_config()))


def connect(cfg: RolloutJobConfig, needs: Demand) -> Any:
    """Connect to the cluster; an embedded one gets at least the logical CPUs the plan reserves."""
    from twinkle_agentic.cluster import connect as cluster_connect

    return cluster_connect(
        cfg.address,
        num_cpus=cfg.num_cpus,
        min_cpus=needs.cpus(),
        include_dashboard=False,
        log_to_driver=cfg.worker_logs,
    )


def run(cfg: RolloutJobConfig) -> RolloutSummary:
    """Run (or resume) the job; raises ConfigError for bad config/input, other errors for run failures."""
    start = time.perf_counter()
    prompts = plan(cfg)
    journal, state = Journal.open(cfg.output, cfg.fingerprint(), cfg.overwrite)
    if state.truncated_bytes:
        logger.warning("cut a torn last line (%d bytes) from %s", state.truncated_bytes, journal.path)
    if state.cut_members:
        logger.warning("cut an incomplete last group (%d lines) from %s", state.cut_members, journal.path)
    todo = Unfinished(prompts.groups(), state.ids)
    first = next(iter(todo), None)  # reads up to the first group to run: none, and Ray is not started
    logger.info(
        "%d trajectories asked, %d already in the journal (%s)", len(prompts), len(state.ids), journal.path
    )
    tally = RolloutTally()
    farm = services = info = None
    startup_s = rollout_s = 0.0
    try:
        if first is not None:
            needs = demand(cfg)
            info = connect(cfg, needs)
            check_schedulable(cfg, needs, cluster_capacity(), info.embedded)  # seconds, not a timeout later
            from twinkle_agentic.actors.driver import RolloutFarm

            from .services import deploy

            services = deploy(cfg, info.embedded)
            farm = RolloutFarm(cfg.engine_config(), cfg.rollout_spec(services.catalog), cfg.farm_options())
            t0 = time.perf_counter()
            services_ready = in_background(services.wait_ready)  # the services come up while engines start
            farm.start()
            services_ready.result()
            startup_s = time.perf_counter() - t0
            to_run = max(1, len(prompts) - len(state.ids))  # the progress bar's total (exact unless the
            # journal holds ids this plan does not ask for)
            rollout_s = _roll(cfg, farm, itertools.chain([first], todo), journal, tally, to_run)
        journal.close()
        files = {"journal": journal.path}
        if cfg.output_format == "parquet":
            files["parquet"] = journal.write_parquet()
        summary = RolloutSummary(
            output=cfg.output,
            files=files,
            tally=tally,
            resumed=todo.skipped,
            **in_output(journal, state, tally, reread=todo.partial > 0),
            wall_s=time.perf_counter() - start,
            rollout_s=rollout_s,
            startup_s=startup_s,
            engines=cfg.engines,
            restarts=farm.restarts if farm else 0,
            given_up=farm.given_up if farm else 0,
            cluster=info.summary() if info else "",
            services=services.urls if services else {},
        )
        files["summary"] = journal.write_summary(summary.to_dict())
        return summary
    finally:
        journal.close()
        if farm is not None:
            farm.shutdown()
        if services is not None and not cfg.keep_services and not info.embedded:
            services.teardown()


class Unfinished:
    """The trajectories of every group with a member not in ``done``, in plan order, as they are read
    (a group is written whole, so a group with a member missing is run again whole); ``skipped``
    counts the trajectories of the groups left out so far, ``partial`` the groups run again that had
    some member in ``done`` (none, for a journal this job wrote: it writes groups whole)."""

    def __init__(self, groups: Iterable[list[dict[str, Any]]], done: Container[str]):
        self._groups = iter(groups)
        self._done = done
        self._pending: Iterator[dict[str, Any]] = iter(())
        self.skipped = 0
        self.partial = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        while True:
            trajectory = next(self._pending, None)
            if trajectory is not None:
                return trajectory
            group = next(self._groups)  # StopIteration ends this iterator too
            done = sum(t["trajectory_id"] in self._done for t in group)
            if group and done == len(group):
                self.skipped += len(group)
                continue
            self.partial += done > 0
            self._pending = iter(group)


def in_output(journal: Journal, state: JournalState, tally: RolloutTally, reread: bool) -> dict[str, Any]:
    """The summary's figures for the whole output: what the journal held when the run began plus what
    this run wrote (no group was in both: a group with any member in the journal was either skipped
    or, with ``reread``, run again whole, and then the journal is read again to count each id once)."""
    if reread:
        state, tally = journal.recover(), RolloutTally()
    return {
        "total_in_output": len(state.ids) + tally.trajectories,
        "stop_reasons_in_output": state.stop_reasons + tally.stop_reasons,
        "policy_versions_in_output": state.policy_versions + tally.policy_versions,
        "groups_in_output": len(state.groups) + tally.groups,
        "failed_groups_in_output": len(state.failed_groups) + tally.failed_groups,
        "rewards_in_output": state.rewards.merged(tally.rewards),
    }


def in_background(fn: Callable[[], Any]) -> Future:
    """Run ``fn`` on a daemon thread (a failing start must not wait for it at exit); its Future."""
    future: Future = Future()

    def target() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=target, name="rollout-background", daemon=True).start()
    return future


def _roll(
    cfg: RolloutJobConfig,
    farm: Any,
    todo: Iterable[dict[str, Any]],
    journal: Journal,
    tally: RolloutTally,
    total: int | None = None,
) -> float:
    """Feed ``todo`` (read lazily by the farm) and stream the farm's batches into groups and each batch's
    complete groups into the journal (failed members go back to the farm in a further run:
    ``roll_groups``); ``total`` sizes the progress bar. Returns the rollout's wall time."""
    from tqdm import tqdm

    start = time.perf_counter()
    collector = GroupCollector(cfg.groups)
    with tqdm(
        total=len(todo) if total is None and isinstance(todo, list) else total, unit="traj", desc="rollout", disable=not cfg.progress, dynamic_ncols=True
    ) as bar:
        for batch, groups in roll_groups(farm.run, todo, collector):
            tally.add([], batch.activity, batch.generated_tokens)
            journal.append([member for group in groups for member in group])
            for group in groups:
                tally.add_group(group)
                bar.update(len(group))
            tally.member_retries = collector.retried
            bar.set_postfix(
                errors=tally.stop_reasons.get("error", 0), failed_groups=tally.failed_groups,
                restarts=farm.restarts, refresh=False,
            )  # fmt: skip
    return time.perf_counter() - start
