"""Export formats, field by field, on a hand-made round: a chained two-turn chat episode, a plain episode
whose second prompt starts afresh (two prime-rl samples), and their scores and advantages."""

import json

import msgspec
import pandas as pd
import pytest

from creditline.interop.export import export_lines

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


def lines(format_: str, **kwargs) -> list:
    kwargs.setdefault("env_name", "maze")
    return [
        json.loads(line) for line in export_lines(format_, "exp", 1, STEPS, SCORES, ADVANTAGES, 0.8, **kwargs)
    ]


class TrainingSample(msgspec.Struct, array_like=True):
    """prime-rl's transport struct (src/prime_rl/transports/rollouts/types.py), field for field."""

    token_ids: list[int]
    mask: list[bool]
    logprobs: list[float]
    temperatures: list[float]
    env_name: str
    ref_logprobs: list[float] | None = None
    mm_kwargs: dict | None = None
    routed_experts: list | None = None
    mm_token_type_ids: list[int] | None = None
    rl_weights: list[float] | None = None
    ce_weights: list[float] | None = None
    ref_kl_weights: list[float] | None = None
    advantages: list[float] | None = None


def samples() -> list[TrainingSample]:
    return [msgspec.json.decode(line, type=TrainingSample, strict=True)
            for line in export_lines("prime-rl", "exp", 1, STEPS, SCORES, ADVANTAGES, 0.8, env_name="maze")]  # fmt: skip


def test_pr941_is_one_verifiers_rollout_output_per_episode_with_completion_advantages_per_step():
    a, b = lines("pr941", system="be brief")
    assert (a["example_id"], a["task"], a["reward"], a["use_verifiers_advantages"]) == (3, "exp", 1.0, True)
    assert a["error"] is None and a["timing"]["start_time"] == 0.0 and a["answer"] == ""
    assert a["is_completed"] is True and a["is_truncated"] is True  # its last model call was cut (length)
    assert b["is_truncated"] is False  # verifiers' meaning: no call cut; an env step limit is not truncation
    assert a["info"] == {"experiment": "exp", "round": 1, "episode_id": "a", "task_id": 3,
                         "rubric_version": "env@1", "estimator": "gigpo"}  # fmt: skip
    first, second = a["trajectory"]
    assert first["tokens"] == {"prompt_ids": [1, 2], "prompt_mask": [0, 0], "completion_ids": [5, 6],
                               "completion_mask": [1, 1], "completion_logprobs": [-0.1, -0.2],
                               "overlong_prompt": False, "is_truncated": False, "routed_experts": None}  # fmt: skip
    # verifiers fills every step's reward with the rollout's; ours stays in extras
    assert (first["reward"], first["advantage"], first["completion_advantages"]) == (1.0, 0.5, [0.5, 0.5])
    assert first["trajectory_id"] == "a"
    assert first["extras"] == {
        "step_idx": 0,
        "step_reward": 0.1,
        "valid_action": True,
        "env_truncated": False,
    }
    system, user = {"role": "system", "content": "be brief"}, {"role": "user", "content": "go left"}
    assert first["prompt"] == [system, user] and first["completion"] == [
        {"role": "assistant", "content": "left"}
    ]
    # turn 1's tokens extend turn 0's: the prompt is the whole conversation, as verifiers keeps it
    assert second["prompt"] == [system, user, {"role": "assistant", "content": "left"},
                                {"role": "user", "content": "go up"}]  # fmt: skip
    assert second["is_truncated"] is True and second["response"]["message"]["finish_reason"] == "length"
    assert a["prompt"] == [system, user]
    assert a["completion"] == [{"role": "assistant", "content": "left"}, {"role": "user", "content": "go up"},
                               {"role": "assistant", "content": "up"}]  # fmt: skip
    # b's turn 1 starts afresh (its tokens do not extend turn 0's)
    assert b["trajectory"][1]["prompt"] == [system, {"role": "user", "content": "go down"}]
    for step in a["trajectory"] + b["trajectory"]:
        assert len(step["completion_advantages"]) == len(step["tokens"]["completion_ids"])
        assert step["response"]["message"]["tokens"]["completion_ids"] == step["tokens"]["completion_ids"]
    assert b["reward"] == pytest.approx(-0.1)


def test_pr941_rollouts_say_how_they_stopped_count_their_tokens_and_flatten_their_metrics():
    scores = SCORES.assign(**{"criterion.env.reached": [0.0, 1.0, 0.0, 0.0]})
    a, b = [json.loads(x) for x in export_lines("pr941", "exp", 1, STEPS, scores, ADVANTAGES)]
    # a's last step hit the environment's step limit; b's neither ended nor hit it (the context ran out)
    assert (a["stop_condition"], b["stop_condition"]) == ("max_turns_reached", "prompt_too_long")
    done = STEPS.assign(done=STEPS.index == 3)
    (_, b_done) = [json.loads(x) for x in export_lines("pr941", "exp", 1, done, scores, ADVANTAGES)]
    assert b_done["stop_condition"] == "is_done"
    # a: prompts of 2 and 6 tokens, completions of 2 and 1; its last context holds 3 generated tokens of 7
    assert a["token_usage"] == {"input_tokens": 8.0, "output_tokens": 3.0, "final_output_tokens": 3.0,
                                "final_input_tokens": 4.0}  # fmt: skip
    assert a["metrics"] == {"env.reached": 1.0} and a["env.reached"] == 1.0  # verifiers' flattened copy
    assert b["metrics"] == {"env.reached": 0.0} and b["env.reached"] == 0.0
    assert a["tool_defs"] == [] and a["error"] is None


def test_pr941_tool_calls_are_verifiers_tool_calls_not_text():
    steps = STEPS.assign(action=STEPS["action"].where(STEPS.index != 0,
                         'ok<tool_call>{"name": "move", "arguments": {"to": "left"}}</tool_call>'))  # fmt: skip
    (a, _) = [json.loads(x) for x in export_lines("pr941", "exp", 1, steps, SCORES, ADVANTAGES)]
    call = {"role": "assistant", "content": "ok",
            "tool_calls": [{"id": "call_0", "name": "move", "arguments": '{"to": "left"}'}]}  # fmt: skip
    assert a["trajectory"][0]["completion"] == [call] and a["trajectory"][1]["prompt"][1] == call
    assert a["trajectory"][0]["response"]["message"]["finish_reason"] == "tool_calls"


def test_prime_rl_lines_decode_strictly_as_prime_rl_training_samples():
    a, b0, b1 = samples()
    assert a.token_ids == [1, 2, 5, 6, 9, 9, 7]
    assert a.mask == [False, False, True, True, False, False, True]
    assert a.logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3]
    assert a.advantages == [0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.7]
    assert a.temperatures == [0.8] * 7 and a.env_name == "maze"
    assert (a.ref_logprobs, a.rl_weights, a.ce_weights, a.ref_kl_weights) == (None, None, None, None)
    assert b0.token_ids == [1, 2, 8] and b0.mask == [False, False, True] and b0.advantages == [0.0, 0.0, -0.5]
    assert b1.token_ids == [4, 5, 5] and b1.mask == [False, True, True] and b1.advantages == [0.0, -0.7, -0.7]
    for sample in (a, b0, b1):
        assert len(sample.token_ids) == len(sample.mask) == len(sample.logprobs) == len(sample.advantages)


def interleave_rollout(output: dict) -> list[dict]:
    """prime-rl's classic `interleave_rollout` (orchestrator/trajectories.py, with PR #1838's step
    advantages): a step whose prompt_ids extend an active sample's prompt + completion merges into it (new
    prompt tokens mask False, logprob 0, advantage 0, then the completion); otherwise it starts a sample."""
    samples = []  # (prefix, sample)
    for step in output["trajectory"]:
        tokens = step["tokens"]
        prompt, completion = tokens["prompt_ids"], tokens["completion_ids"]
        match = next((s for prefix, s in samples if prompt[: len(prefix)] == prefix), None)
        if match is None:
            match = {"prompt_ids": list(prompt), "completion_ids": [], "completion_mask": [],
                     "completion_advantages": []}  # fmt: skip
            samples.append(([], match))
            new = []
        else:
            new = prompt[len(match["prompt_ids"]) + len(match["completion_ids"]) :]
        match["completion_ids"] += new + completion
        match["completion_mask"] += [False] * len(new) + [bool(m) for m in tokens["completion_mask"]]
        match["completion_advantages"] += [0.0] * len(new) + step["completion_advantages"]
        samples = [(p, s) if s is not match else (prompt + completion, s) for p, s in samples]
    return [s for _, s in samples]


def test_prime_rls_classic_interleaving_of_our_pr941_lines_gives_our_prime_rl_samples():
    interleaved = [s for output in lines("pr941") for s in interleave_rollout(output)]
    ours = samples()
    assert len(interleaved) == len(ours)
    for classic, sample in zip(interleaved, ours, strict=True):
        assert classic["prompt_ids"] + classic["completion_ids"] == sample.token_ids
        assert [False] * len(classic["prompt_ids"]) + classic["completion_mask"] == sample.mask
        assert [0.0] * len(classic["prompt_ids"]) + classic["completion_advantages"] == sample.advantages


def test_an_incomplete_round_or_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="the round.s advantages cover 2 of 4 step rows"):
        list(export_lines("pr941", "exp", 1, STEPS, SCORES, ADVANTAGES[ADVANTAGES.episode_id == "a"]))
    with pytest.raises(ValueError, match="unknown export format 'verl'"):
        list(export_lines("verl", "exp", 1, STEPS, SCORES, ADVANTAGES))
