"""``LocalSubprocessSandbox``: run untrusted Python in a contained subprocess.

Each run starts ``python -I _sandbox_boot.py`` in a new session with stdout/stderr going to files
(no pipe can fill up and wedge the caller) and applies, before any user code runs:

* **CPU time** (``RLIMIT_CPU``), **address space** (``RLIMIT_AS``), **file size**
  (``RLIMIT_FSIZE``), **open files** and **process count** (``RLIMIT_NPROC``) limits;
* a **wall-clock** deadline (``timeout_s``), after which the whole run is killed.

Isolation modes (``isolation=``):

``namespaces`` (chosen by ``auto`` when the kernel allows it; as root, or unprivileged with user
namespaces): new network namespace (no interface is up, so every connection, loopback included,
fails with ``ENETUNREACH``), new pid namespace (nothing the code starts outlives the run; it cannot
see or signal host processes), new mount namespace with the whole filesystem read-only except a
private tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm`` and the sandbox directory (mounted at
``/tmp/sandbox``, the code's working directory). As root the code also runs under a run-unique
unprivileged uid, so it owns no file on the host and ``RLIMIT_NPROC`` counts only its own processes;
unprivileged, it keeps the caller's uid with no capabilities.

``rlimits`` (fallback): the same resource limits plus an in-process audit hook that refuses
sockets, subprocesses, ``os.fork``, ctypes and writes outside the sandbox directory. This is a
speed bump, not a wall: native extensions can bypass audit hooks. ``auto`` logs a warning when it
has to fall back.

What is *not* contained in either mode: total memory across processes (``RLIMIT_AS`` is per
process, so up to ``max_processes x memory_mb``), CPU time across processes, disk reads (the code
can read any world-readable file), and timing side channels.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

BOOT_SCRIPT = Path(__file__).with_name("_sandbox_boot.py")
ISOLATION_MODES = ("auto", "namespaces", "rlimits")
MAIN_NAME = "main.py"
RUN_UID_RANGE = (1_000_000_000, 1_900_000_000)  # far above any real account; one per run
SETUP_FAILED_EXIT = 125
NAMESPACE_TEARDOWN_S = 5.0


class SandboxError(RuntimeError):
    """The sandbox itself could not run (not a failure of the code under test)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. Memory and CPU time are per process (see module docstring)."""

    cpu_time_s: float = 10.0
    memory_mb: int = 1024
    max_processes: int = 16
    max_file_mb: int = 16
    max_open_files: int = 256
    max_output_bytes: int = 1 << 20
    tmpfs_mb: int = 64

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")


@functools.lru_cache(maxsize=8)
def probe_namespaces(python: str) -> dict[str, Any] | None:
    """Can this machine build the ``namespaces`` sandbox? Returns what it offers, or None."""
    with tempfile.TemporaryDirectory(prefix="twinkle-sbx-probe-") as tmp:
        cfg_path = Path(tmp) / "cfg.json"
        code_path = Path(tmp) / "code.py"
        code_path.write_text("")
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        cfg = {"mode": "namespaces", "probe": True, "workdir": str(workdir), "code_path": str(code_path),
               "tmpfs_mb": 1}
        cfg_path.write_text(json.dumps(cfg))
        try:
            done = subprocess.run([python, "-I", str(BOOT_SCRIPT), str(cfg_path)], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            logger.debug("namespace probe failed: %s", exc)
            return None
    if done.returncode != 0:
        logger.debug("namespace probe failed (%s): %s", done.returncode, done.stderr.strip()[-500:])
        return None
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _count_user_processes(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as handle:
                for line in handle:
                    if line.startswith("Uid:"):
                        count += int(line.split()[1]) == uid
                        break
        except OSError:
            continue
    return count


def _interpreter_is_private(python: str) -> bool:
    """True when another uid could not read this interpreter (e.g. pyenv under /root)."""
    from ._sandbox_boot import blocked_ancestor

    prefix = Path(os.path.realpath(python)).parent.parent
    return any(blocked_ancestor(str(p)) for p in (prefix, *map(Path, sys.path)) if p.is_dir())


def _read_capped(path: Path, cap: int) -> tuple[str, bool]:
    with open(path, "rb") as handle:
        data = handle.read(cap + 1)
    truncated = len(data) > cap
    return data[:cap].decode("utf-8", errors="replace"), truncated


def _limit_hit(returncode: int | None, timed_out: bool, stderr: str) -> str | None:
    """Which limit ended the run (signals are exact; memory and process counts read the traceback)."""
    if timed_out:
        return "wall_time"
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return "cpu_time"
    if returncode == -signal.SIGXFSZ or "File too large" in stderr:  # Python ignores SIGXFSZ: EFBIG
        return "file_size"
    if "PermissionError: sandbox:" in stderr:
        return "policy"  # refused by the rlimits-mode audit hook
    if "MemoryError" in stderr:
        return "memory"
    if "Resource temporarily unavailable" in stderr and ("fork" in stderr or "thread" in stderr):
        return "processes"
    return None


class LocalSubprocessSandbox:
    """A private directory plus a way to run Python code against it under limits.

    The directory persists across ``run`` calls (files written by one run are visible to the next),
    and is removed by ``cleanup()`` (also on garbage collection / interpreter exit). Thread-safe:
    concurrent ``run`` calls share the directory but nothing else.
    """

    def __init__(self, limits: SandboxLimits | None = None, *, isolation: str = "auto", python: str | None = None):
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        self.limits = limits or SandboxLimits()
        self.python = python or sys.executable
        self._requested = isolation
        self._isolation: str | None = None
        self._root: Path | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    # -- setup ---------------------------------------------------------------------------------------

    @property
    def isolation(self) -> str:
        """The mode actually used: ``namespaces`` or ``rlimits``."""
        if self._isolation is None:
            if self._requested == "rlimits":
                self._isolation = "rlimits"
            elif probe_namespaces(self.python) is not None:
                self._isolation = "namespaces"
            elif self._requested == "namespaces":
                raise SandboxError(
                    "isolation='namespaces' needs root or unprivileged user namespaces "
                    "(sysctl kernel.unprivileged_userns_clone=1 / apparmor_restrict_unprivileged_userns=0); "
                    "use isolation='auto' to fall back to rlimits"
                )
            else:
                logger.warning("sandbox: namespaces unavailable, falling back to rlimits + audit-hook isolation")
                self._isolation = "rlimits"
        return self._isolation

    @property
    def workdir(self) -> Path:
        """The sandbox's private directory (created on first use)."""
        with self._lock:
            if self._root is None:
                root = Path(tempfile.mkdtemp(prefix="twinkle-sandbox-"))
                root.chmod(0o711)  # the run's uid must reach work/; io/ stays private
                (root / "work").mkdir()
                (root / "io").mkdir(mode=0o700)
                self._root = root
                self._finalizer = weakref.finalize(self, shutil.rmtree, str(root), True)
            return self._root / "work"

    def cleanup(self) -> None:
        """Remove the sandbox directory; the sandbox can be used again (with a fresh directory)."""
        with self._lock:
            if self._finalizer is not None:
                self._finalizer()
            self._root = None
            self._finalizer = None

    def __enter__(self) -> LocalSubprocessSandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()

    # -- running -------------------------------------------------------------------------------------

    def run(self, code: str, stdin: str | bytes | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
        """Run ``code`` as ``__main__`` in the sandbox directory.

        Returns ``{exit_code, stdout, stderr, timed_out, duration_s, signal, limit, truncated,
        isolation}``: ``exit_code`` is negative when a signal ended the run (as in ``subprocess``),
        ``limit`` names the limit that ended it (``wall_time``, ``cpu_time``, ``memory``,
        ``file_size``, ``processes``, ``policy``) or None. Raises ``SandboxError`` only when the sandbox itself
        cannot start.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        mode = self.isolation
        workdir = self.workdir
        io_dir = Path(tempfile.mkdtemp(prefix="run-", dir=workdir.parent / "io"))
        try:
            return self._run(code, stdin, timeout_s, mode, workdir, io_dir)
        finally:
            shutil.rmtree(io_dir, ignore_errors=True)

    def _config(self, mode: str, workdir: Path, code_path: Path) -> dict[str, Any]:
        uid = None
        nproc = self.limits.max_processes
        if os.geteuid() == 0 and (mode == "namespaces" or not _interpreter_is_private(self.python)):
            uid = secrets.randbelow(RUN_UID_RANGE[1] - RUN_UID_RANGE[0]) + RUN_UID_RANGE[0]
            os.chown(workdir, uid, uid)
            for dirpath, dirnames, filenames in os.walk(workdir):
                for name in dirnames + filenames:
                    os.lchown(os.path.join(dirpath, name), uid, uid)
        elif mode == "rlimits":
            nproc += _count_user_processes(os.geteuid())  # the limit is per user, not per run
        return {
            "mode": mode,
            "workdir": str(workdir),
            "code_path": str(code_path),
            "main_name": MAIN_NAME,
            "uid": uid,
            "nproc": nproc,
            **asdict(self.limits),
        }

    def _run(self, code: str, stdin: Any, timeout_s: float, mode: str, workdir: Path, io_dir: Path) -> dict[str, Any]:
        code_path = io_dir / "code.py"
        code_path.write_text(code, encoding="utf-8")
        (workdir / MAIN_NAME).write_text(code, encoding="utf-8")  # for tracebacks showing source lines
        cfg_path = io_dir / "cfg.json"
        cfg_path.write_text(json.dumps(self._config(mode, workdir, code_path)))
        stdin_path = io_dir / "stdin"
        stdin_path.write_bytes(stdin.encode("utf-8") if isinstance(stdin, str) else (stdin or b""))
        out_path, err_path = io_dir / "stdout", io_dir / "stderr"
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "HOME": "/tmp/sandbox"}
        started = time.monotonic()
        with open(stdin_path, "rb") as fin, open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
            try:
                proc = subprocess.Popen(
                    [self.python, "-I", str(BOOT_SCRIPT), str(cfg_path)],
                    stdin=fin, stdout=fout, stderr=ferr, cwd=str(workdir), env=env,
                    start_new_session=True, close_fds=True,
                )
            except OSError as exc:
                raise SandboxError(f"could not start {self.python}: {exc}") from exc
            timed_out = False
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                returncode = None
            self._kill_leftovers(proc, mode)
            if timed_out:
                proc.wait()
        duration = time.monotonic() - started
        cap = self.limits.max_output_bytes
        stdout, out_cut = _read_capped(out_path, cap)
        stderr, err_cut = _read_capped(err_path, cap)
        if returncode == SETUP_FAILED_EXIT and stderr.startswith("sandbox setup failed"):
            raise SandboxError(stderr.strip())
        sig = -returncode if returncode is not None and returncode < 0 else None
        if timed_out:
            sig = None
        return {
            "exit_code": returncode,
            "stdout": stdout,
            "stderr": stderr,
            "timed_out": timed_out,
            "duration_s": round(duration, 4),
            "signal": signal.Signals(sig).name if sig else None,
            "limit": _limit_hit(returncode, timed_out, stderr),
            "truncated": out_cut or err_cut,
            "isolation": mode,
        }

    def _kill_leftovers(self, proc: subprocess.Popen, mode: str) -> None:
        """Nothing the code started may outlive the run.

        ``namespaces``: SIGTERM asks the boot process to SIGKILL the namespace's init and wait for
        it; init's exit waits until the kernel has killed every process in the namespace, so when
        boot is gone, all is gone. ``rlimits``: kill the process group, which a process that
        called setsid escapes (the audit hook refuses fork and subprocesses in that mode). In both
        modes a SIGKILL of the group follows as the fallback.
        """
        if mode == "namespaces" and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(NAMESPACE_TEARDOWN_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
