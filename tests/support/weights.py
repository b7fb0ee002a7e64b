"""Weights for the weight-update tests: a perturbed copy of a checkpoint, and the logprobs an
independent transformers float32 forward gives, to compare an engine's against."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

FLOAT32_LOGPROB_TOLERANCE = 1e-4  # float32 engine and float32 forward: only summation order differs


def perturbed_copy(model_dir: str | Path, directory: Path) -> Path:
    """``model_dir`` copied to ``directory`` with seeded noise on every matrix: same names and shapes, new weights."""
    import torch
    from safetensors.torch import load_file, save_file

    for path in Path(model_dir).iterdir():
        if path.suffix != ".safetensors":
            shutil.copy(path, directory / path.name)
    gen = torch.Generator().manual_seed(0)
    noisy = {
        name: t + 0.3 * t.std() * torch.randn(t.shape, generator=gen, dtype=t.dtype) if t.dim() == 2 else t.clone()
        for name, t in load_file(f"{model_dir}/model.safetensors").items()
    }
    save_file(noisy, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


@functools.lru_cache(maxsize=4)
def _model(model_dir: str):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def reference_logprobs(model_dir: str | Path, ids: list[int], start: int = 1) -> list[float]:
    """Logprob of each token of ``ids`` from position ``start`` on, by a float32 forward of ``model_dir``."""
    import torch

    with torch.no_grad():
        logits = _model(str(model_dir))(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
    return lp[start - 1 :].tolist()


RESTORE_PROBE = list(range(100, 140))  # token ids; shorter than a KV block, so never a prefix-cache hit
RESTORE_PROBE_TOKENS = 8


def probe_logprobs(sampler) -> tuple[list[int], list[float]]:
    """The greedy continuation of ``RESTORE_PROBE`` (EOS ignored) and its logprobs."""
    from twinkle_agentic.data_format import SamplingParams

    params = SamplingParams(
        max_tokens=RESTORE_PROBE_TOKENS, temperature=0.0, logprobs=0, extra={"ignore_eos": True}
    )
    (response,) = sampler.sample([RESTORE_PROBE], params)
    seq = response.sequences[0]
    return list(seq.tokens), list(seq.logprobs)


def restored(sampler, model_dir: str):
    """Yield a session engine to a test that changes its weights; afterwards load ``model_dir`` back
    and check the engine serves it (the probe's logprobs equal a float32 forward of ``model_dir``),
    so the tests after it see the original model."""
    yield sampler
    sampler.update_weights(model_dir)
    tokens, logprobs = probe_logprobs(sampler)
    expected = reference_logprobs(model_dir, RESTORE_PROBE + tokens, len(RESTORE_PROBE))
    worst = max(abs(a - b) for a, b in zip(logprobs, expected, strict=True))
    assert worst <= FLOAT32_LOGPROB_TOLERANCE, f"the engine does not serve {model_dir} after the restore: {worst}"
