"""Scaffold and serve OpenEnv's echo environment locally (``openenv init``): test and benchmark
support for checking the OpenEnv adapter against a real openenv-core server, not used at run time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .local_server import LocalServer

ENV_NAME = "echo_env"
INIT_COMMAND = "import typer; from openenv.cli.commands.init import init; typer.run(init)"
CONCURRENCY_SETTING = re.compile(r"max_concurrent_envs=\d+")


def scaffold_echo_env(parent: str | os.PathLike[str], max_concurrent_envs: int = 1, name: str = ENV_NAME) -> Path:
    """Run ``openenv init`` in ``parent`` and set the app's session limit; returns the package dir.

    The init command is invoked on its own (``typer.run(init)``): the same code as ``openenv init``
    without importing every other CLI command, which costs ~10x the time on a busy machine.
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", INIT_COMMAND, name], cwd=parent, capture_output=True, text=True,
                          timeout=120)
    package = parent / name
    app = package / "server" / "app.py"
    if done.returncode != 0 or not app.exists():
        raise RuntimeError(f"openenv init {name} failed ({done.returncode}): {done.stderr[-2000:] or done.stdout[-2000:]}")
    source = app.read_text()
    if not CONCURRENCY_SETTING.search(source):
        raise RuntimeError(f"{app} has no max_concurrent_envs setting to adjust; the openenv template changed")
    app.write_text(CONCURRENCY_SETTING.sub(f"max_concurrent_envs={int(max_concurrent_envs)}", source, count=1))
    return package


def start_echo_server(package: str | os.PathLike[str], port: int, **kwargs) -> LocalServer:
    """Serve a scaffolded echo env with uvicorn on ``127.0.0.1:port`` (stop it with ``.stop()``)."""
    package = Path(package)
    argv = [sys.executable, "-m", "uvicorn", f"{package.name}.server.app:app", "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning", "--ws", "websockets"]
    env = {"PYTHONPATH": str(package.parent), "ENABLE_WEB_INTERFACE": "false"}
    return LocalServer(argv, port, cwd=package.parent, env=env, **kwargs).start()
