"""The GRPO policy loss on rolled-out trajectories, in torch (no Ray, no vLLM).

A trajectory's trainable tokens are those whose label is not -100; ``logprobs`` holds the engine's
logprob of each of them, in order. ``TokenBatch.of`` lays a batch out as padded tensors where
position ``t`` of every row is token ``t``: ``rollout_logprobs[b, t]`` is the engine's logprob of
token ``t`` and ``policy_logprobs`` computes the trainer's for the same tokens (predicted from
position ``t - 1``), so the two line up without index bookkeeping at the call site.

The loss is the clipped surrogate of PPO with a group-relative advantage per trajectory, averaged
over all trainable tokens of the batch (a long trajectory weighs by its tokens, as in DAPO/Dr. GRPO):

    ratio  = exp(logp_theta - logp_ref)        logp_ref: the rollout's logprobs, or with TIS the
                                               trainer's own logprobs before the step
    loss_t = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) * w_t

``w_t`` is 1, or with truncated importance sampling (``tis_cap``) ``min(exp(logp_trainer_old -
logp_engine), tis_cap)``: it corrects for the engine sampling from a slightly different distribution
than the trainer computes (kernels, dtypes), without letting one token's weight explode.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twinkle_agentic.errors import ConfigError

IGNORE_INDEX = -100


class GRPOConfigError(ConfigError):
    """A GRPO loss setting is invalid; the message names it."""


@dataclass(frozen=True)
class GRPOLossConfig:
    """``clip_low`` / ``clip_high``: the ratio's trust region ``[1 - clip_low, 1 + clip_high]``;
    ``tis_cap``: None, or the cap of the truncated importance weight (e.g. 2.0)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    tis_cap: float | None = None

    def __post_init__(self) -> None:
        for name in ("clip_low", "clip_high"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 < value < 1:
                raise GRPOConfigError(f"{name} must be in (0, 1), got {value!r}")
        if self.tis_cap is not None and (not isinstance(self.tis_cap, int | float) or self.tis_cap < 1):
            raise GRPOConfigError(f"tis_cap must be None or a number >= 1, got {self.tis_cap!r}")


@dataclass
class TokenBatch:
    """Padded tensors of a batch of trajectories: ``input_ids``, ``attention_mask``, ``mask`` (the
    trainable tokens), ``rollout_logprobs`` (0 where not trainable) and ``advantages`` (one per row)."""

    input_ids: Any
    attention_mask: Any
    mask: Any
    rollout_logprobs: Any
    advantages: Any

    @classmethod
    def of(cls, trajectories: Sequence[Mapping[str, Any]], advantages: Sequence[float], pad_id: int = 0) -> TokenBatch:
        import torch

        if len(trajectories) != len(advantages):
            raise ValueError(f"{len(advantages)} advantages for {len(trajectories)} trajectories")
        width = max(len(t["input_ids"]) for t in trajectories)
        shape = (len(trajectories), width)
        ids = torch.full(shape, pad_id, dtype=torch.long)
        attention = torch.zeros(shape, dtype=torch.long)
        mask = torch.zeros(shape, dtype=torch.bool)
        rollout = torch.zeros(shape, dtype=torch.float32)
        for row, trajectory in enumerate(trajectories):
            tokens, labels, logprobs = trajectory["input_ids"], trajectory["labels"], trajectory.get("logprobs")
            trainable = [t for t, label in enumerate(labels) if label != IGNORE_INDEX]
            if logprobs is None or len(logprobs) != len(trainable):
                raise ValueError(
                    f"trajectory {trajectory.get('trajectory_id')!r} has {0 if logprobs is None else len(logprobs)} "
                    f"logprobs for {len(trainable)} trainable tokens; GRPO needs the rollout's logprobs"
                )
            if trainable and trainable[0] == 0:
                raise ValueError("the first token cannot be trainable: nothing precedes it to predict it from")
            ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            attention[row, : len(tokens)] = 1
            mask[row, trainable] = True
            rollout[row, trainable] = torch.tensor(logprobs, dtype=torch.float32)
        return cls(ids, attention, mask, rollout, torch.tensor(list(advantages), dtype=torch.float32))

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


def policy_logprobs(model: Any, batch: TokenBatch) -> Any:
    """The model's logprob of every token given the tokens before it, ``[rows, width]`` (0 at position 0)."""
    import torch

    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(logp, (1, 0))


def grpo_loss(logp: Any, batch: TokenBatch, config: GRPOLossConfig, old_logp: Any = None) -> tuple[Any, dict[str, float]]:
    """The loss (a scalar to ``backward``) and its figures: ``clip_fraction`` (tokens whose ratio was
    clipped against them), ``ratio_mean``, and with TIS ``tis_weight_mean``.

    ``old_logp``: the trainer's logprobs before the step (no grad), needed with ``tis_cap``."""
    import torch

    mask = batch.mask
    if not bool(mask.any()):
        raise ValueError("the batch has no trainable token")
    advantages = batch.advantages.unsqueeze(-1)
    weight = torch.ones_like(logp)
    reference = batch.rollout_logprobs
    if config.tis_cap is not None:
        if old_logp is None:
            raise ValueError("tis_cap needs old_logp, the trainer's logprobs before the step")
        reference = old_logp.detach()
        weight = torch.exp(reference - batch.rollout_logprobs).clamp(max=config.tis_cap)
    ratio = torch.exp(logp - reference)
    clipped = ratio.clamp(1 - config.clip_low, 1 + config.clip_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    loss = -(surrogate * weight)[mask].sum() / mask.sum()
    was_clipped = (ratio * advantages > clipped * advantages)[mask]
    stats = {
        "clip_fraction": float(was_clipped.float().mean()),
        "ratio_mean": float(ratio.detach()[mask].mean()),
    }
    if config.tis_cap is not None:
        stats["tis_weight_mean"] = float(weight[mask].mean())
    return loss, stats


def mismatch(engine_logp: Any, trainer_logp: Any, mask: Any) -> dict[str, float]:
    """Per trainable token, |engine logprob - trainer logprob|: its mean and 99th percentile
    (nearest rank). Measured under the weights that generated the tokens, it is the engine/trainer
    numerical mismatch that TIS corrects for."""
    diff = (engine_logp - trainer_logp.detach())[mask].abs().sort().values
    if not len(diff):
        return {"mismatch_mean_abs": math.nan, "mismatch_p99_abs": math.nan}
    rank = max(1, math.ceil(0.99 * len(diff)))
    return {"mismatch_mean_abs": float(diff.mean()), "mismatch_p99_abs": float(diff[rank - 1])}


__all__ = ["GRPOLossConfig", "GRPOConfigError", "TokenBatch", "grpo_loss", "mismatch", "policy_logprobs"]
