import numpy as np
import pandas as pd
import pytest

from creditline.credit.advantages import compute
from creditline.credit.rubrics import RUBRICS, Criterion, Rubric, RubricGroup, env_reward, score, success


def tables():
    episodes = pd.DataFrame({"episode_id": ["a", "b"], "group_id": ["g", "g"], "success": [True, False]})
    steps = pd.DataFrame({
        "episode_id": ["a", "a", "b"], "group_id": ["g", "g", "g"], "step_idx": [0, 1, 0],
        "step_reward": [-0.1, 1.0, -0.1], "valid_action": [False, True, False], "anchor_key": ["x", "y", "x"],
    })  # fmt: skip
    return episodes, steps


def test_step_and_episode_criteria_combine_by_weight():
    episodes, steps = tables()
    rubric = Rubric(
        "r", (Criterion("env", env_reward, "step", 1.0), Criterion("win", success, "episode", 0.5))
    )
    frame = score(rubric, episodes, steps)
    # step rewards: only step criteria → [-0.1, 1.0, -0.1]
    assert frame["step_reward"].tolist() == pytest.approx([-0.1, 1.0, -0.1])
    # episode a: 1·(−0.1 + 1.0) + 0.5·1 = 1.4 ; episode b: 1·(−0.1) + 0.5·0 = −0.1
    assert frame["episode_reward"].tolist() == pytest.approx([1.4, 1.4, -0.1])
    assert frame["criterion.env"].tolist() == pytest.approx([0.9, 0.9, -0.1])
    assert frame["criterion.win"].tolist() == [1.0, 1.0, 0.0]


def test_version_is_stable_and_changes_with_the_definition():
    a = Rubric("r", (Criterion("env", env_reward, "step", 1.0),))
    b = Rubric("r", (Criterion("env", env_reward, "step", 1.0),))
    c = Rubric("r", (Criterion("env", env_reward, "step", 2.0),))
    assert a.version == b.version != c.version
    assert a.version.startswith("r-") and len(a.version) == len("r-") + 8
    assert len({r.version for r in RUBRICS.values()}) == len(RUBRICS)


def test_group_total_is_the_sum_and_advantages_come_from_the_total():
    """verifiers PR #941's case: children A=[1,0], B=[0,1] → totals [1,1] → GRPO advantages [0,0].

    The PR froze child A's partial advantages ([0.5, −0.5]) into the steps; here advantages are computed
    once, from the group's total, so they are zero.
    """
    episodes = pd.DataFrame({"episode_id": ["a", "b"], "group_id": ["g", "g"], "success": [True, False]})
    steps = pd.DataFrame({"episode_id": ["a", "b"], "group_id": ["g", "g"], "step_idx": [0, 0],
                          "step_reward": [0.0, 0.0], "anchor_key": ["x", "x"]})  # fmt: skip
    child_a = Rubric("a", (Criterion("won", success, "episode"),))
    child_b = Rubric(
        "b", (Criterion("lost", lambda episodes, steps: 1.0 - success(episodes, steps), "episode"),)
    )
    group = RubricGroup("both", (child_a, child_b))
    frame = score(group, episodes, steps)
    assert frame["episode_reward"].tolist() == [1.0, 1.0]
    assert set(frame.columns) >= {"criterion.a.won", "criterion.b.lost"}
    table = steps.assign(episode_reward=frame["episode_reward"], step_reward=frame["step_reward"])
    assert np.allclose(compute("grpo", table, norm_by_std=False), [0.0, 0.0])


def test_bad_criterion_output_names_the_rubric_and_criterion():
    episodes, steps = tables()
    broken = Rubric("broken", (Criterion("short", lambda steps: np.zeros(1), "step"),))
    with pytest.raises(ValueError, match="rubric 'broken' criterion 'short'.*shape"):
        score(broken, episodes, steps)
    nan = Rubric("nan", (Criterion("nan", lambda steps: np.full(len(steps), np.nan), "step"),))
    with pytest.raises(ValueError, match="non-finite value at steps row 0"):
        score(nan, episodes, steps)
