import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from schemas import AdvantagesTable, EpisodesTable, ScoresTable, StepsTable, TableValidationError, validate
from schemas.tables import _hex_keys


def steps_frame():
    return pd.DataFrame({
        "round": [1, 1, 1], "episode_id": ["e:s0", "e:s0", "e:s1"], "group_id": ["e"] * 3, "task_id": [3] * 3,
        "sample_idx": [0, 0, 1], "step_idx": [0, 1, 0], "observation": ["o"] * 3, "action": ["up"] * 3,
        "anchor_key": ["0123456789abcdef"] * 3, "prompt_ids": [[1, 5]] * 3, "completion_ids": [[7], [8], [9]],
        "completion_logprobs": [[-0.1], [-0.2], [-0.3]], "step_reward": [0.0, 1.0, -0.1],
        "valid_action": [True] * 3, "done": [False, True, False], "truncated": [False, False, True],
    })  # fmt: skip


KEY_PARTS = st.sampled_from(["0123456789abcdef", "fedcba9876543210", "\n", "0", "A", "", "0123456789abcdeF"])
KEYS = st.one_of(st.lists(KEY_PARTS, max_size=3).map("".join), st.none(), st.integers())


@given(st.lists(KEYS, max_size=6), st.booleans())
@example(["0123456789abcdef\nfedcba9876543210", ""], False)  # two keys' worth of characters in one value
@example(["0123456789abcdef\nfedcba9876543210"], False)
def test_anchor_keys_are_judged_as_one_value_at_a_time_would_be(values, keys_only):
    """The anchor-key check's one pass over the joined column says what a regex on each value says, whatever
    the values (newlines inside, joined keys, non-strings)."""
    values = [v if isinstance(v, str) or not keys_only else "0123456789abcdef" for v in values]
    series = pd.Series(values, dtype=object, index=range(10, 10 + len(values)))
    expected = [isinstance(v, str) and re.fullmatch(r"[0-9a-f]{16}", v) is not None for v in values]
    judged = _hex_keys(series)
    assert judged.index.equals(series.index) and judged.tolist() == expected


def test_a_good_steps_table_passes():
    assert len(validate(StepsTable, steps_frame(), "steps")) == 3


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda f: f.assign(step_idx=[0, 2, 0]),
            r"step_idx must run 0\.\.n-1.*row 1 \(episode_id='e:s0', step_idx=2\)",
        ),
        (lambda f: f.assign(step_reward=[0.0, np.nan, 0.0]), r"column step_reward.*row 1"),
        (lambda f: f.assign(step_reward=[0.0, np.inf, 0.0]), r"step_reward must be finite.*row 1"),
        (
            lambda f: f.assign(completion_logprobs=[[-0.1], [-0.2, -0.3], [-0.3]]),
            r"one value per completion token.*row 1",
        ),
        (
            lambda f: f.assign(anchor_key=["0123456789abcdef", "bad", "0123456789abcdef"]),
            r"column anchor_key.*row 1",
        ),
        (
            lambda f: f.assign(anchor_key=["0123456789abcdef", "0123456789abcdef\n", "0123456789abcdef"]),
            r"column anchor_key.*row 1",
        ),
        (lambda f: f.assign(step_idx=[0, 0, 0]), r"step_idx"),
        (lambda f: f.assign(extra=1), r"extra"),
    ],
)
def test_bad_steps_tables_are_refused_with_table_column_and_row(mutate, expected):
    with pytest.raises(TableValidationError, match=r"table 'steps'") as error:
        validate(StepsTable, mutate(steps_frame()), "steps")
    assert re.search(expected, str(error.value), flags=re.S), str(error.value)


def test_episode_ids_are_unique_and_stop_reasons_known():
    frame = pd.DataFrame({"round": [1, 1], "episode_id": ["a", "a"], "group_id": ["g", "g"], "task_id": [0, 0],
                          "sample_idx": [0, 1], "num_steps": [1, 2], "success": [True, False],
                          "env_return": [1.0, 0.0], "stop_reason": ["success", "gave_up"]})  # fmt: skip
    with pytest.raises(TableValidationError) as error:
        validate(EpisodesTable, frame, "episodes")
    assert "episode_id" in str(error.value) and "stop_reason" in str(error.value)


def test_scores_need_a_constant_episode_reward_and_criterion_columns_are_floats():
    frame = pd.DataFrame({"episode_id": ["a", "a"], "group_id": ["g", "g"], "step_idx": [0, 1], "rubric_version": ["r-1"] * 2,
                          "step_reward": [0.0, 1.0], "episode_reward": [1.0, 2.0], "criterion.env": [1.0, 1.0]})  # fmt: skip
    with pytest.raises(TableValidationError, match="episode_reward must be the same"):
        validate(ScoresTable, frame, "scores")
    assert len(validate(ScoresTable, frame.assign(episode_reward=1.0), "scores")) == 2


def test_completion_advantages_must_match_the_completion_length():
    frame = pd.DataFrame({"episode_id": ["a"], "group_id": ["g"], "step_idx": [0], "rubric_version": ["r"],
                          "estimator": ["gigpo"], "params_hash": ["h"], "advantage": [0.5], "completion_length": [2],
                          "completion_advantages": [[0.5]]})  # fmt: skip
    with pytest.raises(TableValidationError, match="one value per completion token"):
        validate(AdvantagesTable, frame, "advantages")
    # rounds written before per-token values were expanded at pack time carry the column; new ones do not
    assert len(validate(AdvantagesTable, frame.assign(completion_advantages=[[0.5, 0.5]]), "advantages")) == 1
    assert len(validate(AdvantagesTable, frame.drop(columns="completion_advantages"), "advantages")) == 1


def test_a_continuation_link_needs_both_its_episode_and_its_step():
    linked = steps_frame().assign(branch_of_episode=[None, None, "e:s0"],
                                  branch_of_step=pd.array([None, None, 1], dtype="Int64"))  # fmt: skip
    assert len(validate(StepsTable, linked, "steps")) == 3
    half = linked.assign(branch_of_step=pd.array([None, None, None], dtype="Int64"))
    with pytest.raises(
        TableValidationError, match="branch_of_episode and branch_of_step must be null together"
    ):
        validate(StepsTable, half, "steps")
    with pytest.raises(TableValidationError, match="branch_of_step"):
        validate(StepsTable, linked.assign(branch_of_step=pd.array([None, None, 0], dtype="Int64")), "steps")
