"""Branching rollouts (`creditline.rollout.branching`): restart from a recorded step, by snapshot or by replay."""

import random

import pandas as pd
import pytest

from creditline import ids
from creditline.engines import SamplingParams, TorchEngine
from creditline.envs import make_env
from creditline.envs.base import Observation, Transition
from creditline.rollout.branching import (
    BranchSettings,
    ReplayDivergence,
    choose_points,
    play_branches,
    with_branches,
)
from creditline.rollout.episodes import reset_seed, run_episodes
from schemas.tables import EpisodesTable, StepsTable

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=1, seed=3)


class ReplayOnlyMaze:
    """The maze without snapshot()/restore(): branching must replay it."""

    def __init__(self):
        self._maze = make_env("maze", progress_reward=0.1)
        self.name, self.max_steps, self.instructions = "maze", self._maze.max_steps, self._maze.instructions

    def reset(self, task, seed):
        return self._maze.reset(task, seed)

    def step(self, action):
        return self._maze.step(action)


class CoinFlip:
    """Not deterministic: the observation after a step depends on a process-global random draw."""

    name, max_steps, instructions = "coin", 4, ""
    draws = random.Random(0)

    def reset(self, task, seed):
        self._n = 0
        return Observation("go key left 1 up 1 last none", "start")

    def step(self, action):
        self._n += 1
        side = self.draws.choice(["yes", "no"])
        return Transition(Observation(f"have {side}", f"s{self._n}{side}"), 0.0, False, self._n >= 4, True)


def play(tiny_policy, factory, settings, snapshots=None):
    model, tokenizer = tiny_policy
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    tables = run_episodes(engine, tokenizer, factory, "br", 1, [4, 7], 3, SAMPLING, "plain", snapshots)
    points = choose_points(tables.steps, settings, seed=0, round_=1)
    branches = play_branches(engine, tokenizer, factory, tables.steps, points, settings.continuations, 1,
                             SAMPLING, "plain", lambda t, s: reset_seed(SAMPLING.seed, 1, t, s), snapshots)  # fmt: skip
    return tables, points, with_branches(tables, branches)


def test_continuations_restart_at_the_recorded_step_and_are_linked(tiny_policy):
    settings = BranchSettings(points="every", every=3, continuations=2)
    tables, points, branched = play(tiny_policy, lambda: make_env("maze", progress_reward=0.1), settings, {})
    assert points and all(p.step_idx % 3 == 0 and p.step_idx >= 1 for p in points)
    EpisodesTable.validate(branched.episodes)
    StepsTable.validate(branched.steps)
    conts = branched.episodes.dropna(subset=["branch_of_episode"])
    assert len(conts) == 2 * len(points)
    steps = branched.steps.set_index(["episode_id", "step_idx"])
    for point in points:
        source = steps.loc[(point.episode_id, point.step_idx)]
        for k in range(2):
            first = steps.loc[(ids.branch_episode_id(point.episode_id, point.step_idx, k), 0)]
            assert first["observation"] == source["observation"]  # the same state, the same prompt
            assert first["anchor_key"] == source["anchor_key"]
            assert list(first["prompt_ids"]) == list(source["prompt_ids"])
            assert (
                first["branch_of_episode"] == point.episode_id and first["branch_of_step"] == point.step_idx
            )
    # a continuation plays at most the steps its source had left (the step limit carries over)
    lengths = branched.episodes.set_index("episode_id")["num_steps"]
    for row in conts.itertuples():
        assert row.num_steps <= 16 - row.branch_of_step
    # the round's own episodes are untouched, with null links
    own = branched.episodes[branched.episodes["branch_of_episode"].isna()]
    pd.testing.assert_frame_equal(own.drop(columns=["branch_of_episode", "branch_of_step"]).reset_index(drop=True),
                                  tables.episodes)  # fmt: skip
    assert lengths.index.is_unique


def test_replay_and_snapshot_restart_the_same_state(tiny_policy):
    settings = BranchSettings(points="uniform", per_episode=2, continuations=2)
    snapshots = {}
    tables, points_a, by_snapshot = play(
        tiny_policy, lambda: make_env("maze", progress_reward=0.1), settings, snapshots
    )
    _, points_b, by_replay = play(tiny_policy, ReplayOnlyMaze, settings)
    assert points_a == points_b
    # the snapshot path did run: every step but each episode's first was snapshotted, every point among them
    later = tables.steps[tables.steps["step_idx"] > 0]
    assert set(snapshots) == set(zip(later["episode_id"], later["step_idx"], strict=True))
    assert {(p.episode_id, p.step_idx) for p in points_a} <= set(snapshots)
    pd.testing.assert_frame_equal(by_snapshot.steps, by_replay.steps)


def test_a_diverging_replay_is_refused_naming_the_episode_and_step(tiny_policy):
    settings = BranchSettings(points="every", every=2, continuations=1)
    with pytest.raises(
        ReplayDivergence,
        match=r"episode br:r1:t\d+:s\d did not replay: at step \d the environment gave observation",
    ):
        play(tiny_policy, CoinFlip, settings)


def test_branching_is_deterministic(tiny_policy):
    settings = BranchSettings(points="entropy", per_episode=2, continuations=2)
    factory = lambda: make_env("maze", progress_reward=0.1)  # noqa: E731
    first, second = play(tiny_policy, factory, settings, {})[2], play(tiny_policy, factory, settings, {})[2]
    pd.testing.assert_frame_equal(first.steps, second.steps)


def steps_table(lengths: dict[str, list[list[float]]]) -> pd.DataFrame:
    """episode -> per step completion log-probs (one token each unless the list is longer)."""
    rows = []
    for episode, steps in lengths.items():
        for t, logprobs in enumerate(steps):
            rows.append({"episode_id": episode, "step_idx": t, "completion_ids": [1] * len(logprobs),
                         "completion_logprobs": logprobs})  # fmt: skip
    return pd.DataFrame(rows)


def test_entropy_points_are_the_most_surprising_steps():
    steps = steps_table({"a": [[-0.1], [-2.0], [-0.5], [-3.0]], "b": [[-1.0], [-0.2], [-0.2]]})
    points = choose_points(steps, BranchSettings(points="entropy", per_episode=1), 0, 1)
    assert [(p.episode_id, p.step_idx) for p in points] == [
        ("a", 3),
        ("b", 1),
    ]  # step 0 never; ties → earlier


def test_every_and_uniform_points():
    steps = steps_table({"a": [[-1.0]] * 7})
    every = choose_points(steps, BranchSettings(points="every", every=3), 0, 1)
    assert [p.step_idx for p in every] == [3, 6]
    uniform = choose_points(steps, BranchSettings(points="uniform", per_episode=2), 0, 1)
    assert len(uniform) == 2 and all(1 <= p.step_idx <= 6 for p in uniform)
    assert uniform == choose_points(
        steps.sample(frac=1, random_state=1), BranchSettings(points="uniform", per_episode=2), 0, 1
    )


def test_the_token_budget_caps_the_planned_continuations():
    # a: 4 steps of 2 tokens; b: 3 steps of 1 token. K = 2: a point at step t costs 2 × tokens from t on
    steps = steps_table({"a": [[-1.0, -1.0]] * 4, "b": [[-1.0]] * 3})
    settings = BranchSettings(points="every", every=1, continuations=2, token_budget=14)
    points = choose_points(steps, settings, 0, 1)
    # first points of each episode first (a@1: 12, b@1: 4 → 16 > 14, so b@1 is skipped), then b@2: 2
    assert sum(p.planned_tokens for p in points) <= 14
    assert [(p.episode_id, p.step_idx, p.planned_tokens) for p in points] == [("a", 1, 12), ("b", 2, 2)]


BRANCHED = {"branching": {"points": "every"}, "advantages": {"estimator": "mc_branch", "params": {}}}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"advantages": {"estimator": "grpo", "params": {}}},
            'branching.points = "every": needs an estimator that reads branches (mc_branch, spo_tree); "grpo" would take',
        ),
        (
            {"advantages": {"estimator": "mc_branch", "params": {}, "sample_filter": "prof"}},
            'branching.points = "every": cannot be combined with sample_filter = "prof"',
        ),
        (
            {"verifiers": {"env_id": "some-env"}},
            'branching.points = "every": cannot branch rollouts a verifiers environment plays',
        ),
    ],
    ids=["estimator", "prof", "verifiers"],
)
def test_branching_is_refused_where_continuations_would_be_misread(overrides, message):
    from creditline.config import from_dict
    from creditline.config.checks import ConfigError

    with pytest.raises(ConfigError) as refused:
        from_dict({**BRANCHED, **overrides})
    assert any(line.startswith(message) for line in refused.value.problems), refused.value.problems
    assert from_dict(BRANCHED).branching.points == "every"
