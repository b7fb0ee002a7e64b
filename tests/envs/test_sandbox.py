"""LocalSubprocessSandbox: every escape this project promises to contain is tried for real."""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from twinkle_agentic.envs.sandbox import LocalSubprocessSandbox, SandboxLimits, probe_namespaces

HAS_NAMESPACES = probe_namespaces(sys.executable) is not None
MODES = [pytest.param("namespaces", marks=pytest.mark.skipif(not HAS_NAMESPACES, reason="no namespaces here")),
         "rlimits"]
LIMITS = SandboxLimits(cpu_time_s=5, memory_mb=256, max_processes=16, max_file_mb=4, max_output_bytes=64 << 10)


@pytest.fixture(params=MODES)
def sandbox(request):
    with LocalSubprocessSandbox(LIMITS, isolation=request.param) as box:
        assert box.isolation == request.param
        yield box


def sandbox_processes(box: LocalSubprocessSandbox) -> list[int]:
    """Host processes still running code of this sandbox (matched by its private directory)."""
    marker = str(box.workdir.parent).encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(pid))
    return found


def test_ordinary_program_stdin_stdout_exit_code(sandbox):
    result = sandbox.run("import sys\ndata = sys.stdin.read()\nprint(data.upper())\nsys.exit(3)", stdin="hé")
    assert (result["exit_code"], result["stdout"], result["timed_out"], result["limit"]) == (3, "HÉ\n", False, None)
    failing = sandbox.run("raise ValueError('nope')")
    assert failing["exit_code"] == 1 and "ValueError: nope" in failing["stderr"]
    assert "main.py" in failing["stderr"] and "_sandbox_boot" not in failing["stderr"]


def test_files_persist_between_runs_in_its_own_directory(sandbox):
    assert sandbox.run("open('state.txt', 'w').write('1')")["exit_code"] == 0
    assert sandbox.run("print(open('state.txt').read())")["stdout"] == "1\n"
    assert (sandbox.workdir / "state.txt").read_text() == "1"


def test_infinite_loop_hits_the_wall_clock(sandbox):
    started = time.monotonic()
    result = sandbox.run("while True:\n    pass", timeout_s=1.0)
    assert result["timed_out"] and result["limit"] == "wall_time" and result["exit_code"] is None
    assert time.monotonic() - started < 5
    assert sandbox_processes(sandbox) == []


def test_cpu_time_limit_kills_a_busy_loop():
    with LocalSubprocessSandbox(SandboxLimits(cpu_time_s=1)) as box:
        result = box.run("while True:\n    pass", timeout_s=30)
    assert not result["timed_out"] and result["limit"] == "cpu_time" and result["exit_code"] < 0


def test_fork_bomb_is_contained(sandbox):
    result = sandbox.run("import os\nwhile True:\n    os.fork()", timeout_s=10)
    assert result["exit_code"] != 0 and not result["timed_out"]
    assert result["limit"] == ("processes" if sandbox.isolation == "namespaces" else "policy")
    time.sleep(0.2)
    assert sandbox_processes(sandbox) == []


def test_memory_hog_is_contained(sandbox):
    result = sandbox.run("chunks = []\nwhile True:\n    chunks.append(bytearray(32 << 20))", timeout_s=10)
    assert result["exit_code"] == 1 and result["limit"] == "memory" and "MemoryError" in result["stderr"]


def test_writing_outside_its_directory_is_contained(sandbox, tmp_path):
    inside_repo = Path(__file__).with_name(f"escape-{uuid.uuid4().hex}.txt")
    in_tmp = tmp_path / "escape.txt"
    code = "\n".join(
        f"try:\n    open({str(path)!r}, 'w').write('x')\n    print('wrote', {str(path)!r})\n"
        f"except OSError as exc:\n    print('refused', type(exc).__name__)"
        for path in (inside_repo, in_tmp)
    )
    result = sandbox.run(code)
    assert not inside_repo.exists() and not in_tmp.exists()
    assert result["stdout"].count("refused") >= 1 and result["exit_code"] == 0


def test_network_connections_fail_and_reach_nothing(sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    result = sandbox.run(
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('connected')\n"
        "except Exception as exc:\n    print('blocked', exc)"
    )
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing reached the listener's backlog
        listener.accept()
    listener.close()
    assert result["stdout"].startswith("blocked")


@pytest.mark.skipif(not HAS_NAMESPACES, reason="pid namespaces needed to catch a setsid daemon")
def test_background_daemon_does_not_outlive_the_run():
    with LocalSubprocessSandbox(LIMITS) as box:
        code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.6)\n"
                "    open('late.txt', 'w').write('escaped')\n    os._exit(0)\nprint('parent done')")
        assert box.run(code)["stdout"] == "parent done\n"
        time.sleep(1.2)
        assert not (box.workdir / "late.txt").exists() and sandbox_processes(box) == []


def test_output_is_capped_and_file_size_limited(sandbox):
    flood = sandbox.run("import sys\nsys.stdout.write('x' * (200 << 10))")
    assert flood["truncated"] and len(flood["stdout"]) == 64 << 10
    big_file = sandbox.run("open('big.bin', 'wb').write(b'0' * (8 << 20))")
    assert big_file["exit_code"] != 0 and big_file["limit"] == "file_size"


def test_cleanup_removes_the_directory():
    box = LocalSubprocessSandbox(LIMITS)
    root = box.workdir.parent
    box.run("open('f', 'w').write('1')")
    box.cleanup()
    assert not root.exists()
    with pytest.raises(ValueError, match="isolation"):
        LocalSubprocessSandbox(isolation="docker")
    with pytest.raises(ValueError, match="positive"):
        SandboxLimits(memory_mb=0)
