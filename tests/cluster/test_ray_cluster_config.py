"""ray_cluster.yaml passes Ray's own cluster-config validation and encodes the intended node types."""


import pytest
import yaml

from tests.support.paths import REPO_ROOT

CONFIG = REPO_ROOT / "ray_cluster.yaml"


@pytest.fixture(scope="module")
def config():
    return yaml.safe_load(CONFIG.read_text())


def test_validates_with_rays_schema(config):
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(config)
    validate_config(prepared)  # raises jsonschema.ValidationError / ValueError on a bad config
    assert set(prepared["available_node_types"]) == {"head", "cpu_worker", "gpu_worker"}


def test_rays_validation_rejects_a_broken_copy(config):
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    broken = {**config, "available_node_types": {**config["available_node_types"]}}
    gpu = dict(broken["available_node_types"]["gpu_worker"])
    gpu["min_worker"] = gpu.pop("min_workers")  # a typo must not pass silently
    broken["available_node_types"]["gpu_worker"] = gpu
    with pytest.raises(jsonschema.ValidationError, match="min_worker"):
        validate_config(prepare_config(broken))


def test_node_types_and_bounds(config):
    types = config["available_node_types"]
    assert config["head_node_type"] == "head" and types["head"]["resources"]["CPU"] == 0
    assert types["gpu_worker"]["resources"]["GPU"] >= 1
    assert "GPU" not in types["cpu_worker"]["resources"]
    for name in ("cpu_worker", "gpu_worker"):
        assert 0 <= types[name]["min_workers"] <= types[name]["max_workers"] <= config["max_workers"]


def test_nodes_install_the_project_and_share_auth(config):
    setup = " ".join(config["setup_commands"])
    assert "pip install" in setup and "twinkle-agentic[" in setup
    assert "twinkle-agentic[gpu]" in " ".join(config["available_node_types"]["gpu_worker"]["worker_setup_commands"])
    assert config["file_mounts"]["~/twinkle-agentic"] == "."
    assert "~/.ray/auth_token" in config["file_mounts"]
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert any("RAY_AUTH_MODE=token" in c for c in config[key])
