"""The trainer: the clipped surrogate and its options by hand, the chunked log-probs against the full
vocabulary path, and micro-batching that leaves the update unchanged."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from creditline.config import ExperimentConfig
from creditline.credit.round_advantages import step_advantages
from creditline.credit.rubric_registry import get_rubric
from creditline.engines import SamplingParams, TorchEngine
from creditline.policy.models import load_policy
from creditline.rollout.episodes import run_episodes
from creditline.round import training_rows
from creditline.train.logprobs import completion_logprobs, full_vocab_logprobs
from creditline.train.policy_update import update_policy
from creditline.train.trainer import TrainConfig, clipped_pg_terms, k3, micro_batches, pack, score, train


def test_clipped_terms_by_hand():
    # ratio e^0.5 = 1.6487 with A = +1 (clipped at 1.2), ratio e^-0.5 = 0.6065 with A = −2 (clipped at 0.8)
    # token 1: −min(1.6487·1, 1.2·1) = −1.2 ; token 2: −min(0.6065·−2, 0.8·−2) = −min(−1.2131, −1.6) = 1.6
    terms, clipped = clipped_pg_terms(
        torch.tensor([0.5, -0.5]), torch.zeros(2), torch.tensor([1.0, -2.0]), 0.2
    )
    assert terms.tolist() == pytest.approx([-1.2, 1.6], abs=1e-6)
    assert clipped.tolist() == [True, True]
    # k3 of KL(q‖p) with log p − log q = d: e^d − d − 1
    assert k3(torch.tensor([0.5, -0.5]), torch.zeros(2)).tolist() == pytest.approx(
        [math.exp(0.5) - 1.5, math.exp(-0.5) - 0.5], abs=1e-6
    )


def test_unclipped_gradient_is_advantage_weighted_score():
    # at ratio 1 the gradient of the term wrt logp is −A for each token
    logp = torch.zeros(2, requires_grad=True)
    terms, _ = clipped_pg_terms(logp, torch.zeros(2), torch.tensor([2.0, -1.0]), 0.2)
    terms.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-2.0, 1.0])


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
    with pytest.raises(ValueError, match="step row 1: empty prompt_ids"):
        pack([[1], []], [[2], [3]], [[-0.1], [-0.1]], [[1.0], [1.0]], pad_token_id=0)


def test_micro_batches_fit_the_budget_and_cover_every_row_once():
    lengths = torch.tensor([5, 9, 3, 9, 20, 4])
    groups = micro_batches(lengths, token_budget=18)
    assert sorted(i for g in groups for i in g.tolist()) == list(range(6))
    for group in groups:  # padded size fits, or the group is one row longer than the budget
        assert len(group) * int(lengths[group].max()) <= 18 or len(group) == 1
    assert [g.tolist() for g in groups] == [[4], [1, 3], [0, 5, 2]]


def _batch(tokenizer, advantages=(1.0, -1.0, 0.5)):
    """Three rows of different lengths with multi-token completions."""
    words = ["go key left 2 down 1", "pos 1 1 key 2 2 door 3 3 have no", "go door right 0 up 3 last up"]
    prompts = [[tokenizer.bos_token_id, *tokenizer.encode(w, add_special_tokens=False)] for w in words]
    completions = [tokenizer.encode(c, add_special_tokens=False) for c in ["up", "down left", "right up up"]]
    return pack(prompts, completions, [[-1.0] * len(c) for c in completions],
                [[a] * len(c) for a, c in zip(advantages, completions, strict=True)], tokenizer.pad_token_id)  # fmt: skip


@pytest.mark.parametrize("chunk_tokens", [1, 2, 512])
@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 1.0), (0.7, 0.6)])
def test_chunked_completion_logprobs_and_gradients_equal_the_full_vocabulary_path(
    tiny_policy, chunk_tokens, temperature, top_p
):
    model, tokenizer = tiny_policy
    batch = _batch(tokenizer)
    weights = torch.linspace(-1, 1, int(batch.completion_mask.sum()))  # an arbitrary loss over the tokens

    def grads(logp, entropy):
        model.zero_grad()
        ((logp * weights).sum() + (entropy * weights).sum()).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    full_logp, full_entropy = full_vocab_logprobs(
        model, batch.input_ids, batch.attention_mask, temperature, top_p
    )
    full_logp, full_entropy = full_logp[batch.completion_mask], full_entropy[batch.completion_mask]
    full_grads = grads(full_logp, full_entropy)
    logp, entropy = completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_mask,
                                        temperature, chunk_tokens, entropy_grad=True, top_p=top_p)  # fmt: skip
    assert logp.shape == entropy.shape == (int(batch.completion_mask.sum()),)
    torch.testing.assert_close(logp, full_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, full_entropy, atol=1e-5, rtol=1e-5)
    chunked_grads = grads(logp, entropy)
    for name, grad in full_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_training_raises_the_probability_of_positive_advantage_tokens(tiny_policy):
    model, tokenizer = tiny_policy
    prompt = [
        tokenizer.bos_token_id,
        *tokenizer.encode("pos 1 1 key 2 2 door 3 3 have no", add_special_tokens=False),
    ]
    up, down = tokenizer.convert_tokens_to_ids("up"), tokenizer.convert_tokens_to_ids("down")
    batch = pack([prompt, prompt], [[up], [down]], [[0.0], [0.0]], [[1.0], [-1.0]], tokenizer.pad_token_id)
    before = score(model, batch, 1.0)
    batch = replace(batch, old_logprobs=before)  # sampled by this very policy
    metrics, state = train(
        model, batch, TrainConfig(learning_rate=1e-2, epochs=3, minibatches=1), 1.0, seed=0
    )
    after = score(model, batch, 1.0)
    j = len(prompt) - 1
    assert after[0, j] > before[0, j] + 0.05  # "up" more likely
    assert after[1, j] < before[1, j] - 0.05  # "down" less likely
    assert len(metrics) == 3 and all(math.isfinite(m["loss"]) for m in metrics)
    assert metrics[0]["sampler_kl"] == pytest.approx(0.0, abs=1e-6)  # μ = π_old: no mismatch
    assert "state" in state


def _parameters(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _assert_same(a, b, atol=1e-5):
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=1e-4, msg=name)


def test_sampler_mismatch_and_reference_kl_are_the_hand_computed_k3(tiny_policy_dir):
    model, tokenizer = load_policy(tiny_policy_dir)
    batch = _batch(tokenizer)
    trainer_logp = score(model, batch, 1.0)
    mask = batch.completion_mask
    # the sampler saw every token 0.3 nats less likely, the reference 0.2 nats more likely
    batch = replace(batch, old_logprobs=torch.where(mask, trainer_logp - 0.3, 0.0),
                    reference_logprobs=torch.where(mask, trainer_logp + 0.2, 0.0))  # fmt: skip
    config = TrainConfig(learning_rate=1e-9, epochs=1, minibatches=1, kl_coef=0.1)
    metrics, _ = train(model, batch, config, 1.0, seed=0)
    assert metrics[0]["sampler_kl"] == pytest.approx(math.exp(0.3) - 0.3 - 1, rel=1e-4)  # d = log π − log μ
    assert metrics[0]["reference_kl"] == pytest.approx(
        math.exp(0.2) - 0.2 - 1, rel=1e-4
    )  # d = log π_ref − log π


def test_truncated_importance_sampling_weights_each_token_by_the_capped_ratio(tiny_policy_dir):
    """With μ = π_old − δ, TIS's weight is min(e^δ, C): at δ = 0.3, C = 1.2 the gradient is 1.2× the plain one
    (ratio against π_old = 1, no clipping), and the update equals the plain one with the advantages × 1.2."""
    model, tokenizer = load_policy(tiny_policy_dir)
    batch = _batch(tokenizer)
    trainer_logp = score(model, batch, 1.0)
    initial = _parameters(model)
    config = TrainConfig(learning_rate=1e-3, epochs=1, minibatches=1, max_grad_norm=1000.0)
    plain = replace(batch, old_logprobs=trainer_logp, advantages=batch.advantages * 1.2)
    train(model, plain, config, 1.0, seed=0)
    expected = _parameters(model)
    model.load_state_dict(initial, strict=False)
    tis = replace(batch, old_logprobs=torch.where(batch.completion_mask, trainer_logp - 0.3, 0.0))
    metrics, _ = train(model, tis, replace(config, tis_cap=1.2), 1.0, seed=0)
    _assert_same(_parameters(model), expected)
    assert metrics[0]["approx_kl"] == pytest.approx(0.0, abs=1e-6)  # ratio taken against π_old, not μ


@pytest.fixture(scope="module")
def round_rows(tiny_policy_dir):
    """A real round's step rows with GiGPO advantages, from the tiny policy on the maze."""
    config = replace(ExperimentConfig(), name="micro")
    model, tokenizer = load_policy(tiny_policy_dir)
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    tables = run_episodes(engine, tokenizer, config.env.build, config.name, 1, range(6), 4,
                          SamplingParams(1.0, 1.0, 1, seed=0))  # fmt: skip
    scores = get_rubric(config.rubric).score(tables.episodes, tables.steps)
    advantages = step_advantages(tables.steps, scores, config.advantages)
    return config, training_rows(tables.steps, advantages)


def test_a_round_with_micro_batches_gives_the_same_update_as_without(tiny_policy_dir, round_rows):
    config, rows = round_rows
    updates = {}
    for budget in (100_000, 40, 1):  # whole minibatches, a few rows at a time, one row at a time
        model, tokenizer = load_policy(tiny_policy_dir)
        train_config = replace(config.train, micro_batch_tokens=budget, entropy_coef=0.01)
        metrics, _ = update_policy(
            model, tokenizer.pad_token_id, rows, replace(config, train=train_config), 1, None
        )
        updates[budget] = (_parameters(model), metrics)
    whole, whole_metrics = updates[100_000]
    for budget in (40, 1):
        parameters, metrics = updates[budget]
        _assert_same(parameters, whole)
        for row, reference in zip(metrics, whole_metrics, strict=True):
            assert row["loss"] == pytest.approx(reference["loss"], abs=1e-5)
            assert row["tokens"] == reference["tokens"]


def test_kl_to_the_reference_needs_reference_logprobs(tiny_policy):
    model, tokenizer = tiny_policy
    with pytest.raises(ValueError, match="reference_logprobs"):
        train(model, _batch(tokenizer), TrainConfig(kl_coef=0.1), 1.0, seed=0)


def test_k3_is_never_negative_where_it_rounds_near_zero():
    """A `make run` round failed the training table's schema on k3 = −4.6e-11 (e^d − d − 1 at d ≈ 0)."""
    d = torch.linspace(-1e-4, 1e-4, 100_001, dtype=torch.float32)
    assert bool((k3(d, torch.zeros_like(d)) >= 0).all())
    assert float(k3(torch.tensor([1e-3]), torch.zeros(1))) == pytest.approx(1e-3**2 / 2, rel=1e-2)


def _pack_row_by_row(prompt_ids, completion_ids, completion_logprobs, completion_advantages, pad, masks):
    """The reference: each row's tensors filled one row at a time."""
    rows, length = (
        len(prompt_ids),
        max(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids, strict=True)),
    )
    ids, attention = (
        torch.full((rows, length), pad, dtype=torch.long),
        torch.zeros((rows, length), dtype=torch.long),
    )
    mask, old, adv = (
        torch.zeros((rows, length), dtype=torch.bool),
        torch.zeros((rows, length)),
        torch.zeros((rows, length)),
    )
    for r in range(rows):
        n_p, n_c = len(prompt_ids[r]), len(completion_ids[r])
        ids[r, : n_p + n_c] = torch.tensor([*prompt_ids[r], *completion_ids[r]], dtype=torch.long)
        attention[r, : n_p + n_c] = 1
        targets = slice(n_p - 1, n_p - 1 + n_c)
        mask[r, targets] = torch.tensor([bool(m) for m in masks[r]], dtype=torch.bool)
        old[r, targets] = torch.tensor(completion_logprobs[r], dtype=torch.float32)
        adv[r, targets] = torch.tensor(completion_advantages[r], dtype=torch.float32)
    return ids, attention, mask, old, adv


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 5), st.integers(0, 2**31)), min_size=1, max_size=8)
)
def test_pack_fills_the_same_tensors_as_a_row_by_row_loop(shapes):
    prompts, completions, logprobs, advantages, masks = [], [], [], [], []
    for n_p, n_c, seed in shapes:
        rng = np.random.default_rng(seed)
        prompts.append(rng.integers(3, 50, n_p).tolist())
        completions.append(rng.integers(3, 50, n_c).tolist())
        logprobs.append((-rng.random(n_c)).tolist())
        advantages.append(rng.normal(size=n_c).tolist())
        masks.append(rng.integers(0, 2, n_c).tolist())
    batch = pack(prompts, completions, logprobs, advantages, 0, masks)
    expected = _pack_row_by_row(prompts, completions, logprobs, advantages, 0, masks)
    got = (batch.input_ids, batch.attention_mask, batch.completion_mask, batch.old_logprobs, batch.advantages)
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    with pytest.raises(
        ValueError, match="step row 0: completion_ids and completion_advantages differ in length"
    ):
        pack(prompts[:1], completions[:1], logprobs[:1], [[*advantages[0], 1.0]], 0)


def test_rows_are_trained_at_the_sampling_settings_they_record(tiny_policy_dir, round_rows):
    config, rows = round_rows
    assert (rows["temperature"] == 1.0).all() and (rows["top_p"] == 1.0).all()  # generated: [rollouts]'
    at_config = replace(config, rollouts=replace(config.rollouts, temperature=0.5, top_p=0.9))
    trained = {}
    for name, these_rows, these in (
        ("recorded", rows.assign(temperature=0.5, top_p=0.9), config),  # config says 1.0: the rows win
        ("config", rows.drop(columns=["temperature", "top_p"]), at_config),
        ("unsaved", rows.assign(temperature=np.nan, top_p=np.nan), at_config),  # NaN: not saved
    ):
        model, tokenizer = load_policy(tiny_policy_dir)
        update_policy(model, tokenizer.pad_token_id, these_rows, these, 1, None)
        trained[name] = _parameters(model)
    for name in ("recorded", "unsaved"):  # the very same update
        assert all(torch.equal(trained[name][k], trained["config"][k]) for k in trained["config"])
    model, tokenizer = load_policy(tiny_policy_dir)
    mixed = rows.assign(temperature=np.where(np.arange(len(rows)) % 2, 0.7, 1.0))
    with pytest.raises(ValueError, match=r"^rollouts sampled with 2 different settings \(temperature=0.7 "
                       r"top_p=1, temperature=1 top_p=1\): one round trains at one temperature"):  # fmt: skip
        update_policy(model, tokenizer.pad_token_id, mixed, config, 1, None)
