"""The round's stages as the assets and the benchmarks call them (`creditline.round`)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from creditline.config import AdvantageSettings
from creditline.credit.round_advantages import join_on_step, step_advantages, with_token_advantages
from creditline.round import training_rows


def _steps(lengths: list[int]) -> pd.DataFrame:
    """Two tasks × two samples, one or two steps each; completion i has lengths[i] tokens."""
    keys = [
        ("t0-s0", "t0", 0),
        ("t0-s0", "t0", 1),
        ("t0-s1", "t0", 0),
        ("t1-s0", "t1", 0),
        ("t1-s1", "t1", 0),
    ]
    return pd.DataFrame({
        "episode_id": [k[0] for k in keys], "group_id": [k[1] for k in keys], "step_idx": [k[2] for k in keys],
        "anchor_key": [f"{k[0]}:{k[2]}" for k in keys], "prompt_ids": [[1, 2]] * 5,
        "completion_ids": [list(range(n)) for n in lengths],
    })  # fmt: skip


def _scores(steps: pd.DataFrame, episode_reward: dict[str, float]) -> pd.DataFrame:
    reward = steps["episode_id"].map(episode_reward)
    last = steps.groupby("episode_id")["step_idx"].transform("max") == steps["step_idx"]
    return steps[["episode_id", "step_idx"]].assign(
        rubric_version="env@1", step_reward=np.where(last, reward, 0.0), episode_reward=reward
    )


def test_grpo_advantages_by_hand_one_row_per_step_and_no_token_lists_stored():
    steps = _steps([2, 1, 3, 1, 0])
    scores = _scores(steps, {"t0-s0": 1.0, "t0-s1": 0.0, "t1-s0": 2.0, "t1-s1": 2.0})
    table = step_advantages(steps, scores, AdvantageSettings("grpo", {"norm_by_std": False}))
    # GRPO without std: episode reward minus its group's mean; t0's mean 0.5, t1's 2.0
    assert table["advantage"].tolist() == [0.5, 0.5, -0.5, 0.0, 0.0]
    assert table["completion_length"].tolist() == [2, 1, 3, 1, 0]
    assert "completion_advantages" not in table  # expanded where consumed, not stored


def test_token_advantages_repeat_the_step_scalar_like_a_plain_loop():
    steps = _steps([2, 1, 3, 1, 0])
    scores = _scores(steps, {"t0-s0": 1.0, "t0-s1": 0.0, "t1-s0": 2.0, "t1-s1": 0.5})
    advantages = step_advantages(steps, scores, AdvantageSettings("grpo", {"norm_by_std": True}))
    rows = training_rows(steps, advantages)
    for row in rows.itertuples():
        assert row.completion_advantages == [row.advantage] * len(row.completion_ids)


@settings(max_examples=25, deadline=None)
@given(st.permutations(range(5)), st.permutations(range(5)))
def test_the_joins_do_not_depend_on_row_order(steps_order, advantages_order):
    steps = _steps([2, 1, 3, 1, 4])
    scores = _scores(steps, {"t0-s0": 1.0, "t0-s1": 0.0, "t1-s0": 2.0, "t1-s1": 0.5})
    advantages = step_advantages(steps, scores, AdvantageSettings("gigpo", {}))
    expected = training_rows(steps, advantages).set_index(["episode_id", "step_idx"]).sort_index()
    shuffled = training_rows(steps.iloc[list(steps_order)], advantages.iloc[list(advantages_order)])
    got = shuffled.set_index(["episode_id", "step_idx"]).sort_index()
    assert got["completion_advantages"].tolist() == expected["completion_advantages"].tolist()
    assert got["advantage"].tolist() == expected["advantage"].tolist()


def test_a_table_that_does_not_cover_every_step_is_refused_by_name():
    steps = _steps([1, 1, 1, 1, 1])
    scores = _scores(steps, {"t0-s0": 1.0, "t0-s1": 0.0, "t1-s0": 2.0, "t1-s1": 0.5})
    with pytest.raises(ValueError, match="scores cover 4 of 5 step rows"):
        step_advantages(steps, scores.iloc[1:], AdvantageSettings("grpo", {}))
    with pytest.raises(ValueError, match="advantages cover 0 of 5 step rows"):
        join_on_step(steps, scores.iloc[:0].assign(advantage=0.0), ["advantage"], "advantages")
    with pytest.raises(pd.errors.MergeError):  # a step scored twice
        join_on_step(steps, pd.concat([scores, scores.iloc[:1]]), ["step_reward"], "scores")


def test_token_expansion_keeps_an_empty_completion_empty():
    rows = pd.DataFrame({"completion_ids": [[], [5, 6]], "advantage": [1.5, -0.25]})
    assert with_token_advantages(rows)["completion_advantages"].tolist() == [[], [-0.25, -0.25]]


def test_an_igpo_round_records_the_gold_answer_log_probability_of_every_step(tiny_policy, tmp_path):
    """The rollouts stage adds `gold_logprob` for an estimator that reads it: ℓ of the episode's gold answer
    after each step's prompt, as `gold_logprobs` gives it directly."""
    from creditline.config import from_dict
    from creditline.credit.gold_answer import gold_logprobs
    from creditline.engines import TorchEngine
    from creditline.envs import make_env
    from creditline.round import generate_rollouts

    model, tokenizer = tiny_policy
    config = from_dict({"env": {"name": "lookup", "params": {}}, "advantages": {"estimator": "igpo", "params": {}},
                        "rollouts": {"tasks_per_round": 3, "group_size": 2}})  # fmt: skip
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer=tokenizer)
    steps = generate_rollouts(engine, tokenizer, config, 1).steps
    env = make_env("lookup")
    answers = []
    for task in steps["task_id"]:
        env.reset(int(task), 0)
        answers.append(env.gold_answer())
    expected = gold_logprobs(model, tokenizer, list(steps["prompt_ids"]), answers)
    np.testing.assert_allclose(steps["gold_logprob"].to_numpy(), expected, rtol=1e-6)
