"""Run a local HTTP server as a child process: health-checked start, stop by process group.

Test and benchmark support (OpenEnv echo servers, the scripted chat server, vLLM's OpenAI server),
not used at run time. The child runs in its own session, so ``stop`` signals its whole process
group and never anything else. Pick its port with :func:`twinkle_agentic.net.free_port`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; the message carries its log tail."""


class LocalServer:
    """``argv`` started on ``127.0.0.1:port``; healthy when ``GET health_path`` answers 200."""

    def __init__(
        self,
        argv: Sequence[str],
        port: int,
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        health_path: str = "/health",
        startup_timeout_s: float = 120.0,
        log_path: str | os.PathLike[str] | None = None,
    ):
        self.argv = list(argv)
        self.port = port
        self.cwd = cwd
        self.env = {**os.environ, **(env or {})}
        self.health_path = health_path
        self.startup_timeout_s = startup_timeout_s
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="server-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalServer:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(f"{self.argv[:4]} exited with {self.process.returncode}:\n{self.log_tail()}")
            if self._healthy():
                return self
            time.sleep(0.1)
        self.stop()
        raise ServerStartError(f"{self.argv[:4]} not healthy after {self.startup_timeout_s:g}s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.health_path, timeout=1.0) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the server's process group, SIGKILL after ``grace_s``."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
