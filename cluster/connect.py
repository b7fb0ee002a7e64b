"""Reach a Ray cluster: the address given, else ``RAY_ADDRESS``, else an embedded local cluster."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .auth import apply_auth_mode
from .worker_pool import worker_pool_config


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    embedded: bool
    auth_mode: str
    resources: dict[str, float] = field(default_factory=dict)
    dashboard_url: str | None = None

    def summary(self) -> str:
        cpus = self.resources.get("CPU", 0)
        gpus = self.resources.get("GPU", 0)
        kind = "embedded local cluster" if self.embedded else "cluster"
        dash = f", dashboard {self.dashboard_url}" if self.dashboard_url else ""
        return f"{kind} at {self.address}: {cpus:g} CPUs, {gpus:g} GPUs, auth={self.auth_mode}{dash}"


_started_embedded = False


def resolve_address(address: str | None = None) -> str | None:
    """The explicit address, else ``RAY_ADDRESS``; None means "start an embedded local cluster"."""
    value = address if address is not None else os.environ.get("RAY_ADDRESS")
    value = (value or "").strip()
    return value or None


def local_cluster_size(min_cpus: int = 0) -> dict[str, Any]:
    """Size an embedded cluster to this machine: every CPU, and at least ``min_cpus`` logical CPUs
    (what a job's actors reserve; logical CPUs are a scheduling budget, so more than the cores is
    fine); GPUs as Ray detects them."""
    return {"num_cpus": max(os.cpu_count() or 1, min_cpus)}


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    min_cpus: int = 0,
    num_gpus: int | None = None,
    object_store_memory: int | None = None,
    runtime_env: dict[str, Any] | None = None,
    namespace: str | None = None,
    include_dashboard: bool | None = None,
    auth_mode: str | None = None,
    log_to_driver: bool = True,
    preload_modules: Sequence[str] = (),
) -> ClusterInfo:
    """Connect this process to Ray and describe the cluster.

    Reuses an existing connection in this process. ``num_cpus``/``num_gpus``/``object_store_memory``,
    ``include_dashboard`` and ``preload_modules`` (modules every worker imports before it accepts
    work, see cluster.worker_pool) only apply to an embedded cluster: a running cluster's workers
    are configured where it was started. ``min_cpus`` sizes an embedded cluster without a
    ``num_cpus`` to at least that many logical CPUs (a job passes what its actors reserve).
    """
    import ray

    global _started_embedded
    mode = apply_auth_mode(auth_mode)
    target = resolve_address(address)
    if ray.is_initialized():
        return describe(ray.get_runtime_context(), embedded=_started_embedded, auth_mode=mode)
    kwargs: dict[str, Any] = {"namespace": namespace, "runtime_env": runtime_env, "log_to_driver": log_to_driver}
    if target is None:
        size = local_cluster_size(min_cpus)
        overrides = {
            "num_cpus": num_cpus,
            "num_gpus": num_gpus,
            "object_store_memory": object_store_memory,
            "include_dashboard": include_dashboard,
        }
        size.update({k: v for k, v in overrides.items() if v is not None})
        # An explicit "local" stops ray.init from joining a cluster named by RAY_ADDRESS.
        kwargs.update(size, address="local", _system_config=worker_pool_config(preload_modules) or None)
    else:
        kwargs["address"] = target
    context = ray.init(**{k: v for k, v in kwargs.items() if v is not None})
    _started_embedded = target is None
    return describe(context, embedded=_started_embedded, auth_mode=mode)


def describe(context: Any, *, embedded: bool, auth_mode: str) -> ClusterInfo:
    import ray

    address = getattr(context, "address_info", {}).get("address") or getattr(context, "gcs_address", "")
    dashboard = getattr(context, "dashboard_url", None) or None
    if dashboard and not dashboard.startswith("http"):
        dashboard = f"http://{dashboard}"
    resources = {k: float(v) for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU", "memory")}
    return ClusterInfo(str(address), embedded, auth_mode, resources, dashboard)


def disconnect() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
