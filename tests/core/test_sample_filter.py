"""PROF's consistency filter (creditline.credit.sample_filter) and the round's use of it, by hand."""

import numpy as np
import pandas as pd
import pytest

from creditline.config import AdvantageSettings
from creditline.credit.round_advantages import step_advantages
from creditline.credit.sample_filter import consistency, prof_keep
from creditline.round import training_rows


def round_tables(step_rewards: dict[str, list[float]], success: dict[str, bool], group="g"):
    rows = [{"episode_id": e, "group_id": group, "step_idx": t, "step_reward": r, "anchor_key": "0" * 16,
             "completion_ids": [1], "rubric_version": "v"}
            for e, rewards in step_rewards.items() for t, r in enumerate(rewards)]  # fmt: skip
    steps = pd.DataFrame(rows)
    scores = steps.assign(episode_reward=steps.groupby("episode_id")["step_reward"].transform("sum"))
    episodes = pd.DataFrame({"episode_id": list(success), "success": list(success.values())})
    return steps, scores, episodes


# four episodes, μ = mean of all 8 step rewards = 0.25
REWARDS = {"a": [1.0, 0.0], "b": [0.0, 0.0], "c": [1.0, 0.0], "d": [0.0, 0.0]}
SUCCESS = {"a": True, "b": True, "c": False, "d": False}


def test_consistency_by_hand():
    steps, scores, episodes = round_tables(REWARDS, SUCCESS)
    s = consistency(scores, episodes.set_index("episode_id")["success"])
    # a correct: mean(2(1 − .25), 2(0 − .25)) = 0.5; b correct: −0.5; c failed: −0.5; d failed: +0.5
    assert s.to_dict() == pytest.approx({"a": 0.5, "b": -0.5, "c": -0.5, "d": 0.5})


def test_prof_drops_the_least_consistent_keeping_the_classes_balanced():
    steps, scores, episodes = round_tables(REWARDS, SUCCESS)
    # P = N = 2, remove 2: n_pos = min(2, round((0 + 2)/2)) = 1 → drop b (correct, s −.5), then c (failed, −.5)
    assert prof_keep(scores, episodes, 2).to_dict() == {"a": True, "b": False, "c": False, "d": True}
    # remove 1: n_pos = round(0.5) = 0 (banker's rounding, as PROF's Python) → drop one failed: c
    assert prof_keep(scores, episodes, 1).to_dict() == {"a": True, "b": True, "c": False, "d": True}


def test_prof_with_more_correct_drops_correct_first():
    success = {"a": True, "b": True, "c": True, "d": False}
    steps, scores, episodes = round_tables(REWARDS, success)
    # δ = 2, remove 2: n_pos = min(2, round(4/2)) = 2 → the two correct of lowest s: b (−.5), then a vs c
    # (a: .5, c: .5 as correct) → tie broken by episode_id: a
    assert prof_keep(scores, episodes, 2).to_dict() == {"a": False, "b": False, "c": True, "d": True}


def test_the_round_learns_from_the_kept_episodes_only():
    steps, scores, episodes = round_tables(REWARDS, SUCCESS)
    settings = AdvantageSettings("grpo", {"norm_by_std": False}, sample_filter="prof", filter_remove=2)
    table = step_advantages(steps, scores, settings, episodes).set_index(["episode_id", "step_idx"])
    assert table["kept"].groupby(level=0).first().to_dict() == {"a": True, "b": False, "c": False, "d": True}
    # GRPO over the kept a (return 1) and d (0) only: ±0.5; dropped rows 0
    assert table["advantage"].groupby(level=0).first().to_dict() == {"a": 0.5, "b": 0.0, "c": 0.0, "d": -0.5}
    with pytest.raises(ValueError, match="needs the round's episodes"):
        step_advantages(steps, scores, settings)
    rows = training_rows(steps, table.reset_index())
    assert len(rows) == len(steps)  # the join covers every row; train_policy drops the unkept
    assert np.isfinite(table["advantage"]).all()


def test_row_order_does_not_change_what_prof_keeps():
    rng = np.random.default_rng(0)
    rewards = {f"e{i}": list(rng.integers(0, 2, size=3).astype(float)) for i in range(8)}
    success = {e: bool(rng.integers(0, 2)) for e in rewards}
    steps, scores, episodes = round_tables(rewards, success)
    kept = prof_keep(scores, episodes, 4)
    again = prof_keep(scores.sample(frac=1, random_state=3), episodes.sample(frac=1, random_state=4), 4)
    assert kept.sort_index().equals(again.sort_index()) and (~kept).sum() == 4


def test_the_update_trains_on_the_kept_rows_only(tiny_policy):
    """A real round of the tiny policy with the filter on: the trainer's minibatches hold exactly the kept
    step rows (plain prompts: one training row per step)."""
    from creditline.config import from_dict
    from creditline.engines import TorchEngine
    from creditline.round import generate_rollouts, score_rollouts, train_policy

    model, tokenizer = tiny_policy
    config = from_dict({"rollouts": {"tasks_per_round": 2, "group_size": 4},
                        "advantages": {"estimator": "grpo", "params": {}, "sample_filter": "prof",
                                       "filter_remove": 2},
                        "train": {"epochs": 1, "minibatches": 1}})  # fmt: skip
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer=tokenizer)
    tables = generate_rollouts(engine, tokenizer, config, 1)
    scores = score_rollouts(config, tables.episodes, tables.steps)
    advantages = step_advantages(tables.steps, scores, config.advantages, tables.episodes)
    assert (~advantages.drop_duplicates("episode_id")["kept"]).sum() == 2 * 2  # 2 of 4 in each of 2 groups
    metrics, _ = train_policy(model, tokenizer, tables.steps, advantages, config, 1, None)
    assert sum(m["rows"] for m in metrics) == int(advantages["kept"].sum()) < len(tables.steps)


def test_in_a_group_where_every_episode_failed_prof_drops_the_most_rewarded():
    """PROF's rule (as its code) in a one-class group: all four failed, so s = −mean 2(v − μ) and the
    lowest s is the highest step reward. μ = (0.3 + 0.2 + 0.1 + 0)·2/8 = 0.15; P = 0, N = 4, remove 2:
    n_pos = min(2, round((−4 + 2)/2)) = −1 → drop the 2 failed of lowest s: a (s = −0.3), b (−0.1).
    Where the GRPO reward is shaped (the shaped maze, success 0 at first) these are the episodes GRPO would
    have pushed toward (docs/advantages.md, "SPA and PROF: what was wrong")."""
    rewards = {"a": [0.3, 0.3], "b": [0.2, 0.2], "c": [0.1, 0.1], "d": [0.0, 0.0]}
    steps, scores, episodes = round_tables(rewards, dict.fromkeys(rewards, False))
    s = consistency(scores, episodes.set_index("episode_id")["success"])
    assert s.to_dict() == pytest.approx({"a": -0.3, "b": -0.1, "c": 0.1, "d": 0.3})
    assert prof_keep(scores, episodes, 2).to_dict() == {"a": False, "b": False, "c": True, "d": True}
