"""How the job's read spreads over a cluster that may still grow: task count and concurrency cap.

Ray Data fixes a read's task count and its ``concurrency`` when the dataset is planned. Sized to the
CPUs present when the job starts, an autoscaling cluster that starts small runs every read on its
first nodes and the nodes added later get none. So the read is planned for the cluster's *largest*
size, which the autoscaler publishes in its cluster config (autoscaler v2: ``ray up`` since Ray
2.50, KubeRay with v2), as Ray Data's own hash shuffle reads it. Ray Data's streaming executor then
starts the tasks that wait as resources appear. Where no autoscaler publishes a larger size (a local
or hand-started cluster), the plan is sized to the CPUs present, with one read task running per CPU:
more would only crowd those CPUs (read tasks ask for a quarter CPU, see ``job.READ_TASK_CPUS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from twinkle_agentic.io import Source

# Whole-file read tasks per CPU. Each read task's output reaches the dedup exchange as one block per
# 128 MiB. Split files still spread over every CPU (``job.needs_split``); two tasks per CPU keep a slow
# file from leaving a CPU idle for long.
READ_TASKS_PER_CPU = 2
# A cluster that may grow without bound (a node type with no max_workers) is planned for one CPU per
# this much input (estimated in-memory bytes): more CPUs than that would each read very little.
BYTES_PER_READ_CPU = 256 << 20
# The autoscaler's answer for "no bound" is sys.maxsize; anything this large is treated as such.
UNBOUNDED_CPUS = 1 << 40


@dataclass(frozen=True)
class ReadPlan:
    """The read's shape: ``cpus`` it is spread over (what ``job.needs_split`` weighs the files
    against), ``tasks`` when each reads whole files, at most ``concurrency`` running at once (None: as
    many as the cluster's free resources allow)."""

    cpus: int
    tasks: int
    concurrency: int | None

    def describe(self) -> str:
        running = "as many as the cluster has room for" if self.concurrency is None else f"at most {self.concurrency}"
        return f"read planned for {self.cpus} CPU(s): {self.tasks} whole-file task(s), {running} at once"


def read_tasks(sources: list[Source], cpus: int) -> int:
    """Read tasks when each reads whole files: one per file, at most READ_TASKS_PER_CPU per CPU."""
    return max(1, min(len(sources), READ_TASKS_PER_CPU * cpus))


def plan_read(sources: list[Source], cpus_now: int, cpus_max: int | None, cap: int | None) -> ReadPlan:
    """The read for a cluster of ``cpus_now`` CPUs that may grow to ``cpus_max`` (the autoscaler's
    bound; None when no autoscaler publishes one; UNBOUNDED_CPUS or more: no bound), with the user's
    ``--read-concurrency`` ``cap`` (None: unset).

    - ``cap`` set: spread over ``cap`` CPUs, at most ``cap`` tasks at once (the user's choice).
    - the cluster may grow to a known size: spread over that size, one task per CPU at that size.
    - it may grow without bound: spread over one CPU per BYTES_PER_READ_CPU of input (at least the
      CPUs present), no cap.
    - otherwise (a cluster of fixed size): the CPUs present, one task per CPU.
    """
    cpus_now = max(1, cpus_now)
    if cap is not None:
        spread, concurrency = cap, cap
    elif cpus_max is None or cpus_max <= cpus_now:
        spread, concurrency = cpus_now, cpus_now
    elif cpus_max >= UNBOUNDED_CPUS:
        from .read import estimated_total

        spread, concurrency = max(cpus_now, -(-estimated_total(sources) // BYTES_PER_READ_CPU)), None
    else:
        spread, concurrency = cpus_max, cpus_max
    return ReadPlan(spread, read_tasks(sources, spread), concurrency)


def autoscaler_max_cpus() -> int | None:
    """CPUs of the connected cluster at its largest, from the cluster config the autoscaler reports
    to the GCS; None when no autoscaler reports one (a local or hand-started cluster, autoscaler v1)."""
    from ray._private import state

    limits = state.state.get_max_resources_from_cluster_config()
    cpus = (limits or {}).get("CPU")
    return int(cpus) if cpus else None
