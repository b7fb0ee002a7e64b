"""Pieces shared by the Serve apps: config checking, "module:Class" loading, bearer tokens.

Nothing here imports Ray, so the servers' logic can be unit-tested (and benchmarked under plain
uvicorn) without a cluster.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable, Mapping
from typing import Any

from twinkle_agentic.checks import check_keys as check_known_keys
from twinkle_agentic.checks import check_positive
from twinkle_agentic.errors import ConfigError
from twinkle_agentic.loading import load_object as _load_object


class DeploymentConfigError(ConfigError):
    """A Serve app's ``args`` or ``user_config`` is wrong; the message says which key and why."""


def check_keys(where: str, given: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Reject unknown keys by name, listing the accepted ones (no silent fallbacks)."""
    check_known_keys(where, given, sorted(allowed), error=DeploymentConfigError)


def positive_number(where: str, value: Any, *, allow_none: bool = False, integer: bool = False) -> Any:
    """``value`` if it is a positive number (an int when ``integer``), else a DeploymentConfigError."""
    return check_positive(where, value, integer=integer, allow_none=allow_none, error=DeploymentConfigError)


def load_object(import_path: str) -> Any:
    """Import ``"package.module:attribute"`` (the attribute may be dotted: ``"mod:Outer.Inner"``)."""
    return _load_object(import_path, what="import path", error=DeploymentConfigError)


def resolve_token(token: str | None, token_env: str | None) -> str | None:
    """The bearer token to require: given literally, or read from the environment variable ``token_env``.

    ``token_env`` keeps secrets out of the Serve YAML: set the variable on the cluster (or in the
    deployment's ``runtime_env.env_vars`` from a secret store). A named variable that is unset or
    empty is an error, never a silently open server.
    """
    if token is not None and token_env is not None:
        raise DeploymentConfigError("give either token or token_env, not both")
    if token_env is not None:
        value = os.environ.get(token_env, "")
        if not value:
            raise DeploymentConfigError(
                f"token_env={token_env!r} names an environment variable that is unset or empty on this "
                "replica; set it (e.g. runtime_env.env_vars) or drop token_env to serve without a token"
            )
        return value
    if token is not None and (not isinstance(token, str) or not token):
        raise DeploymentConfigError("token must be a non-empty string or null")
    return token


def bearer_ok(authorization: str | None, token: str | None) -> bool:
    """True when no token is required, or the ``Authorization`` header carries it (constant-time)."""
    if token is None:
        return True
    if not authorization:
        return False
    scheme, _, value = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


def require_bearer(token: str | None) -> Any:
    """A FastAPI dependency answering 401 (with ``WWW-Authenticate: Bearer``) unless the token matches."""
    from fastapi import Header, HTTPException

    def authorized(authorization: str | None = Header(default=None)) -> None:
        if not bearer_ok(authorization, token):
            raise HTTPException(
                status_code=401, detail="missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    return authorized


def replica_deployment_config() -> Any:
    """The running replica's Serve ``DeploymentConfig``; None outside a replica.

    Serve passes ``user_config`` to ``reconfigure`` only after ``__init__``; reading it here lets a
    replica build its pools once, at the configured size, and check option coherence at startup.
    """
    try:
        from ray import serve

        return serve.get_replica_context()._deployment_config
    except Exception:  # not in a replica, or Serve renamed its private field: skip the early read
        return None
