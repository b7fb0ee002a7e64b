"""``APIMultiTurnRollout.remote(...)`` on a local Ray cluster: the client, manager and tools are
pickled into the actor, which reaches the HTTP server itself."""

from __future__ import annotations

import pytest

from twinkle_agentic.protocol import OpenAI
from twinkle_agentic.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle_agentic.tools import Tool, ToolManager

pytestmark = pytest.mark.integration


def test_rollout_as_a_ray_actor(ray_local, chat_server):
    class Lookup(Tool):  # defined here so cloudpickle ships it by value to the actor
        def __call__(self, tool_name, arguments):
            return f"found {arguments.get('key')}"

        def tool_info(self):
            return {"type": "function", "function": {
                "name": "lookup", "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}

    api = OpenAI("scripted", base_url=chat_server.url + "/v1")
    actor = APIMultiTurnRollout.remote(api=api, tool_manager=ToolManager([Lookup()]), max_turns=4)
    trajectories = [{"messages": [{"role": "user", "content": f"remote {i} #calls=1"}]} for i in range(3)]
    results = ray_local.get(actor.__call__.remote(trajectories, global_step=1), timeout=120)
    assert [(r["stop_reason"], r["turns"]) for r in results] == [("stop", 2)] * 3
    assert results[0]["messages"][2]["content"] == "found key 1"
    ray_local.kill(actor)
