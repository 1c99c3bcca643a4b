"""grpo / rloo / reinforce_pp_baseline presets == torch transcriptions of the code they name.

* ``conventions="verl"``: verl ``core_algos.py`` @b178a3c (loop versions) and ``masked_whiten``.
  A multi-turn episode is ONE response: its (1, L) row holds the completion tokens of every step
  (mask 1) with observation tokens between them (mask 0), and the episode score on the last valid
  token.
* ``conventions="verl-agent"``: verl-agent @20bd331's copy (``traj_index``,
  ``compute_mean_std_cross_steps=True``). Every step row is its own response, carrying the
  episode score on its last valid token.

Both run on multi-step batches (episodes of 1..4 steps) and on one-step batches (where the two
coincide). float64, so only the formulas are compared. Each row's scalar is read back at a
masked position (A[i, :] = a_i · mask[i, :]).
"""

from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
import torch

from creditline.credit.advantages import compute

F64 = torch.float64


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


def verl_agent_group_scores(scores, index, traj_index, cross_steps=True):
    """verl-agent: id -> scores; one per step row (cross_steps) or per (uid, traj_uid)."""
    id2score, seen_pairs = defaultdict(list), set()
    for i in range(scores.shape[0]):
        if (index[i], traj_index[i]) in seen_pairs:
            continue
        id2score[index[i]].append(scores[i])
        if not cross_steps:
            seen_pairs.add((index[i], traj_index[i]))
    id2mean, id2std = {}, {}
    for idx, xs in id2score.items():
        if len(xs) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0, dtype=F64), torch.tensor(1.0, dtype=F64)
        else:
            t = torch.stack(xs)
            id2mean[idx], id2std[idx] = torch.mean(t), torch.std(t)
    return id2score, id2mean, id2std


def verl_agent_grpo(token_level_rewards, response_mask, index, traj_index, epsilon=1e-6, norm=True):
    scores = token_level_rewards.sum(dim=-1)
    _, id2mean, id2std = verl_agent_group_scores(scores, index, traj_index)
    for i in range(scores.shape[0]):
        if norm:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        else:
            scores[i] = scores[i] - id2mean[index[i]]
    return scores.unsqueeze(-1) * response_mask


def verl_agent_rloo(token_level_rewards, response_mask, index, traj_index):
    scores = token_level_rewards.sum(dim=-1)
    id2score, id2mean, _ = verl_agent_group_scores(scores, index, traj_index)
    for i in range(scores.shape[0]):
        n = len(id2score[index[i]])
        if n > 1:
            scores[i] = scores[i] * n / (n - 1) - id2mean[index[i]] * n / (n - 1)
    return scores.unsqueeze(-1) * response_mask


def verl_agent_reinforce_pp_baseline(token_level_rewards, response_mask, index, traj_index):
    response_length = token_level_rewards.shape[-1]
    scores = token_level_rewards.sum(dim=-1)
    _, id2mean, _ = verl_agent_group_scores(scores, index, traj_index)
    for i in range(scores.shape[0]):
        scores[i] = scores[i] - id2mean[index[i]]
    scores = scores.unsqueeze(-1).tile([1, response_length]) * response_mask
    return masked_whiten(scores, response_mask) * response_mask


def last_token_rewards(mask, score):
    """(B, L) rewards: score[i] on the last mask=1 token of row i."""
    last = mask.shape[1] - 1 - torch.argmax(mask.flip(1), dim=1)
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(mask.shape[0]), last] = torch.tensor(score, dtype=torch.float64)
    return rewards


def make_batch(seed, n_groups, max_group, max_steps, max_tokens=5, singletons=True):
    """(step table, verl batch: one row per episode, verl-agent batch: one row per step)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1 if singletons else 2, max_group + 1, size=n_groups)
    ep_group = np.repeat([f"uid{g}" for g in range(n_groups)], sizes)
    n_ep = len(ep_group)
    ep_score = rng.choice([0.0, 1.0, 0.3, -0.5], size=n_ep) if seed % 2 else rng.normal(size=n_ep)
    n_steps = rng.integers(1, max_steps + 1, size=n_ep)
    completion = [rng.integers(1, max_tokens + 1, size=k) for k in n_steps]  # tokens per step
    observation = [rng.integers(0, 4, size=k - 1) for k in n_steps]  # mask-0 tokens between steps
    steps = pd.DataFrame(
        {
            "group_id": np.repeat(ep_group, n_steps),
            "episode_id": np.repeat([f"r{e:03d}" for e in range(n_ep)], n_steps),
            "step_idx": np.concatenate([np.arange(k) for k in n_steps]),
            "anchor_key": "-",
            "step_reward": 0.0,
            "episode_reward": np.repeat(ep_score, n_steps),
            "completion_length": np.concatenate(completion),
        }
    )
    # verl: an episode is one response: completion spans with observation holes
    spans = [np.concatenate([np.r_[np.ones(c), np.zeros(o)] for c, o in zip(cs, [*obs, 0], strict=True)])
             for cs, obs in zip(completion, observation, strict=True)]  # fmt: skip
    length = max(len(x) for x in spans)
    ep_mask = torch.tensor(np.stack([np.pad(x, (0, length - len(x))) for x in spans]), dtype=torch.float64)
    verl = (last_token_rewards(ep_mask, ep_score), ep_mask, ep_group.astype(object))
    # verl-agent: one response per step row, the episode score on each
    lengths = steps.completion_length.to_numpy()
    step_mask = torch.tensor(np.arange(max_tokens)[None, :] < lengths[:, None], dtype=torch.float64)
    agent = (
        last_token_rewards(step_mask, steps.episode_reward.to_numpy()),
        step_mask,
        steps.group_id.to_numpy(dtype=object),
        steps.episode_id.to_numpy(dtype=object),
    )
    return steps, verl, agent, n_steps


def per_row(token_adv):
    return token_adv[:, 0].numpy()  # every response starts with a valid token, mask[:, 0] = 1


BATCHES = [(0, 5, 8, 4), (1, 8, 4, 3), (2, 10, 16, 4), (3, 3, 2, 2), (4, 6, 5, 1), (5, 4, 6, 1)]


@pytest.mark.parametrize("seed,n_groups,max_group,max_steps", BATCHES)
def test_verl_preset_matches_verl(seed, n_groups, max_group, max_steps):
    steps, (rewards, mask, index), _, n_steps = make_batch(seed, n_groups, max_group, max_steps)
    shuffled = steps.sample(frac=1.0, random_state=seed)
    perm = shuffled.index.to_numpy()

    def ours(name, **kw):
        return compute(name, shuffled, conventions="verl", **kw)

    def theirs(token_adv):  # one value per episode -> every step row of it, then shuffled
        return np.repeat(per_row(token_adv), n_steps)[perm]

    for norm in (True, False):
        expected = theirs(verl_grpo(rewards.clone(), mask, index, norm_adv_by_std_in_grpo=norm))
        np.testing.assert_allclose(ours("grpo", norm_by_std=norm), expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        ours("rloo"), theirs(verl_rloo(rewards.clone(), mask, index)), rtol=1e-9, atol=1e-9
    )
    expected = theirs(verl_reinforce_pp_baseline(rewards.clone(), mask, index))
    np.testing.assert_allclose(ours("reinforce_pp_baseline"), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed,n_groups,max_group,max_steps", BATCHES)
def test_verl_agent_preset_matches_verl_agent(seed, n_groups, max_group, max_steps):
    steps, _, (rewards, mask, index, traj_index), _ = make_batch(seed, n_groups, max_group, max_steps)
    shuffled = steps.sample(frac=1.0, random_state=seed)
    perm = shuffled.index.to_numpy()

    def ours(name, **kw):
        return compute(name, shuffled, conventions="verl-agent", **kw)

    for norm in (True, False):
        expected = per_row(verl_agent_grpo(rewards.clone(), mask, index, traj_index, norm=norm))[perm]
        np.testing.assert_allclose(ours("grpo", norm_by_std=norm), expected, rtol=1e-9, atol=1e-9)
    expected = per_row(verl_agent_rloo(rewards.clone(), mask, index, traj_index))[perm]
    np.testing.assert_allclose(ours("rloo"), expected, rtol=1e-9, atol=1e-9)
    expected = per_row(verl_agent_reinforce_pp_baseline(rewards.clone(), mask, index, traj_index))[perm]
    np.testing.assert_allclose(ours("reinforce_pp_baseline"), expected, rtol=1e-9, atol=1e-9)
