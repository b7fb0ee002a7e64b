"""APIMultiTurnRollout against vLLM's OpenAI server (CPU build) serving the project's tiny
tool-calling model with the hermes tool parser: real tool calls, parsed by vLLM, run by our tools.

Skipped until the model is committed (twinkle_agentic/assets/tiny_agent tracked by git) or when
vllm is not installed. Startup is ~20 s on an idle 2-core machine.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter

import pytest

from tests.support.paths import REPO_ROOT
from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.net import free_port
from twinkle_agentic.protocol import OpenAI
from twinkle_agentic.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle_agentic.rollout.base import STOP_REASONS
from twinkle_agentic.testing.local_server import LocalServer
from twinkle_agentic.tools import ToolManager

ROOT = REPO_ROOT
MODEL_DIR = ROOT / "twinkle_agentic" / "assets" / "tiny_agent"
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "TORCH_COMPILE_DISABLE": "1", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "VLLM_USAGE_STATS_ENABLED": "0"}


def model_committed() -> bool:
    weights = MODEL_DIR / "model.safetensors"
    if not weights.is_file():
        return False
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(weights)], cwd=ROOT, capture_output=True)
    return tracked.returncode == 0


pytestmark = [
    pytest.mark.integration,
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed"),
    pytest.mark.skipif(not model_committed(), reason="tiny model not committed yet"),
]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL_DIR),
            "--served-model-name", "tiny_agent", "--host", "127.0.0.1", "--port", str(port),
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--max-model-len", "1024",
            "--dtype", "float32", "--max-num-seqs", "16"]
    server = LocalServer(argv, port, env=VLLM_ENV, startup_timeout_s=300,
                         log_path=tmp_path_factory.mktemp("vllm") / "server.log").start()
    yield server
    server.stop()


def test_tool_calling_rollout_on_vllm(vllm_server):
    from scripts import dialogues
    from twinkle_agentic.demo.tools import demo_tools

    episodes = [e for e in dialogues.heldout_prompts(3) if e.kind in ("weather", "calculator")]
    trajectories = [{"messages": [m for m in e.messages if m["role"] in ("system", "user")][:2], "tools": e.tools}
                    for e in episodes]
    api = OpenAI("tiny_agent", base_url=vllm_server.url + "/v1")
    rollout = APIMultiTurnRollout(api, ToolManager(demo_tools()), sampling_params=SamplingParams(temperature=0.0,
                                  max_tokens=96), max_turns=3, concurrency=8)
    results = rollout(trajectories)
    reasons = Counter(r["stop_reason"] for r in results)
    assert set(reasons) <= STOP_REASONS and "api_error" not in reasons, [r.get("error") for r in results]
    executed = 0
    for result in results:
        messages = result["messages"]
        assert result["turns"] == sum(m["role"] == "assistant" for m in messages) >= 1
        for index, message in enumerate(messages):
            if message["role"] == "assistant" and message.get("tool_calls"):
                assert message["finish_reason"] in ("tool_calls", "stop", "length")
                answered = [m["tool_call_id"] for m in messages[index + 1:] if m["role"] == "tool"]
                if result["stop_reason"] != "max_turns" or index < len(messages) - 1:
                    executed += 1
                    assert all(call["id"] in answered for call in message["tool_calls"])
    assert executed >= 1  # vLLM's hermes parser produced structured calls that our tools ran
