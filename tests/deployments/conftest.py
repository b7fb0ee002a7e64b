"""Fixtures for the Serve tests: Serve on 127.0.0.1 and a free port, shut down per module."""

from __future__ import annotations

import pytest

from tests.support import deployment_samples
from twinkle_agentic.net import free_port


@pytest.fixture(scope="module")
def serve_http(ray_local):
    """Start Serve for one test module; yields ``http://127.0.0.1:<port>``; shuts Serve down after."""
    from ray import cloudpickle, serve  # Ray pickles with its vendored cloudpickle

    # Replicas unpickle the sample tools/envs by value: they need no import path to tests/.
    cloudpickle.register_pickle_by_value(deployment_samples)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        cloudpickle.unregister_pickle_by_value(deployment_samples)
