"""KeptLoop: one event loop kept between blocking calls, closable from anywhere."""

from __future__ import annotations

import asyncio

import pytest

from twinkle_agentic.protocol.event_loops import KeptLoop


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
