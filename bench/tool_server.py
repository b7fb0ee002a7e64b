"""Tool server: calls/s and p50/p99 latency on loopback, Serve with 1 and 2 replicas vs plain uvicorn.

All variants serve the demo tools (``twinkle_agentic.demo.tools:demo_tools``) and are driven by the
same client: ``--concurrency`` threads calling ``RemoteTool('calculator')`` (the real client path:
one shared httpx client, JSON over HTTP/1.1 keep-alive) for ``--seconds`` after a warm-up.

* uvicorn: the same FastAPI app (``make_tool_app``) in one uvicorn process, no Serve: the floor;
* serve-1 / serve-2: ``ToolServer`` on a local Ray Serve with 1 or 2 replicas behind the proxy.

The load generator shares the machine's cores with the servers, so compare within one run.
Variants run side by side and are measured in interleaved rounds (median of rounds reported).
Run: python bench/tool_server.py [--seconds 3] [--rounds 3] [--concurrency 1,8] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from twinkle_agentic.net import free_port  # noqa: E402

TOOLS = ["twinkle_agentic.demo.tools:demo_tools"]
CALL = ("calculator", {"expression": "6*7"})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="measured seconds per variant and round")
    p.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each measurement")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per load level")
    p.add_argument("--concurrency", default="1,8", help="client thread counts, comma-separated")
    p.add_argument("--cpus", type=int, default=2, help="logical CPUs of the local Ray cluster")
    p.add_argument("--json-out", default=None, help="append the JSON record to this file")
    p.add_argument("--uvicorn-port", type=int, default=None, help=argparse.SUPPRESS)  # internal: child mode
    return p


def wait_healthy(url: str, timeout_s: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not become healthy within {timeout_s}s")


def measure_rounds(
    variants: dict[str, Callable[[int], tuple[list[float], int]]], levels: list[int], rounds: int, seconds: float
) -> dict[str, dict[int, dict[str, Any]]]:
    """Run every variant at every load level ``rounds`` times, interleaved (the order rotates each round).

    On a shared, noisy machine interleaving spreads load bursts over all variants; each figure is the
    median of the rounds' rates (with min and max), latency percentiles are over all rounds' samples.
    """
    names = list(variants)
    rates: dict[str, dict[int, list[float]]] = {n: {lv: [] for lv in levels} for n in names}
    samples: dict[str, dict[int, list[float]]] = {n: {lv: [] for lv in levels} for n in names}
    errors: dict[str, dict[int, int]] = {n: dict.fromkeys(levels, 0) for n in names}
    for level in levels:
        for r in range(rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                latencies, failed = variants[name](level)
                rates[name][level].append(len(latencies) / seconds)
                samples[name][level].extend(latencies)
                errors[name][level] += failed
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for name in names:
        out[name] = {}
        for level in levels:
            q = statistics.quantiles(sorted(samples[name][level]), n=100)
            out[name][level] = {
                "per_s": statistics.median(rates[name][level]),
                "per_s_min": min(rates[name][level]),
                "per_s_max": max(rates[name][level]),
                "count": len(samples[name][level]),
                "errors": errors[name][level],
                "p50_ms": q[49] * 1000,
                "p99_ms": q[98] * 1000,
            }
    return out


def print_table(title: str, unit: str, level_name: str, results: dict[str, dict[int, dict[str, Any]]], base: str) -> None:
    print(title)
    print(f"{'variant':<13} {level_name:>8} {unit + '/s (median)':>16} {'min-max':>13} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'errors':>6} {'vs ' + base:>12}")
    for name, by_level in results.items():
        for level, r in by_level.items():
            ratio = r["per_s"] / results[base][level]["per_s"]
            spread = f"{r['per_s_min']:.0f}-{r['per_s_max']:.0f}"
            print(f"{name:<13} {level:>8} {r['per_s']:>16.0f} {spread:>13} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                  f"{r['errors']:>6} {ratio:>11.2f}x")


def append_record(path: str, bench: str, args: argparse.Namespace, results: Any) -> None:
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    params = {k: v for k, v in vars(args).items() if not k.endswith("_port")}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"bench": bench, "params": params, "git_sha": sha, "results": results}) + "\n")


def tool_driver(url: str, seconds: float, warmup: float) -> Callable[[int], tuple[list[float], int]]:
    """A variant for ``measure_rounds``: ``concurrency`` threads calling RemoteTool at ``url``."""
    from twinkle_agentic.tools.remote import RemoteTool

    tool = {t.name: t for t in RemoteTool.from_server(url, timeout_s=30)}[CALL[0]]

    def worker(window: tuple[float, float]) -> tuple[list[float], int]:
        warm_until, stop_at = window
        latencies, errors = [], 0
        while (now := time.monotonic()) < stop_at:
            started = time.perf_counter()
            answer = tool(*CALL)
            if now >= warm_until:
                latencies.append(time.perf_counter() - started)
                errors += answer != "42"
        return latencies, errors

    def run(concurrency: int) -> tuple[list[float], int]:
        start = time.monotonic()
        window = (start + warmup, start + warmup + seconds)
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(worker, [window] * concurrency))
        return [x for lat, _ in results for x in lat], sum(e for _, e in results)

    return run


def run_uvicorn_child(port: int) -> None:
    import uvicorn
    from twinkle_agentic.deployments.tool_server import ToolHost, build_tools, make_tool_app

    uvicorn.run(make_tool_app(ToolHost(build_tools(TOOLS))), host="127.0.0.1", port=port, log_level="warning")


def start_uvicorn() -> tuple[subprocess.Popen, str]:
    port = free_port()
    child = subprocess.Popen([sys.executable, __file__, "--uvicorn-port", str(port)], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url)
    except TimeoutError:
        child.kill()
        raise
    return child, url


def start_serve_apps(cpus: int, replicas_list: list[int]) -> dict[str, str]:
    """One ToolServer app per replica count, side by side on one local Serve; returns their URLs."""
    import ray
    from ray import serve
    from ray.serve.api import RunTarget
    from twinkle_agentic.deployments.tool_server import tool_server_app

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 1024 * 1024)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    cpu_per_replica = cpus / (2 * sum(replicas_list))
    targets = [
        RunTarget(
            tool_server_app(TOOLS, num_replicas=n, max_ongoing_requests=32, ray_actor_options={"num_cpus": cpu_per_replica}),
            name=f"tools_{n}",
            route_prefix=f"/tools{n}",
        )
        for n in replicas_list
    ]
    serve.run_many(targets)
    urls = {f"serve-{n}": f"http://127.0.0.1:{port}/tools{n}" for n in replicas_list}
    for url in urls.values():
        wait_healthy(url)
    return urls


def stop_serve() -> None:
    import ray
    from ray import serve

    if ray.is_initialized():
        serve.shutdown()
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.uvicorn_port is not None:
        run_uvicorn_child(args.uvicorn_port)
        return 0
    args.concurrency = [int(c) for c in str(args.concurrency).split(",")]
    child, uvicorn_url = start_uvicorn()
    try:
        urls = {"uvicorn": uvicorn_url, **start_serve_apps(args.cpus, [1, 2])}
        variants = {name: tool_driver(url, args.seconds, args.warmup) for name, url in urls.items()}
        results = measure_rounds(variants, args.concurrency, args.rounds, args.seconds)
    finally:
        stop_serve()
        child.terminate()
        child.wait(timeout=30)
    print_table(
        f"tool server, demo calculator via RemoteTool, {args.rounds} interleaved rounds of {args.seconds:g} s",
        "calls", "threads", results, base="serve-1",
    )
    if args.json_out:
        append_record(args.json_out, "tool_server", args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
