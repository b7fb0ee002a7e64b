"""Submit a Ray job with this project's consistent environment, stream its logs, return its status."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from .auth import AUTH_MODE_ENV, apply_auth_mode

DEFAULT_DASHBOARD = "http://127.0.0.1:8265"
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_CPU_KVCACHE_SPACE", "TORCH_COMPILE_DISABLE")


def jobs_address(address: str | None = None) -> str:
    """The Jobs API address: explicit, else RAY_API_SERVER_ADDRESS, else the local dashboard."""
    return address or os.environ.get("RAY_API_SERVER_ADDRESS") or DEFAULT_DASHBOARD


def job_runtime_env(working_dir: str | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    env_vars = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    env_vars[AUTH_MODE_ENV] = os.environ[AUTH_MODE_ENV]
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    if working_dir:
        runtime_env["working_dir"] = working_dir
        runtime_env["excludes"] = [".venv", ".git", "**/__pycache__", ".upstream", "runs", "out"]
    for key, value in (extra or {}).items():
        if key == "env_vars":
            runtime_env["env_vars"].update(value)
        else:
            runtime_env[key] = value
    return runtime_env


def submit(
    entrypoint: list[str] | str,
    *,
    address: str | None = None,
    working_dir: str | None = ".",
    runtime_env: dict[str, Any] | None = None,
    wait: bool = True,
    auth_mode: str | None = None,
    stream=sys.stdout,
) -> tuple[str, str]:
    """Submit ``entrypoint`` and (by default) follow it to the end. Returns ``(job_id, status)``."""
    from ray.job_submission import JobSubmissionClient

    apply_auth_mode(auth_mode)
    command = entrypoint if isinstance(entrypoint, str) else " ".join(_quote(a) for a in entrypoint)
    client = JobSubmissionClient(jobs_address(address))
    job_id = client.submit_job(entrypoint=command, runtime_env=job_runtime_env(working_dir, runtime_env))
    if not wait:
        return job_id, str(client.get_job_status(job_id))

    async def follow() -> None:
        async for chunk in client.tail_job_logs(job_id):
            stream.write(chunk)
            stream.flush()

    asyncio.run(follow())
    status = client.get_job_status(job_id)
    return job_id, str(getattr(status, "value", status))


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
