"""How the job CLIs stop on Ctrl-C and on SIGTERM (``ray job stop``, a scheduler, ``kill``).

Both become an exception in the main thread (``KeyboardInterrupt``, ``SystemExit``), so the run's
``finally`` blocks and Ray's shutdown still run, and the CLI can say where it stopped instead of
dying with a traceback. ``ray.init`` installs its own SIGTERM handler (``sys.exit(15)``) once a run
connects; ours covers the time before that and a process that never connects.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

INTERRUPTED = (KeyboardInterrupt, SystemExit)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def sigterm_raises_exit() -> Iterator[None]:
    """SIGTERM raises ``SystemExit(143)`` inside the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_code(stopped: BaseException) -> int:
    """The exit status of a run stopped by ``stopped``: 130 after Ctrl-C, 143 after SIGTERM (Ray's
    handler exits with the bare signal number, 15; a shell reports 128 + the signal), else its code."""
    if isinstance(stopped, KeyboardInterrupt):
        return 130
    code = stopped.code if isinstance(stopped, SystemExit) and isinstance(stopped.code, int) else 1
    return 128 + code if code == signal.SIGTERM else code
