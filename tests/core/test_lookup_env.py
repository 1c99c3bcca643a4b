import random

import pytest

from creditline.envs import BUILTIN_ENVIRONMENTS, builtin_vocabulary, make_env
from creditline.envs.arithmetic import ArithmeticEnv
from creditline.envs.lookup import DIGITS, PLACES, LookupEnv, hidden_code, parse_action
from creditline.envs.maze import MazeEnv


def started(task: int = 3, **params) -> tuple[LookupEnv, str, str]:
    """A fresh environment on `task`, with the (place, digit) it hides."""
    env = LookupEnv(**params)
    env.reset(task, seed=0)
    place, digit = hidden_code(task)
    return env, place, digit


def empty_places(place: str) -> list[str]:
    return [other for other in PLACES if other != place]


def test_the_hidden_code_is_a_function_of_the_task():
    assert hidden_code(7) == hidden_code(7)
    assert LookupEnv().reset(7, seed=0) == LookupEnv().reset(7, seed=99)  # the seed changes nothing
    codes = {hidden_code(task) for task in range(200)}
    assert len(codes) > 30  # of the 40 (place, digit) pairs
    assert {place for place, _ in codes} == set(PLACES) and {digit for _, digit in codes} == set(DIGITS)


def test_gold_answer_is_the_hidden_digit():
    for task in range(20):
        env = LookupEnv()
        env.reset(task, seed=0)
        assert env.gold_answer() == hidden_code(task)[1]
    with pytest.raises(RuntimeError, match="before reset"):
        LookupEnv().gold_answer()


def test_looking_reveals_the_digit_or_no():
    env, place, digit = started()
    assert env._observe().text == "key"
    empty = empty_places(place)[0]
    missed = env.step(empty)
    assert missed.valid_action and missed.reward == 0.0 and not missed.done and not missed.truncated
    assert missed.observation.text == f"key {empty} no"
    found = env.step(place.capitalize() + ".")  # the maze's parse rule: first word, case ignored
    assert found.valid_action and found.reward == 0.0 and not found.done
    seen = {empty: "no", place: digit}
    assert found.observation.text == "key " + " ".join(f"{p} {seen[p]}" for p in PLACES if p in seen)


def test_the_right_answer_succeeds_and_a_wrong_one_ends_with_nothing():
    env, place, digit = started()
    env.step(place)
    right = env.step(digit)
    assert right.done and right.success and right.valid_action and right.reward == 1.0
    env, _, digit = started()
    wrong = env.step(str((int(digit) + 1) % 10))
    assert wrong.done and not wrong.success and wrong.valid_action and wrong.reward == 0.0


@pytest.mark.parametrize(
    ("action", "parsed"),
    [("7", "7"), (" 7. ", "7"), ("7 up", "7"), ("up", "up"), ("Left, then 7", "left"), ("12", None),
     ("seven", None), ("jump", None), ("", None), ("12 up", "up")],
)  # fmt: skip
def test_parse_rule(action, parsed):
    result = parse_action(action)
    assert (result[1] if result else None) == parsed


def test_an_invalid_action_costs_the_penalty_and_changes_nothing():
    env, place, _ = started(invalid_penalty=0.25)
    env.step(place)
    before = env._observe()
    result = env.step("seven")
    assert not result.valid_action and result.reward == pytest.approx(-0.25)
    assert not result.done and not result.success and result.observation == before
    assert started()[0].step("12").reward == 0.0  # no penalty by default


def test_looking_twice_is_valid_but_wasteful():
    env, place, _ = started()
    first = env.step(place)
    again = env.step(place)
    assert again.valid_action and again.reward == 0.0 and again.observation == first.observation


def test_step_limit_truncates_without_an_answer():
    env, place, _ = started(max_steps=3)
    results = [env.step(action) for action in (place, "jump", place)]
    assert [r.truncated for r in results] == [False, False, True]
    assert not any(r.done for r in results)
    env, _, digit = started(max_steps=1)
    answered = env.step(digit)  # an answer on the last turn ends by the task's rule, not truncation
    assert answered.done and answered.success and not answered.truncated


def test_anchors_are_equal_for_equal_states_whatever_the_order():
    one, place, _ = started(task=5)
    other, _, _ = started(task=5)
    empty = empty_places(place)
    for action in (empty[0], place, "jump", empty[0]):
        a = one.step(action).observation
    for action in (place, empty[0]):
        b = other.step(action).observation
    assert a.anchor == b.anchor and a == b
    assert one.step(empty[1]).observation.anchor != a.anchor


def test_restore_returns_to_a_snapshot():
    env, place, digit = started()
    env.step(empty_places(place)[0])
    state = env.snapshot()
    at_snapshot = env._observe()
    env.step(place)
    env.step("jump")
    assert env.restore(state) == at_snapshot and env._steps == 1
    assert f"{place} {digit}" in env.step(place).observation.text
    again = env.step(digit)
    assert again.success and again.done
    env.restore(state)
    assert env.snapshot() == state  # the snapshot is a value: later steps never changed it


def test_format_example_draws_well_formed_actions():
    rng = random.Random(0)
    examples = {LookupEnv().format_example(rng) for _ in range(300)}
    assert examples == {*PLACES, *DIGITS}
    assert all(parse_action(example) is not None for example in examples)


def test_lookup_is_a_registered_builtin():
    env = make_env("lookup", max_steps=4)
    assert isinstance(env, LookupEnv) and env.max_steps == 4
    assert BUILTIN_ENVIRONMENTS["lookup"] is LookupEnv
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        LookupEnv(max_steps=0)


def test_the_builtin_vocabulary_is_unchanged_by_lookup():
    """The tiny policy's tokenizer (and so the default checkpoint hash) numbers builtin_vocabulary's words
    in order: lookup must add no word and move none (`VOCABULARY_ORDER`)."""
    existing = [*ArithmeticEnv.vocabulary(), *MazeEnv.vocabulary()]
    assert set(LookupEnv.vocabulary()) <= set(existing)
    assert builtin_vocabulary() == list(dict.fromkeys(existing))
    rng = random.Random(1)
    words = set()
    for task in range(40):  # every word lookup writes or reads is in it
        env = LookupEnv()
        words.update(env.reset(task, seed=0).text.split())
        for action in [*PLACES, rng.choice(DIGITS)]:
            words.update(env.step(action).observation.text.split())
            words.add(action)
    assert words <= set(LookupEnv.vocabulary())
