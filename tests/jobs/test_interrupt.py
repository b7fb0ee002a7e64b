"""How the job CLIs stop on Ctrl-C and SIGTERM (jobs/interrupt.py), without Ray."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from twinkle_agentic.jobs.interrupt import exit_code, sigterm_raises_exit


def test_sigterm_raises_exit_inside_the_block_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped, sigterm_raises_exit():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs between bytecodes, long before this ends
    assert stopped.value.code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_outside_the_main_thread_the_block_changes_nothing():
    seen = []

    def body():
        with sigterm_raises_exit():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


@pytest.mark.parametrize(
    ("stopped", "code"),
    [
        (KeyboardInterrupt(), 130),
        (SystemExit(143), 143),  # our handler
        (SystemExit(15), 143),  # Ray's driver handler: sys.exit(signum)
        (SystemExit(3), 3),
        (SystemExit("bye"), 1),
    ],
)
def test_exit_codes_follow_the_shell_convention(stopped, code):
    assert exit_code(stopped) == code
