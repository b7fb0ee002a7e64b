"""Run the rollout job: prompts -> services on Serve -> worker farm -> journal -> summary.

::

    prompts file --check, ids--> trajectories to run (minus those already in the journal)
      -> connect to Ray (address, RAY_ADDRESS, or an embedded cluster sized to the plan)
      -> check the cluster can hold the plan's engines and Serve replicas (capacity.py)
      -> deploy tool servers and env servers on Serve; list their tools
      -> RolloutFarm: N workers, one engine each; batches streamed back as they finish
      -> trajectories collected into groups (the samples of one prompt); a failed member rolled out
         again, fresh, up to groups.max_member_retries times (another farm run after this one)
      -> each complete group, with its advantages, into the journal (journal.py: trajectories.jsonl
         appended and fsynced locally, segments on object stores); progress bar
      -> (parquet), summary.json, the printed summary
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from twinkle_agentic.actors.catalog import ENVS_KEY, TOOLSETS_KEY

from twinkle_agentic.rollout.groups import GroupCollector, roll_groups

from .capacity import Demand, check_schedulable, cluster_capacity, plan_demand
from .config import ConfigError, RolloutJobConfig
from .journal import Journal
from .prompts import load_prompts, to_trajectories
from .summary import RolloutSummary, RolloutTally

logger = logging.getLogger(__name__)


def plan(cfg: RolloutJobConfig) -> list[dict[str, Any]]:
    """The trajectories the prompts ask for, checked against the configured tools and envs (no Ray)."""
    trajectories = to_trajectories(load_prompts(cfg.prompts, cfg.limit), cfg.samples_per_prompt)
    known = {TOOLSETS_KEY: {s.name for s in cfg.tools}, ENVS_KEY: {s.name for s in cfg.envs}}
    for trajectory in trajectories:
        for key, names in known.items():
            asked = trajectory.get(key)
            asked = [asked] if isinstance(asked, str) else list(asked or [])
            unknown = sorted(set(asked) - names)
            if unknown:
                raise ConfigError(
                    f"prompt {trajectory['prompt_id']!r} asks for {key} {unknown}, which this config does not serve "
                    f"(it serves {sorted(names) or 'none'})"
                )
    return trajectories


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
    trajectories = plan(cfg)
    journal, state = Journal.open(cfg.output, cfg.fingerprint(), cfg.overwrite)
    if state.truncated_bytes:
        logger.warning("cut a torn last line (%d bytes) from %s", state.truncated_bytes, journal.path)
    if state.cut_members:
        logger.warning("cut an incomplete last group (%d lines) from %s", state.cut_members, journal.path)
    todo = unfinished_groups(trajectories, state.ids)
    logger.info("%d trajectories asked, %d to run (%s)", len(trajectories), len(todo), journal.path)
    tally = RolloutTally()
    farm = services = info = None
    startup_s = rollout_s = 0.0
    try:
        if todo:
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
            rollout_s = _roll(cfg, farm, todo, journal, tally)
        journal.close()
        files = {"journal": journal.path}
        if cfg.output_format == "parquet":
            files["parquet"] = journal.write_parquet()
        final = journal.recover()
        summary = RolloutSummary(
            output=cfg.output,
            files=files,
            tally=tally,
            resumed=len(trajectories) - len(todo),
            total_in_output=len(final.ids),
            stop_reasons_in_output=final.stop_reasons,
            policy_versions_in_output=final.policy_versions,
            groups_in_output=len(final.groups),
            failed_groups_in_output=len(final.failed_groups),
            rewards_in_output=final.rewards,
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


def unfinished_groups(trajectories: list[dict[str, Any]], done: set[str]) -> list[dict[str, Any]]:
    """The trajectories of every group with a member not in ``done`` (a group is written whole, so a
    group with a member missing is run again whole)."""
    missing = {t["group_id"] for t in trajectories if t["trajectory_id"] not in done}
    return [t for t in trajectories if t["group_id"] in missing]


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
    cfg: RolloutJobConfig, farm: Any, todo: list[dict[str, Any]], journal: Journal, tally: RolloutTally
) -> float:
    """Stream the farm's batches into groups and each batch's complete groups into the journal (failed
    members go back to the farm in a further run: ``roll_groups``). Returns the rollout's wall time."""
    from tqdm import tqdm

    start = time.perf_counter()
    collector = GroupCollector(cfg.groups)
    with tqdm(
        total=len(todo), unit="traj", desc="rollout", disable=not cfg.progress, dynamic_ncols=True
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
