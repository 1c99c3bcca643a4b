"""The step-reward model (creditline.credit.reward_model, implicit_prm, progress_model) on a real tiny round."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification

from creditline.config import from_dict
from creditline.credit.reward_model import (
    RewardModelSettings,
    accumulate_gradient,
    all_row_values,
    episode_codes,
    load_reward_model,
    reward_model_kind,
    step_batch,
    targets,
    train_reward_model,
)
from creditline.engines import TorchEngine
from creditline.policy.initial_policy import build_initial_policy
from creditline.policy.models import load_policy
from creditline.round import generate_rollouts, score_rollouts
from creditline.train.logprobs import full_vocab_logprobs


@pytest.fixture(scope="module")
def round_(tmp_path_factory):
    """A played round of the maze (4 tasks × 4 samples) and the initial policy's folder."""
    config = from_dict({"rollouts": {"tasks_per_round": 4, "group_size": 4}})
    folder, _ = build_initial_policy(config, tmp_path_factory.mktemp("rm") / "policy")
    model, tokenizer = load_policy(folder)
    tables = generate_rollouts(TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer=tokenizer),
                               tokenizer, config, 1)  # fmt: skip
    return (
        folder,
        tokenizer,
        tables.episodes,
        tables.steps,
        score_rollouts(config, tables.episodes, tables.steps),
    )


def _setup(round_, estimator):
    folder, tokenizer, episodes, steps, scores = round_
    kind = reward_model_kind(estimator)
    model, _ = load_reward_model(kind, folder, seed=0)
    reference = load_policy(folder)[0] if kind.needs_reference else None
    batch = step_batch(steps, tokenizer.pad_token_id)
    codes, ids = episode_codes(steps)
    context = kind.prepare(batch, RewardModelSettings(), reference)
    return kind, model, batch, codes, targets(kind, ids, episodes, scores), context


def test_prime_values_are_beta_times_the_summed_log_ratio(round_):
    kind, model, batch, codes, _, context = _setup(round_, "prime")
    assert np.array_equal(
        all_row_values(kind, model, batch, context, 4096), np.zeros(batch.input_ids.shape[0])
    )
    with torch.no_grad():  # move π_φ away from π_ref, then recompute by the full-vocabulary reference path
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    values = all_row_values(kind, model, batch, context, 4096)
    reference = load_policy(round_[0])[0]
    with torch.no_grad():
        ratio = (full_vocab_logprobs(model, batch.input_ids, batch.attention_mask, 1.0)[0]
                 - full_vocab_logprobs(reference, batch.input_ids, batch.attention_mask, 1.0)[0])  # fmt: skip
    expected = 0.05 * (ratio * batch.completion_mask).sum(1).double().numpy()
    np.testing.assert_allclose(values, expected, rtol=1e-4, atol=1e-6)


def test_spa_values_are_the_classification_heads_output_at_the_last_token(round_, tmp_path):
    kind, model, batch, _, _, context = _setup(round_, "spa")
    values = all_row_values(kind, model, batch, context, 4096)
    model.save_pretrained(tmp_path)
    hf = AutoModelForSequenceClassification.from_pretrained(
        tmp_path
    )  # HF's own pooling: the last non-pad token
    hf.config.pad_token_id = -1  # never a token: each unpadded row is pooled at its last token
    lengths = batch.attention_mask.sum(1)
    for r in range(0, len(lengths), 97):
        with torch.no_grad():
            one = hf(input_ids=batch.input_ids[r : r + 1, : lengths[r]]).logits.squeeze()
        assert float(one) == pytest.approx(values[r], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("estimator", ["prime", "spa"])
def test_the_two_pass_gradient_is_the_full_graph_gradient(round_, estimator):
    kind, model, batch, codes, target, context = _setup(round_, estimator)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p, generator=torch.Generator().manual_seed(3)))
    episodes = np.arange(6)
    rows = np.flatnonzero(np.isin(codes, episodes))
    local = codes[rows]
    y = torch.from_numpy(target[episodes])
    model.zero_grad()
    loss, _ = accumulate_gradient(
        kind, model, batch, rows, local, y, context, token_budget=64
    )  # many micro-batches
    two_pass = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    values = kind.row_values(model, batch, torch.from_numpy(rows), context)  # one graph over every row
    z = torch.zeros(len(episodes), dtype=values.dtype).index_add(0, torch.from_numpy(local), values)
    direct_loss = kind.loss(z, y)
    direct_loss.backward()
    direct = [p.grad for p in model.parameters() if p.grad is not None]
    assert float(loss) == pytest.approx(float(direct_loss.detach()), rel=1e-5)
    assert len(two_pass) == len(direct) > 0
    for a, b in zip(two_pass, direct, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("estimator", ["prime", "spa"])
def test_training_fits_the_episode_sums_to_their_targets(round_, estimator):
    kind, model, batch, codes, target, context = _setup(round_, estimator)
    if estimator == "prime":  # the initial policy solves no maze: give half the episodes a success to learn
        target = (np.arange(len(target)) % 2).astype(np.float64)
    settings = RewardModelSettings(learning_rate=1e-3, epochs=15, minibatches=2)
    metrics, state = train_reward_model(kind, model, batch, codes, target, settings, seed=0, context=context)
    first, last = metrics[0]["loss"], np.mean([m["loss"] for m in metrics[-4:]])
    assert last < 0.8 * first, (first, last)
    assert len(metrics) == 30 and state["state"]  # the optimiser state carries to the next round
    values = all_row_values(kind, model, batch, context, 4096)
    sums = np.bincount(codes, weights=values)
    if estimator == "prime":  # the log-odds now separate the successes from the failures
        assert sums[target == 1].mean() > sums[target == 0].mean()
    else:
        assert np.mean((sums - target) ** 2) < np.mean((0 - target) ** 2)


def test_a_target_that_is_not_a_number_is_refused(round_):
    kind, model, batch, codes, target, context = _setup(round_, "spa")
    target[2] = np.nan
    with pytest.raises(ValueError, match="episode 2's target \\(episode_reward\\) is not a finite number"):
        train_reward_model(kind, model, batch, codes, target, RewardModelSettings(), seed=0, context=context)
