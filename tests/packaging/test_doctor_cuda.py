"""``twinkle-agentic doctor``'s CUDA and vLLM-build report: on this CPU-only machine it says there is no
GPU and that vLLM is the CPU build; with GPUs (a torch stand-in) it lists them with their memory."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from twinkle_agentic.doctor import GPU, NoGPU, cuda_report, parse_nvidia_smi

SMI = "NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n"


def fake_torch(cuda: str | None, gpus: list[tuple[str, int]]):
    props = [SimpleNamespace(name=name, total_memory=mib * 2**20) for name, mib in gpus]
    return SimpleNamespace(
        __version__="2.9.0+cu128" if cuda else "2.9.0+cpu",
        version=SimpleNamespace(cuda=cuda),
        cuda=SimpleNamespace(
            is_available=lambda: bool(cuda and gpus),
            device_count=lambda: len(gpus),
            get_device_properties=lambda i: props[i],
        ),
    )


def test_a_cuda_torch_lists_its_gpus_with_memory():
    torch = fake_torch("12.8", [("NVIDIA H100 80GB HBM3", 81559), ("NVIDIA H100 80GB HBM3", 81559)])
    report = cuda_report(torch, None)
    assert report == (
        "torch 2.9.0+cu128 built with CUDA 12.8; 2 GPU(s): NVIDIA H100 80GB HBM3 (80 GiB), NVIDIA H100 80GB HBM3 (80 GiB)"
    )


def test_gpus_that_torch_cannot_use_are_named_with_the_fix():
    gpus = parse_nvidia_smi(SMI)
    assert gpus == [GPU("NVIDIA H100 80GB HBM3", 81559)] * 2
    with pytest.raises(NoGPU, match=r"built without CUDA, so torch cannot use the 2 GPU\(s\) nvidia-smi lists .*gpu\]"):
        cuda_report(fake_torch(None, []), gpus)
    with pytest.raises(NoGPU, match="nvidia-smi lists none"):
        cuda_report(fake_torch("12.8", []), [])
    assert parse_nvidia_smi("No devices were found\n") == []
