"""The `credit_dial` environment: each dial does what its docstring says, counted by hand."""

from __future__ import annotations

import math
import random

import pytest

from creditline.config import from_dict
from creditline.config.checks import ConfigError
from creditline.envs import BUILTIN_ENVIRONMENTS, builtin_vocabulary, make_env
from creditline.envs.arithmetic import ArithmeticEnv
from creditline.envs.credit_dial import (
    ACTION_WORDS,
    CreditDialEnv,
    digit_answer,
    random_success_rate,
    task_layout,
)
from creditline.envs.maze import MazeEnv


def play(env: CreditDialEnv, task: int, seed: int, answer) -> list:
    """Play one episode; `answer(observation_text, turn)` gives each turn's completion."""
    observation = env.reset(task, seed)
    transitions, observations = [], [observation]
    for turn in range(env.horizon):
        transition = env.step(answer(observation.text, turn))
        transitions.append(transition)
        observation = transition.observation
        observations.append(observation)
    assert transitions[-1].done and all(not t.done for t in transitions[:-1])
    return list(zip(observations[:-1], transitions, strict=True))  # (what the turn showed, its result)


def follow_cue(text: str, turn: int) -> str:
    """The perfect policy: the cue's word where there is one, `up` on filler turns."""
    word = text.split()[1]
    return word if word in ACTION_WORDS else "up"


def test_the_digit_rule_hides_the_answer_behind_a_digit_the_same_for_every_task():
    """`rule = "digit"`: a decisive turn shows `go D` alone; the answer is D's word (by hand, 2 choices: up for
    0, 1, 4, 5, 8, 9; down for 2, 3, 6, 7); the cue's word no longer appears; the word rule's episodes are as
    before."""
    assert [digit_answer(str(d), 2) for d in range(10)] == ["up", "up", "down", "down", "up", "up", "down",
                                                             "down", "up", "up"]  # fmt: skip
    env = CreditDialEnv(horizon=8, decisive=3, distinct_states=10, choices=2, rule="digit")
    for task in range(20):
        right = play(
            env, task, 1, lambda text, turn: digit_answer(text.split()[1], 2) if text != "go none" else "up"
        )
        assert right[-1][1].success
        cues = [o.text for o, t in right if t.info["decisive"]]
        assert len(cues) == 3 and all(len(c.split()) == 2 and c.split()[1].isdigit() for c in cues)
        copied = play(env, task, 1, lambda text, turn: "down" if text == "go none" else "up")
        expected = all(digit_answer(c.split()[1], 2) == "up" for c in cues)
        assert copied[-1][1].success == expected  # "up" everywhere wins only where every digit means up
    assert "digit" in env.instructions and "digit" not in CreditDialEnv().instructions
    word = CreditDialEnv(horizon=8, decisive=3, distinct_states=4, choices=2)
    assert task_layout(5, 8, 3, 4, 2) == task_layout(
        5, 8, 3, 4, 2, "word"
    )  # the word rule's layouts as before
    assert play(word, 5, 0, follow_cue)[-1][1].success


def test_a_shown_mistake_turns_every_later_turn_into_filler_and_splits_the_anchor_groups():
    """`mistakes_shown`: after a wrong decisive answer every later turn shows `go none` (anchor too) and pays
    nothing; before it, and on track, the turns are those of the hidden setting."""
    kw = {
        "horizon": 8,
        "decisive": 3,
        "distinct_states": 1,
        "choices": 2,
        "rule": "digit",
        "shaped_share": 0.3,
    }
    shown, hidden = CreditDialEnv(**kw, mistakes_shown=True), CreditDialEnv(**kw)

    def right(text, turn):
        return digit_answer(text.split()[1], 2) if text != "go none" else "up"

    for env in (shown, hidden):  # on track: the same episode either way
        assert [o.text for o, _ in play(env, 7, 0, right)] == [o.text for o, _ in play(hidden, 7, 0, right)]
    first = task_layout(7, 8, 3, 1, 2, "digit").decisive_turns[0]

    def wrong_first(text, turn):
        answer = right(text, turn)
        return ("down" if answer == "up" else "up") if turn == first else answer

    after_shown = play(shown, 7, 0, wrong_first)
    after_hidden = play(hidden, 7, 0, wrong_first)
    assert all(o.text == "go none" and o.anchor == f"turn {t} go none" for t, (o, _) in enumerate(after_shown)
               if t > first)  # fmt: skip
    assert [o.text for o, _ in after_hidden if o.text != "go none"] and not after_shown[-1][1].success
    assert sum(t.reward for _, t in after_shown) == 0.0  # the shaped share of later cues is not paid
    assert sum(t.reward for _, t in after_hidden) == pytest.approx(2 * 0.3 / 3)  # hidden: the later two are


def test_the_same_task_and_seed_give_the_same_episode():
    env = CreditDialEnv(horizon=6, decisive=3, distinct_states=4)
    rng = random.Random(0)
    actions = [rng.choice(["up", "left", "xyz", "down"]) for _ in range(6)]
    runs = [
        [(o.text, o.anchor, t.reward, t.success) for o, t in play(env, 7, 123, lambda _, i: actions[i])]
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    other = CreditDialEnv(horizon=6, decisive=3, distinct_states=4)
    assert [o.anchor for o, _ in play(other, 7, 123, follow_cue)] == [a for _, a, _, _ in runs[0]]


def test_the_perfect_policy_succeeds_and_one_decisive_mistake_fails():
    env = CreditDialEnv(horizon=8, decisive=3)
    decisive = task_layout(5, 8, 3, 1, 4).decisive_turns
    assert all(t.success for _, t in play(env, 5, 0, follow_cue)[-1:])
    for bad_turn in decisive:

        def wrong_at_one(text: str, turn: int, bad_turn: int = bad_turn) -> str:
            right = follow_cue(text, turn)
            return ("down" if right == "up" else "up") if turn == bad_turn else right

        assert not play(env, 5, 0, wrong_at_one)[-1][1].success


def test_filler_actions_change_neither_outcome_nor_return():
    env = CreditDialEnv(horizon=8, decisive=2, shaped_share=0.5)
    decisive = set(task_layout(3, 8, 2, 1, 4).decisive_turns)
    rng = random.Random(1)
    for _ in range(20):
        filler = [rng.choice(["up", "down", "left", "right", "banana", ""]) for _ in range(8)]
        episode = play(
            env,
            3,
            9,
            lambda text, turn, filler=filler: follow_cue(text, turn) if turn in decisive else filler[turn],
        )
        assert episode[-1][1].success
        assert sum(t.reward for _, t in episode) == pytest.approx(1.0)
        assert [o.anchor for o, _ in episode] == [o.anchor for o, _ in play(env, 3, 9, follow_cue)]


def test_decisive_and_filler_turns_show_what_the_layout_says():
    env = CreditDialEnv(horizon=10, decisive=4)
    decisive = task_layout(11, 10, 4, 1, 4).decisive_turns
    episode = play(env, 11, 0, follow_cue)
    shows_cue = [o.text != "go none" for o, _ in episode]
    assert [turn for turn, cue in enumerate(shows_cue) if cue] == list(decisive)
    assert all(t.info["decisive"] == (turn in decisive) for turn, (_, t) in enumerate(episode))
    assert all(o.anchor == f"turn {turn} {o.text}" for turn, (o, _) in enumerate(episode))


def test_the_anchor_recurs_across_a_group_as_distinct_states_says():
    """Over a group (one task, many seeds), a decisive turn's anchors take at most `distinct_states`
    values, and with enough seeds exactly that many; a filler turn's anchor is the same for all."""
    for distinct in (1, 3, 10):
        env = CreditDialEnv(horizon=6, decisive=2, distinct_states=distinct)
        decisive = task_layout(4, 6, 2, distinct, 4).decisive_turns
        anchors_by_turn: dict[int, set[str]] = {turn: set() for turn in range(6)}
        for seed in range(200):
            for turn, (observation, _) in enumerate(play(env, 4, seed, follow_cue)):
                anchors_by_turn[turn].add(observation.anchor)
        for turn, anchors in anchors_by_turn.items():
            assert len(anchors) == (distinct if turn in decisive else 1), (distinct, turn)


def test_the_anchor_never_depends_on_earlier_actions():
    env = CreditDialEnv(horizon=5, decisive=3, distinct_states=2)
    first = [o.anchor for o, _ in play(env, 2, 42, follow_cue)]
    other = [o.anchor for o, _ in play(env, 2, 42, lambda _, turn: "right")]
    assert first == other


def test_rewards_by_hand_for_sparse_and_shaped_settings():
    """decisive = 2 of horizon 4. shaped_share s pays s/2 per correct decisive step, 1 − s on success."""
    decisive = task_layout(0, 4, 2, 1, 4).decisive_turns

    def rewards(shaped_share: float, mistakes: set[int], invalid_penalty: float = 0.0) -> list[float]:
        env = CreditDialEnv(horizon=4, decisive=2, shaped_share=shaped_share, invalid_penalty=invalid_penalty)

        def answer(text: str, turn: int) -> str:
            right = follow_cue(text, turn)
            return ("down" if right == "up" else "up") if turn in mistakes else right

        return [t.reward for _, t in play(env, 0, 0, answer)]

    first, second = decisive
    expected_sparse = [0.0, 0.0, 0.0, 1.0]
    assert rewards(0.0, set()) == expected_sparse
    assert rewards(0.0, {first}) == [0.0] * 4
    shaped = [0.0] * 4
    shaped[first] += 0.25  # 0.5 / 2 per correct decisive step
    shaped[second] += 0.25
    shaped[3] += 0.5  # 1 − 0.5 on success, at the last turn
    assert rewards(0.5, set()) == pytest.approx(shaped)
    one_wrong = [0.0] * 4
    one_wrong[second] = 0.25  # the first was wrong: no step reward there, no success
    assert rewards(0.5, {first}) == pytest.approx(one_wrong)
    dense = [0.0] * 4
    dense[first] = dense[second] = 0.5
    assert rewards(1.0, set()) == pytest.approx(dense)


def test_an_invalid_action_costs_the_penalty_and_is_a_mistake_on_a_decisive_turn():
    env = CreditDialEnv(horizon=3, decisive=1, invalid_penalty=0.1)
    (decisive,) = task_layout(0, 3, 1, 1, 4).decisive_turns
    episode = play(env, 0, 0, lambda text, turn: "banana" if turn == decisive else "up")
    assert [t.valid_action for _, t in episode] == [turn != decisive for turn in range(3)]
    assert [t.reward for _, t in episode] == pytest.approx(
        [-0.1 if turn == decisive else 0.0 for turn in range(3)]
    )
    assert not episode[-1][1].success
    two_choices = CreditDialEnv(horizon=1, decisive=1, choices=2)
    two_choices.reset(0, 0)
    assert not two_choices.step("left").valid_action  # only up and down are actions with choices = 2


@pytest.mark.parametrize(("choices", "decisive"), [(2, 1), (2, 3), (4, 2), (3, 2)])
def test_random_policy_success_matches_the_formula(choices, decisive):
    """A uniform choice among the action words at every turn: (1/choices)^decisive, within 4 σ."""
    env = CreditDialEnv(horizon=6, decisive=decisive, distinct_states=5, choices=choices)
    rng = random.Random(choices * 10 + decisive)
    words = ACTION_WORDS[:choices]
    episodes = 4000
    wins = sum(
        play(env, task, seed=task, answer=lambda _, __: rng.choice(words))[-1][1].success
        for task in range(episodes)
    )
    p = random_success_rate(choices, decisive)
    assert p == (1 / choices) ** decisive
    assert abs(wins / episodes - p) <= 4 * math.sqrt(p * (1 - p) / episodes)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"horizon": 0}, "credit_dial horizon must be in 1..100, got 0"),
        ({"horizon": 4, "decisive": 5}, "credit_dial decisive must be in 1..horizon (4), got 5"),
        ({"decisive": 0}, "credit_dial decisive must be in 1..horizon (8), got 0"),
        ({"choices": 5}, "credit_dial choices must be in 2..4, got 5"),
        (
            {"choices": 2, "distinct_states": 21},
            "credit_dial distinct_states must be in 1..20 (choices × 10 digits), got 21",
        ),
        ({"shaped_share": 1.5}, "credit_dial shaped_share must be in 0..1, got 1.5"),
        ({"invalid_penalty": -1.0}, "credit_dial invalid_penalty must be >= 0, got -1.0"),
        ({"rule": "color"}, "credit_dial rule must be one of word, digit, got 'color'"),
        (
            {"rule": "digit", "distinct_states": 11},
            "credit_dial distinct_states must be in 1..10 (10 digits), got 11",
        ),
    ],
)  # fmt: skip
def test_bad_params_are_refused_in_one_line(params, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        CreditDialEnv(**params)
    with pytest.raises(ConfigError) as caught:
        from_dict({"env": {"name": "credit_dial", "params": params}})
    (line,) = caught.value.problems
    assert line.startswith("env.params = {") and f'rejected by environment "credit_dial": {message}' in line


def test_an_unknown_param_is_named_with_the_known_ones():
    with pytest.raises(ConfigError) as caught:
        from_dict({"env": {"name": "credit_dial", "params": {"decisve": 2}}})
    assert caught.value.problems == [
        'env.params = { decisve = 2 }: unknown parameter decisve of environment "credit_dial"; '
        "known: choices, decisive, distinct_states, horizon, invalid_penalty, mistakes_shown, rule, shaped_share"
    ]


def test_credit_dial_is_a_registered_builtin_that_adds_no_word():
    """The tiny policy's tokenizer (and so the default checkpoint hash) numbers builtin_vocabulary's words
    in order: credit_dial must add none, and every word it shows or reads must be there."""
    env = make_env("credit_dial", horizon=5, decisive=2)
    assert isinstance(env, CreditDialEnv) and env.max_steps == 5
    assert BUILTIN_ENVIRONMENTS["credit_dial"] is CreditDialEnv
    existing = [*ArithmeticEnv.vocabulary(), *MazeEnv.vocabulary()]
    assert set(CreditDialEnv.vocabulary()) <= set(existing)
    assert builtin_vocabulary() == list(dict.fromkeys(existing))
    words = set()
    for task in range(30):
        for observation, _ in play(CreditDialEnv(distinct_states=7), task, task, follow_cue):
            words.update(observation.text.split())
    assert words <= set(CreditDialEnv.vocabulary())
    rng = random.Random(0)
    assert {env.format_example(rng) for _ in range(100)} == set(ACTION_WORDS)


def test_snapshot_and_restore_replay_the_same_future():
    env = CreditDialEnv(horizon=6, decisive=3, distinct_states=3, shaped_share=0.5)
    env.reset(1, 5)
    env.step("up")
    state = env.snapshot()
    later = [
        (t.observation.anchor, t.reward, t.success) for t in (env.step(w) for w in ["left", "down", "up"])
    ]
    env.restore(state)
    assert [
        (t.observation.anchor, t.reward, t.success) for t in (env.step(w) for w in ["left", "down", "up"])
    ] == later
