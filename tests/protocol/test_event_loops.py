"""KeptLoop: one event loop kept between blocking calls, closable from anywhere; the 'precise'
loop that the latency-injecting scripted server runs on."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from twinkle_agentic.net import free_port
from twinkle_agentic.protocol import OpenAI
from twinkle_agentic.protocol.event_loops import KeptLoop
from twinkle_agentic.testing.scripted_server import start_scripted_server


async def loop_id() -> int:
    await asyncio.sleep(0)
    return id(asyncio.get_running_loop())


def test_calls_share_one_loop_and_close_is_idempotent():
    kept = KeptLoop("asyncio")
    assert kept.run(loop_id()) == kept.run(loop_id())
    kept.close()
    kept.close()
    with pytest.raises(RuntimeError, match="closed"):
        kept.run(loop_id())


@pytest.mark.parametrize("event_loop", ["asyncio", "auto"])
def test_close_inside_a_running_loop(event_loop):
    """As when the garbage collector finalizes a rollout while async code runs in this thread."""
    kept = KeptLoop(event_loop)
    kept.run(loop_id())

    async def close_here() -> None:
        kept.close()

    asyncio.run(close_here())
    with pytest.raises(RuntimeError, match="closed"):
        kept.run(loop_id())


def test_latency_server_answers_on_time_never_early():
    """With injected latency the scripted server runs the 'precise' loop (select(): microsecond
    timeouts); /debug/timing reports how long answers were held, and none may come early."""
    server = start_scripted_server(free_port(), latency_ms=20)
    try:
        api = OpenAI("scripted", base_url=server.url + "/v1", async_transport="direct")

        async def burst():
            return await asyncio.gather(*(api.acall({"messages": [{"role": "user", "content": f"q{i}"}]})
                                          for i in range(20)))

        assert all(reply["content"].startswith("final answer") for reply in asyncio.run(burst()))
        with urllib.request.urlopen(server.url + "/debug/timing") as response:
            timing = json.loads(response.read())
        with urllib.request.urlopen(server.url + "/debug/timing") as response:
            cleared = json.loads(response.read())
    finally:
        server.stop()
    assert timing["answers"] == 20 and timing["early"] == 0 and timing["min_ms"] >= 20.0
    assert timing["p50_ms"] < 40.0 and cleared == {"answers": 0}


def test_precise_loop_runs_coroutines():
    kept = KeptLoop("precise")
    assert kept.run(loop_id()) == kept.run(loop_id())
    kept.close()


def test_a_kept_loop_is_closed_by_the_reaper_once_its_owner_is_collected():
    """The finalizer only queues the loop: it may run inside threading's own locks (a collection
    during a thread start), where closing the loop (which joins threads) would deadlock."""
    import gc
    import time

    from twinkle_agentic.protocol.event_loops import close_when_collected

    class Owner:
        pass

    owner, kept = Owner(), KeptLoop("asyncio")

    async def answer() -> int:
        return 42

    assert kept.run(answer()) == 42
    close_when_collected(owner, kept)
    del owner
    gc.collect()
    deadline = time.monotonic() + 5
    while not kept._closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kept._closed
