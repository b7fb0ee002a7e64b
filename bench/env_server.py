"""Env server: OpenEnv-protocol steps/s, ours vs openenv's own server, on the same echo env.

The env is the one ``openenv init`` scaffolds (echo a message; reward = 0.1 x its length; metadata
``{original_message, step}``), served three ways:

* openenv: the scaffold itself (openenv-core's ``create_app``) under uvicorn, one process;
* ours-uvicorn: ``EchoEnv`` below (same behaviour as a twinkle ``Env``) behind our protocol
  (deployments/env_server.py ``make_env_app``) under uvicorn, one process: protocol vs protocol;
* ours-serve: the same behind ``EnvServer`` on a local Ray Serve, 1 replica: adds the proxy hop.

Load: ``--sessions`` concurrent WebSocket sessions in one asyncio loop (the same raw client for all
three, sending each server's own action shape), each resets then steps for ``--seconds``. The
three servers run side by side and are measured in interleaved rounds (median of rounds reported).
Run: python bench/env_server.py [--seconds 3] [--rounds 3] [--sessions 1,8] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tool_server import append_record, measure_rounds, print_table, stop_serve, wait_healthy  # noqa: E402

from twinkle_agentic.envs.base import Env, StepResult  # noqa: E402
from twinkle_agentic.net import free_port  # noqa: E402

MESSAGE = "hello from the benchmark"


class EchoEnv(Env):
    """The ``openenv init`` echo env as a twinkle Env (tool ``echo``, argument ``message``)."""

    def __init__(self) -> None:
        self.steps = 0

    def reset(self, trajectory: dict | None = None) -> StepResult:
        self.steps = 0
        return StepResult(observation="Echo environment ready!", reward=0.0)

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        self.steps += 1
        message = str(arguments.get("message", ""))
        return StepResult(
            observation=message, reward=len(message) * 0.1, info={"original_message": message, "step": self.steps}
        )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="measured seconds per variant and round")
    p.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each measurement")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per load level")
    p.add_argument("--sessions", default="1,8", help="concurrent sessions, comma-separated")
    p.add_argument("--cpus", type=int, default=2, help="logical CPUs of the local Ray cluster")
    p.add_argument("--json-out", default=None, help="append the JSON record to this file")
    p.add_argument("--ours-uvicorn-port", type=int, default=None, help=argparse.SUPPRESS)  # internal: child mode
    return p


async def session(ws_url: str, action: dict[str, Any], warm_until: float, stop_at: float) -> list[float]:
    from websockets.asyncio.client import connect

    latencies: list[float] = []
    async with connect(ws_url, max_size=None, open_timeout=60) as ws:  # a loaded 2-core box can be slow
        await ws.send(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(await ws.recv())["type"] == "observation"
        frame = json.dumps({"type": "step", "data": action})
        while (now := time.monotonic()) < stop_at:
            started = time.perf_counter()
            await ws.send(frame)
            reply = json.loads(await ws.recv())
            if reply["type"] != "observation":
                raise RuntimeError(f"step failed: {reply}")
            if now >= warm_until:
                latencies.append(time.perf_counter() - started)
        await ws.send(json.dumps({"type": "close"}))
    return latencies


def env_driver(base_url: str, action: dict[str, Any], seconds: float, warmup: float) -> Callable[[int], tuple[list[float], int]]:
    """A variant for ``measure_rounds``: ``sessions`` concurrent WebSocket sessions stepping ``action``."""
    ws_url = base_url.replace("http://", "ws://") + "/ws"

    def run(sessions: int) -> tuple[list[float], int]:
        async def all_sessions() -> list[list[float]]:
            start = time.monotonic()
            window = (start + warmup, start + warmup + seconds)
            return await asyncio.gather(*(session(ws_url, action, *window) for _ in range(sessions)))

        try:
            return [x for one in asyncio.run(all_sessions()) for x in one], 0
        except Exception as exc:
            raise RuntimeError(f"{sessions} sessions against {ws_url} failed: {exc!r}") from exc

    return run


def scaffold_openenv(workdir: Path, max_sessions: int) -> Path:
    """``openenv init`` the echo env (offline), with room for ``max_sessions`` concurrent sessions."""
    openenv_cli = shutil.which("openenv") or str(Path(sys.executable).with_name("openenv"))
    subprocess.run([openenv_cli, "init", "bench_echo"], cwd=workdir, check=True, capture_output=True)
    env_dir = workdir / "bench_echo"
    app = env_dir / "server" / "app.py"
    source, count = re.subn(r"max_concurrent_envs=\d+", f"max_concurrent_envs={max_sessions}", app.read_text())
    if count != 1:
        raise RuntimeError(f"could not find max_concurrent_envs in {app}")
    app.write_text(source)
    return env_dir


def serve_child(command: list[str], cwd: Path, url: str, log_path: Path) -> subprocess.Popen:
    """Start a server process and wait for its /health. Its output goes to ``log_path``: a pipe
    nobody reads would fill up and freeze the server mid-benchmark."""
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        child = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url)
    except TimeoutError:
        child.kill()
        raise RuntimeError(f"server did not start: {log_path.read_text(errors='replace')[-2000:]}") from None
    return child


def stop(child: subprocess.Popen) -> None:
    child.terminate()
    try:
        child.wait(timeout=20)
    except subprocess.TimeoutExpired:
        child.kill()


def run_ours_uvicorn_child(port: int, max_sessions: int) -> None:
    import uvicorn
    from twinkle_agentic.deployments.env_server import EnvHost, EnvLimits, make_env_app

    host = EnvHost(EchoEnv, EnvLimits(max_concurrent_envs=max_sessions))
    uvicorn.run(make_env_app(host), host="127.0.0.1", port=port, log_level="warning")


def start_serve_env(cpus: int, max_sessions: int) -> str:
    import ray
    from ray import serve
    from twinkle_agentic.deployments.env_server import env_server_app

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 1024 * 1024)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = env_server_app(EchoEnv, user_config={"max_concurrent_envs": max_sessions},
                         ray_actor_options={"num_cpus": cpus / 2})
    serve.run(app, name="bench_env", route_prefix="/env")
    url = f"http://127.0.0.1:{port}/env"
    wait_healthy(url)
    return url


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.sessions = [int(n) for n in str(args.sessions).split(",")]
    cap = max(args.sessions)
    if args.ours_uvicorn_port is not None:
        run_ours_uvicorn_child(args.ours_uvicorn_port, cap)
        return 0
    ours_action = {"tool_name": "echo", "arguments": {"message": MESSAGE}}
    children: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            env_dir = scaffold_openenv(Path(tmp), cap)
            openenv_port, ours_port = free_port(), free_port()
            children.append(serve_child(
                [sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(openenv_port),
                 "--log-level", "warning"],
                env_dir, f"http://127.0.0.1:{openenv_port}", Path(tmp) / "openenv.log",
            ))
            children.append(serve_child(
                [sys.executable, __file__, "--ours-uvicorn-port", str(ours_port), "--sessions", str(cap)],
                ROOT, f"http://127.0.0.1:{ours_port}", Path(tmp) / "ours.log",
            ))
            serve_url = start_serve_env(args.cpus, cap)
            variants = {
                "openenv": env_driver(f"http://127.0.0.1:{openenv_port}", {"message": MESSAGE}, args.seconds, args.warmup),
                "ours-uvicorn": env_driver(f"http://127.0.0.1:{ours_port}", ours_action, args.seconds, args.warmup),
                "ours-serve": env_driver(serve_url, ours_action, args.seconds, args.warmup),
            }
            results = measure_rounds(variants, args.sessions, args.rounds, args.seconds)
        finally:
            stop_serve()
            for child in children:
                stop(child)
    print_table(
        f"env server, echo env over the OpenEnv WebSocket protocol, {args.rounds} interleaved rounds of {args.seconds:g} s",
        "steps", "sessions", results, base="openenv",
    )
    if args.json_out:
        append_record(args.json_out, "env_server", args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
