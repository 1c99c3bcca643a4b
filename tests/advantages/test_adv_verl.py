"""conventions="verl" on one-step-per-episode tables == verl's token-level torch functions.

The functions below transcribe verl ``core_algos.py`` @b178a3c (loop versions) and
``masked_whiten``: (B, L) token rewards with the score on the last valid token, a response mask,
group ``index``. Run in float64 so that only the formulas are compared. Each row's scalar is
read back at a masked position (A[i, :] = a_i · mask[i, :]).
"""

from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
import torch

from creditline.advantages import compute


def masked_mean(values, mask):
    return (values * mask).sum() / (mask.sum() + 1e-8)


def masked_whiten(values, mask):
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    var = var * mask.sum() / (mask.sum() - 1)  # unbiased
    return (values - mean) * torch.rsqrt(var + 1e-8)


def verl_group_stats(scores, index, with_std=True):
    id2score, id2mean, id2std = defaultdict(list), {}, {}
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    for idx, xs in id2score.items():
        if len(xs) == 1:
            id2mean[idx], id2std[idx] = (
                torch.tensor(0.0, dtype=torch.float64),
                torch.tensor(1.0, dtype=torch.float64),
            )
        else:
            t = torch.stack(xs)
            id2mean[idx], id2std[idx] = torch.mean(t), torch.std(t)
    return id2score, id2mean, id2std


def verl_grpo(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    scores = token_level_rewards.sum(dim=-1)
    _, id2mean, id2std = verl_group_stats(scores, index)
    for i in range(scores.shape[0]):
        if norm_adv_by_std_in_grpo:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        else:
            scores[i] = scores[i] - id2mean[index[i]]
    return scores.unsqueeze(-1) * response_mask


def verl_rloo(token_level_rewards, response_mask, index):
    scores = token_level_rewards.sum(dim=-1)
    id2score, id2mean, _ = verl_group_stats(scores, index)
    for i in range(scores.shape[0]):
        n = len(id2score[index[i]])
        if n > 1:
            scores[i] = scores[i] * n / (n - 1) - id2mean[index[i]] * n / (n - 1)
    return scores.unsqueeze(-1) * response_mask


def verl_reinforce_pp_baseline(token_level_rewards, response_mask, index):
    response_length = token_level_rewards.shape[-1]
    scores = token_level_rewards.sum(dim=-1)
    _, id2mean, _ = verl_group_stats(scores, index)
    for i in range(scores.shape[0]):
        scores[i] = scores[i] - id2mean[index[i]]
    scores = scores.unsqueeze(-1).tile([1, response_length]) * response_mask
    return masked_whiten(scores, response_mask) * response_mask


def make_batch(seed, n_groups, max_group, length=12, singletons=True):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1 if singletons else 2, max_group + 1, size=n_groups)
    index = np.repeat([f"uid{g}" for g in range(n_groups)], sizes).astype(object)
    b = len(index)
    lengths = rng.integers(1, length + 1, size=b)
    mask = torch.tensor(np.arange(length)[None, :] < lengths[:, None], dtype=torch.float64)
    score = rng.choice([0.0, 1.0, 0.3, -0.5], size=b) if seed % 2 else rng.normal(size=b)
    rewards = torch.zeros(b, length, dtype=torch.float64)
    rewards[torch.arange(b), torch.tensor(lengths - 1)] = torch.tensor(score)
    steps = pd.DataFrame(
        {
            "group_id": index,
            "episode_id": [f"r{i:03d}" for i in range(b)],
            "step_idx": 0,
            "anchor_key": "-",
            "step_reward": 0.0,
            "episode_reward": score,
            "completion_length": lengths,
        }
    )
    return rewards, mask, index, steps


def per_row(token_adv):
    return token_adv[:, 0].numpy()  # every response has >= 1 valid token, mask[:, 0] = 1


@pytest.mark.parametrize("seed,n_groups,max_group", [(0, 5, 8), (1, 8, 4), (2, 10, 16), (3, 3, 2)])
def test_grpo_rloo_rfpp_match_verl(seed, n_groups, max_group):
    rewards, mask, index, steps = make_batch(seed, n_groups, max_group)
    shuffled = steps.sample(frac=1.0, random_state=seed)
    perm = shuffled.index.to_numpy()

    def ours(name, **kw):
        return compute(name, shuffled, conventions="verl", **kw)

    for norm in (True, False):
        expected = per_row(verl_grpo(rewards.clone(), mask, index, norm_adv_by_std_in_grpo=norm))
        np.testing.assert_allclose(ours("grpo", norm_by_std=norm), expected[perm], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        ours("rloo"), per_row(verl_rloo(rewards.clone(), mask, index))[perm], rtol=1e-9, atol=1e-9
    )
    # verl's masked_mean divides by (Σmask + 1e-8); we divide by Σmask: relative gap ~1e-8/Σmask
    expected = per_row(verl_reinforce_pp_baseline(rewards.clone(), mask, index))
    np.testing.assert_allclose(ours("reinforce_pp_baseline"), expected[perm], rtol=1e-7, atol=1e-7)
