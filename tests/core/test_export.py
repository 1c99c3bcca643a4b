"""Export formats, field by field, on a hand-made round: a chained two-turn chat episode, a plain episode
whose second prompt starts afresh (two prime-rl samples), and their scores and advantages."""

import json

import pandas as pd
import pytest

from creditline.export import export_lines

STEPS = pd.DataFrame(
    [
        # episode a (task 3, sample 0): turn 1's prompt = turn 0's prompt + completion + reply [9, 9]
        ("a", 3, 0, 0, [1, 2], [5, 6], [-0.1, -0.2], "go left", "left", False, "stop"),
        ("a", 3, 0, 1, [1, 2, 5, 6, 9, 9], [7], [-0.3], "go up", "up", True, "length"),
        # episode b (task 3, sample 1): turn 1's prompt does not extend turn 0's
        ("b", 3, 1, 0, [1, 2], [8], [-0.4], "go left", "right", False, "stop"),
        ("b", 3, 1, 1, [4], [5, 5], [-0.5, -0.6], "go down", "down", False, "stop"),
    ],
    columns=["episode_id", "task_id", "sample_idx", "step_idx", "prompt_ids", "completion_ids",
             "completion_logprobs", "observation", "action", "truncated", "finish_reason"],
).assign(step_reward=0.0, valid_action=True, round=1, group_id="g", done=False)  # fmt: skip
SCORES = pd.DataFrame(
    {"episode_id": ["a", "a", "b", "b"], "step_idx": [0, 1, 0, 1], "step_reward": [0.1, 0.9, -0.1, 0.0],
     "episode_reward": [1.0, 1.0, -0.1, -0.1], "rubric_version": "env@1"}
)  # fmt: skip
ADVANTAGES = pd.DataFrame(
    {"episode_id": ["a", "a", "b", "b"], "step_idx": [0, 1, 0, 1], "advantage": [0.5, 0.7, -0.5, -0.7], "estimator": "gigpo"}
)  # fmt: skip


def lines(format_: str) -> list[dict]:
    return [json.loads(line) for line in export_lines(format_, "exp", 1, STEPS, SCORES, ADVANTAGES, 0.8)]


def test_pr941_is_one_rollout_per_episode_with_completion_advantages_per_step():
    a, b = lines("pr941")
    assert (a["example_id"], a["task"], a["reward"], a["use_verifiers_advantages"]) == (3, "exp", 1.0, True)
    assert a["is_completed"] is True and a["is_truncated"] is True  # its last step was truncated
    assert a["info"] == {"experiment": "exp", "round": 1, "episode_id": "a", "task_id": 3,
                         "rubric_version": "env@1", "estimator": "gigpo"}  # fmt: skip
    first, second = a["trajectory"]
    assert first["tokens"] == {"prompt_ids": [1, 2], "prompt_mask": [0, 0], "completion_ids": [5, 6],
                               "completion_mask": [1, 1], "completion_logprobs": [-0.1, -0.2],
                               "overlong_prompt": False, "is_truncated": False}  # fmt: skip
    assert (first["reward"], first["advantage"], first["completion_advantages"]) == (0.1, 0.5, [0.5, 0.5])
    assert first["trajectory_id"] == "a" and first["extras"] == {"step_idx": 0, "valid_action": True}
    assert first["prompt"] == [{"role": "user", "content": "go left"}]
    assert first["completion"] == [{"role": "assistant", "content": "left"}]
    assert second["tokens"]["is_truncated"] is True and second["completion_advantages"] == [0.7]
    assert a["completion"] == [
        {"role": "assistant", "content": "left"},
        {"role": "assistant", "content": "up"},
    ]
    for step in a["trajectory"] + b["trajectory"]:
        assert len(step["completion_advantages"]) == len(step["tokens"]["completion_ids"])
    assert b["reward"] == pytest.approx(-0.1) and b["is_truncated"] is False


def test_prime_rl_merges_chained_turns_and_starts_a_new_sample_where_the_prefix_breaks():
    a, b0, b1 = lines("prime-rl")
    assert a["token_ids"] == [1, 2, 5, 6, 9, 9, 7]
    assert a["mask"] == [0, 0, 1, 1, 0, 0, 1]
    assert a["logprobs"] == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3]
    assert a["advantages"] == [0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.7]
    assert (a["reward"], a["temperature"], a["steps"], a["info"]["episode_id"]) == (1.0, 0.8, [0, 1], "a")
    assert b0["token_ids"] == [1, 2, 8] and b0["mask"] == [0, 0, 1] and b0["advantages"] == [0.0, 0.0, -0.5]
    assert b1["token_ids"] == [4, 5, 5] and b1["mask"] == [0, 1, 1] and b1["advantages"] == [0.0, -0.7, -0.7]
    assert b0["steps"] == [0] and b1["steps"] == [1] and b0["reward"] == b1["reward"] == pytest.approx(-0.1)
    for sample in (a, b0, b1):
        assert (
            len(sample["token_ids"])
            == len(sample["mask"])
            == len(sample["logprobs"])
            == len(sample["advantages"])
        )


def test_an_incomplete_round_or_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="the round.s advantages cover 2 of 4 step rows"):
        list(export_lines("pr941", "exp", 1, STEPS, SCORES, ADVANTAGES[ADVANTAGES.episode_id == "a"]))
    with pytest.raises(ValueError, match="unknown export format 'verl'"):
        list(export_lines("verl", "exp", 1, STEPS, SCORES, ADVANTAGES))
