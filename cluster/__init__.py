"""Reaching a Ray cluster: the given address, ``RAY_ADDRESS``, or an embedded local cluster.

Every Ray process this project starts or talks to shares one auth mode and environment (see
``twinkle_agentic.cluster.auth``), so ``ray start --head`` followed by ``ray job submit`` works.
"""

from .auth import ClusterConfigError, apply_auth_mode, ray_environment, resolve_auth_mode
from .connect import ClusterInfo, connect, disconnect, resolve_address
from .head import LocalHead

__all__ = [
    "ClusterConfigError",
    "ClusterInfo",
    "LocalHead",
    "apply_auth_mode",
    "connect",
    "disconnect",
    "ray_environment",
    "resolve_address",
    "resolve_auth_mode",
]
