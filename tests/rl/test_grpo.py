"""The GRPO loss on hand-built batches: token alignment, the clipped surrogate, TIS, the mismatch figures."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from twinkle_agentic.rl import (  # noqa: E402
    GRPOConfigError,
    GRPOLossConfig,
    TokenBatch,
    grpo_loss,
    mismatch,
    policy_logprobs,
)


def trajectory(ids, labels, logprobs):
    return {"trajectory_id": "t", "input_ids": ids, "labels": labels, "logprobs": logprobs}


def test_token_batch_puts_each_rollout_logprob_at_its_token():
    batch = TokenBatch.of(
        [trajectory([5, 6, 7, 8], [-100, -100, 7, 8], [-0.5, -0.25]), trajectory([5, 9], [-100, 9], [-1.0])],
        [1.0, -1.0],
        pad_id=0,
    )
    assert batch.input_ids.tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch.mask.tolist() == [[False, False, True, True], [False, True, False, False]]
    assert batch.rollout_logprobs.tolist() == [[0, 0, -0.5, -0.25], [0, -1.0, 0, 0]]
    assert batch.tokens == 3


def test_token_batch_refuses_missing_logprobs():
    with pytest.raises(ValueError, match="1 logprobs for 2 trainable tokens"):
        TokenBatch.of([trajectory([1, 2, 3], [-100, 2, 3], [-0.1])], [0.0])


class Bigram(torch.nn.Module):
    """logits at position t depend on token t only: easy to compute by hand."""

    def __init__(self, vocab=10):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0)))

    def forward(self, input_ids, attention_mask=None):
        return type("Out", (), {"logits": self.table[input_ids]})()


def test_policy_logprobs_predict_token_t_from_position_t_minus_1():
    model = Bigram()
    batch = TokenBatch.of([trajectory([1, 2, 3], [-100, 2, 3], [-0.1, -0.2])], [1.0])
    logp = policy_logprobs(model, batch)
    table = torch.log_softmax(model.table, dim=-1)
    assert logp[0, 0] == 0
    assert logp[0, 1].item() == pytest.approx(table[1, 2].item())
    assert logp[0, 2].item() == pytest.approx(table[2, 3].item())


def test_on_policy_loss_is_minus_the_mean_advantage_and_clipping_bites_only_past_the_region():
    batch = TokenBatch.of([trajectory([1, 2, 3], [-100, 2, 3], [-1.0, -1.0]), trajectory([1, 4], [-100, 4], [-2.0])], [2.0, -1.0])
    config = GRPOLossConfig(clip_low=0.2, clip_high=0.2)
    on_policy = batch.rollout_logprobs.clone().requires_grad_(True)
    loss, stats = grpo_loss(on_policy, batch, config)
    assert loss.item() == pytest.approx(-(2.0 + 2.0 - 1.0) / 3)  # ratio 1: -mean(A) over tokens
    assert stats["clip_fraction"] == 0 and stats["ratio_mean"] == pytest.approx(1.0)
    loss.backward()
    assert on_policy.grad[0, 1].item() == pytest.approx(-2.0 / 3) and on_policy.grad[1, 1].item() == pytest.approx(1.0 / 3)

    # a positive-advantage token whose ratio is past 1 + clip_high: clipped, no gradient through it
    pushed = batch.rollout_logprobs.clone()
    pushed[0, 1] += math.log(1.5)
    pushed.requires_grad_(True)
    loss, stats = grpo_loss(pushed, batch, config)
    assert loss.item() == pytest.approx(-(2.0 * 1.2 + 2.0 - 1.0) / 3)
    assert stats["clip_fraction"] == pytest.approx(1 / 3)
    loss.backward()
    assert pushed.grad[0, 1].item() == 0.0


def test_truncated_importance_sampling_weights_tokens_by_the_capped_trainer_engine_ratio():
    batch = TokenBatch.of([trajectory([1, 2, 3], [-100, 2, 3], [-1.0, -1.0])], [1.0])
    old = batch.rollout_logprobs.clone()
    old[0, 1] += math.log(3.0)  # the trainer finds token 1 three times likelier than the engine did
    old[0, 2] += math.log(0.5)
    loss, stats = grpo_loss(old.clone(), batch, GRPOLossConfig(tis_cap=2.0), old_logp=old)
    assert loss.item() == pytest.approx(-(2.0 + 0.5) / 2)  # weights min(3, 2) and 0.5, ratio 1
    assert stats["tis_weight_mean"] == pytest.approx(1.25)
    with pytest.raises(ValueError, match="old_logp"):
        grpo_loss(old, batch, GRPOLossConfig(tis_cap=2.0))


def test_mismatch_mean_and_p99_over_trainable_tokens():
    mask = torch.tensor([[False, True, True, True]])
    engine = torch.tensor([[9.0, -1.0, -2.0, -3.0]])
    trainer = torch.tensor([[0.0, -1.5, -2.0, -2.0]])
    figures = mismatch(engine, trainer, mask)
    assert figures["mismatch_mean_abs"] == pytest.approx(0.5) and figures["mismatch_p99_abs"] == pytest.approx(1.0)


@pytest.mark.parametrize("settings", [{"clip_low": 0}, {"clip_high": 1.5}, {"tis_cap": 0.5}])
def test_bad_settings_are_refused(settings):
    with pytest.raises(GRPOConfigError):
        GRPOLossConfig(**settings)
