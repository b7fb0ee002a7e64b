"""APIMultiTurnRollout throughput against a local OpenAI-compatible server with injected latency.

N trajectories x T turns (T-1 tool-calling turns, then a final answer) against the scripted
server (twinkle_agentic/testing/scripted_server.py, its own process, ``--latency-ms`` per
completion). The ideal wall time at concurrency C is ``N * T * latency / C``; efficiency is
ideal / measured. Compared in one run: the asyncio rollout at each ``--concurrency`` for each
``--transport`` (the SDK's AsyncOpenAI, or the lean ``direct`` HTTP/1.1 path), and a plain
thread-per-trajectory pool (``--thread-pool`` workers, blocking SDK client) as the baseline.
Client CPU per request is reported too: it is what bounds high concurrency on few cores; and how
long the server really held its answers (``held``: median, and answers sent before the latency was
up). Outputs are kept until the clock stops: freeing a batch is not rollout work.

Each asyncio rollout first runs one batch of max(concurrency, 64) trajectories on its kept event
loop, so the measured batches find warm keep-alive connections, as every batch after the first
does in a rollout farm. ``--tool-concurrency 0`` also measures tools run on the event loop. Each mode is
measured over ``--batches`` batches in a row; the table shows the median batch and the range of
efficiencies (one batch of 0.6 s at c=256 swings by +-1.5 points on this 2-vCPU machine).

Run: python bench/api_rollout.py [--trajectories 1000] [--turns 3] [--latency-ms 50]
         [--concurrency 8 64 256] [--transport auto direct] [--tool-concurrency default 0]
         [--thread-pool 8] [--batches 5] [--server-event-loop precise|auto|uvloop|asyncio] [--record FILE]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.records import emit_record, git_sha  # noqa: E402
from twinkle_agentic.net import free_port  # noqa: E402
from twinkle_agentic.protocol import OpenAI  # noqa: E402
from twinkle_agentic.protocol.event_loops import EVENT_LOOPS  # noqa: E402
from twinkle_agentic.rollout.api_multi_turn import APIMultiTurnRollout  # noqa: E402
from twinkle_agentic.rollout.base import tool_message, with_call_ids  # noqa: E402
from twinkle_agentic.testing.scripted_server import start_scripted_server  # noqa: E402
from twinkle_agentic.tools import Tool, ToolManager  # noqa: E402


class Lookup(Tool):
    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        return f"found {arguments.get('key')}"

    def tool_info(self) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": "lookup", "description": "Look a key up.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def trajectories(n: int, turns: int, tag: str) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"{tag} {i} #calls={turns - 1}"}]} for i in range(n)]


def thread_per_trajectory(api: OpenAI, manager: ToolManager, batch: list[dict[str, Any]], workers: int,
                          max_turns: int) -> list[dict[str, Any]]:
    """The seed's design: one blocking trajectory loop per pool thread."""

    def one(trajectory: dict[str, Any]) -> dict[str, Any]:
        messages = list(trajectory["messages"])
        request = {"messages": messages, "tools": manager.tool_infos()}
        for turn in range(1, max_turns + 1):
            reply = dict(api(request))
            calls = with_call_ids(reply.get("tool_calls"), turn)
            messages.append(reply)
            if not calls:
                return {"messages": messages, "stop_reason": "stop"}
            for index, call in enumerate(calls):
                messages.append(tool_message(call, manager(call), turn, index))
        return {"messages": messages, "stop_reason": "max_turns"}

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, batch))


def server_timing(server: Any) -> dict[str, Any]:
    with urllib.request.urlopen(server.url + "/debug/timing") as response:
        return json.loads(response.read())


def measure(label: str, run: Any, n: int, turns: int, latency_s: float, concurrency: int, server: Any) -> dict[str, Any]:
    """Time ``run()``; its outputs are kept until the clock stops (freeing them is not rollout work)."""
    server_timing(server)  # clear the server's record
    server_pid = server.process.pid
    server_cpu, client_cpu, started = process_cpu_s(server_pid), time.process_time(), time.perf_counter()
    outputs = run()
    wall = time.perf_counter() - started
    client_cpu, server_cpu = time.process_time() - client_cpu, process_cpu_s(server_pid) - server_cpu
    outcomes = [o["stop_reason"] for o in outputs]
    del outputs
    requests = n * turns
    ideal = requests * latency_s / concurrency
    return {
        "mode": label, "concurrency": concurrency, "wall_s": round(wall, 3), "ideal_s": round(ideal, 3),
        "efficiency": round(ideal / wall, 3), "requests_per_s": round(requests / wall, 1),
        "client_cpu_ms_per_request": round(1000 * client_cpu / requests, 3),
        "server_cpu_ms_per_request": round(1000 * server_cpu / requests, 3),
        "outcomes": dict(Counter(outcomes)),
        "server_held": server_timing(server),
    }


def measure_batches(label: str, make_run: Any, batches: int, n: int, turns: int, latency_s: float, concurrency: int,
                    server: Any) -> dict[str, Any]:
    """``batches`` measurements of ``make_run(index)()``: the median batch's figures, with every
    batch's efficiency and their range."""
    results = [measure(label, make_run(i), n, turns, latency_s, concurrency, server) for i in range(batches)]
    efficiencies = [r["efficiency"] for r in results]
    median = sorted(results, key=lambda r: r["efficiency"])[len(results) // 2]
    return {**median, "batches": len(results), "efficiency_batches": efficiencies,
            "efficiency_min": min(efficiencies), "efficiency_max": max(efficiencies)}


def _tool_concurrency(text: str) -> int | None:
    return None if text == "default" else int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--transport", nargs="+", default=["auto", "direct"], choices=["auto", "aiohttp", "httpx", "direct"])
    parser.add_argument("--tool-concurrency", type=_tool_concurrency, nargs="+", default=[None],
                        help="APIMultiTurnRollout(tool_concurrency=...): 'default' (a thread pool), or 0 for tools "
                             "run on the event loop")
    parser.add_argument("--thread-pool", type=int, default=8, help="baseline workers (0 to skip)")
    parser.add_argument("--batches", type=int, default=5, help="measured batches per mode (the median is shown)")
    parser.add_argument("--server-event-loop", choices=EVENT_LOOPS,
                        help="the scripted server's loop (default: its own, 'precise' when latency is injected)")
    parser.add_argument("--record", type=Path, help="append the JSON record to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    load_before = os.getloadavg()[0]
    latency_s = args.latency_ms / 1000.0
    server = start_scripted_server(free_port(), args.latency_ms, event_loop=args.server_event_loop)
    results = []
    try:
        base_url = server.url + "/v1"
        manager = ToolManager([Lookup()])
        for transport in args.transport:
            api = OpenAI("scripted", base_url=base_url, async_transport=transport)
            for tool_concurrency in args.tool_concurrency:
                for concurrency in args.concurrency:
                    rollout = APIMultiTurnRollout(api, manager, max_turns=args.turns + 1, concurrency=concurrency,
                                                  tool_concurrency=tool_concurrency)
                    # a previous batch on the rollout's kept loop: connections are warm, as in a farm's steady state
                    rollout(trajectories(max(concurrency, 64), args.turns, f"warm-{transport}-{concurrency}"))

                    def make_run(index, rollout=rollout, tag=f"run-{transport}-{concurrency}"):
                        batch = trajectories(args.trajectories, args.turns, f"{tag}-{index}")
                        return lambda: rollout(batch)

                    label = f"asyncio/{transport}" + ("" if tool_concurrency is None else f"/tools={tool_concurrency}")
                    results.append(measure_batches(label, make_run, args.batches, args.trajectories, args.turns,
                                                   latency_s, concurrency, server))
                    rollout.close()
                    print(json.dumps(results[-1]), flush=True)
        if args.thread_pool:
            api = OpenAI("scripted", base_url=base_url)
            thread_per_trajectory(api, manager, trajectories(16, args.turns, "warm-threads"), args.thread_pool, args.turns + 1)

            def make_threads_run(index):
                batch = trajectories(args.trajectories, args.turns, f"run-threads-{index}")
                return lambda: thread_per_trajectory(api, manager, batch, args.thread_pool, args.turns + 1)

            results.append(measure_batches("thread-pool", make_threads_run, args.batches, args.trajectories,
                                           args.turns, latency_s, args.thread_pool, server))
            print(json.dumps(results[-1]), flush=True)
    finally:
        server.stop()
    header = (f"{'mode':<26}{'conc':>6}{'wall s':>9}{'ideal s':>9}{'eff':>7}{'eff range':>12}{'req/s':>9}"
              f"{'cli ms/req':>12}{'srv ms/req':>12}{'held p50 ms':>13}{'early':>7}")
    print("\n" + header)
    for r in results:
        held = r["server_held"]
        spread = f"{r['efficiency_min']:.3f}-{r['efficiency_max']:.3f}"
        print(f"{r['mode']:<26}{r['concurrency']:>6}{r['wall_s']:>9.2f}{r['ideal_s']:>9.2f}{r['efficiency']:>7.3f}"
              f"{spread:>12}{r['requests_per_s']:>9.0f}{r['client_cpu_ms_per_request']:>12.3f}{r['server_cpu_ms_per_request']:>12.3f}"
              f"{held.get('p50_ms', float('nan')):>13.2f}{held.get('early', 0):>7}")
    record = {"bench": "api_rollout", "git_sha": git_sha(), "cpus": os.cpu_count(),
              "load_avg_1m_before": load_before, "load_avg_1m": os.getloadavg()[0], "params": {k: str(v) for k, v in vars(args).items()},
              "results": results}
    emit_record(record, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
