import math

import pytest
import torch

from creditline.trainer import TrainConfig, clipped_pg_loss, pack, token_logprobs, train


def test_clipped_loss_by_hand():
    # two tokens: ratio e^0.5 = 1.6487 with A = +1 (clipped at 1.2), ratio e^-0.5 = 0.6065 with A = −2 (clipped at 0.8)
    # token 1: min(1.6487·1, 1.2·1) = 1.2 ; token 2: min(0.6065·−2, 0.8·−2) = min(−1.2131, −1.6) = −1.6
    # loss = −(1.2 − 1.6)/2 = 0.2 ; the padding position (mask False) is ignored
    logp = torch.tensor([[0.5, -0.5, 3.0]])
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -2.0, 100.0]])
    mask = torch.tensor([[True, True, False]])
    loss, stats = clipped_pg_loss(logp, old, adv, mask, clip_eps=0.2)
    assert float(loss) == pytest.approx(0.2, abs=1e-6)
    assert stats["clip_fraction"] == pytest.approx(1.0)
    # k3 KL: ((r−1) − log r) averaged: ((e^.5−1−.5) + (e^−.5−1+.5))/2
    assert stats["approx_kl"] == pytest.approx(((math.exp(0.5) - 1.5) + (math.exp(-0.5) - 0.5)) / 2, abs=1e-6)


def test_unclipped_gradient_is_advantage_weighted_score():
    # at ratio 1 the gradient of the loss wrt logp is −A/N for each token
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = clipped_pg_loss(
        logp, torch.zeros(1, 2), torch.tensor([[2.0, -1.0]]), torch.ones(1, 2, dtype=torch.bool), 0.2
    )
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-1.0, 0.5])


def test_pack_places_targets_after_the_prompt():
    batch = pack(
        [[1, 10, 11], [1, 12]], [[20], [21, 2]], [[-0.5], [-0.1, -0.2]], [[1.0], [-1.0, -1.0]], pad_token_id=0
    )
    assert batch.input_ids.tolist() == [[1, 10, 11, 20], [1, 12, 21, 2]]
    # logits at index j predict token j+1: row 0's completion token (index 3) is predicted at index 2
    assert batch.completion_mask.tolist() == [[False, False, True, False], [False, True, True, False]]
    assert batch.old_logprobs[1, 1:3].tolist() == pytest.approx([-0.1, -0.2])
    assert batch.advantages[0, 2] == 1.0
    with pytest.raises(ValueError, match="step row 0"):
        pack([[1]], [[2, 3]], [[-0.1]], [[1.0, 1.0]], pad_token_id=0)


def test_training_raises_the_probability_of_positive_advantage_tokens(tiny_policy):
    model, tokenizer = tiny_policy
    prompt = [
        tokenizer.bos_token_id,
        *tokenizer.encode("pos 1 1 key 2 2 door 3 3 have no", add_special_tokens=False),
    ]
    up, down = tokenizer.convert_tokens_to_ids("up"), tokenizer.convert_tokens_to_ids("down")
    batch = pack([prompt, prompt], [[up], [down]], [[0.0], [0.0]], [[1.0], [-1.0]], tokenizer.pad_token_id)
    with torch.no_grad():
        before, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, 1.0)
    batch = pack(
        [prompt, prompt],
        [[up], [down]],
        [[float(before[0, len(prompt) - 1])], [float(before[1, len(prompt) - 1])]],
        [[1.0], [-1.0]],
        tokenizer.pad_token_id,
    )
    metrics, state = train(model, batch, TrainConfig(learning_rate=1e-2, epochs=3, minibatches=1))
    with torch.no_grad():
        after, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, 1.0)
    j = len(prompt) - 1
    assert after[0, j] > before[0, j] + 0.05  # "up" more likely
    assert after[1, j] < before[1, j] - 0.05  # "down" less likely
    assert len(metrics) == 3 and all(math.isfinite(m["loss"]) for m in metrics)
    assert "state" in state
