"""Branching rollouts: restart episodes from intermediate steps and sample K continuations from each.

A group's G episodes all start from the same state, so they estimate the value of the start state only.
Branching gives later states the same treatment (VinePPO's Monte-Carlo values, arXiv 2410.01679; SPO's
tree segments, arXiv 2505.23564; TreeRL, arXiv 2506.11902; ARPO's entropy-triggered branches, arXiv
2507.19849): after the round's episodes are played, some of their steps are chosen as branch points, the
environment is put back in the state the step was taken in, and K continuations are played from there to
the end with the same policy. Each continuation resamples the action at the branch point, so the K + 1
returns from that state (the source's own and the continuations') are samples of Q(s_t, ·) under the
policy, and their mean is a Monte-Carlo estimate of V(s_t) (`creditline.credit.advantages.branch`).

Restarting from a step. An environment that offers `snapshot()` (an opaque copy of its state) and
`restore(state) -> Observation` is snapshotted before every step of the round's play and restored from
there. Any other environment is replayed: reset with the episode's seed, then given the recorded actions
one by one. Replaying is only valid for a deterministic environment, so every replayed observation, reward
and anchor is compared with the recorded one; the first difference refuses the round (`ReplayDivergence`),
naming the episode and the step. The prompt is rebuilt the same way (a chat conversation by adding the
recorded completions turn by turn) and must equal the recorded prompt token for token.

Branch points (`BranchSettings.points`), chosen on the round's own episodes (never on a branch):
    every     steps k, 2k, 3k, … of each episode (`every` = k)
    uniform   `per_episode` steps of each episode, drawn uniformly without replacement (seeded)
    entropy   the `per_episode` steps whose sampled completion had the highest surprisal −mean log μ(y)
              (ARPO and TreeRL branch where the policy is uncertain; the sampled tokens' surprisal is an
              unbiased estimate of the sampling distribution's entropy, from the log-probs engines return)
Step 0 is never a branch point: the group's G episodes already sample it. A point costs about K times the
tokens its source spent from that step on; points are taken in order (each episode's first point before any
episode's second, then by priority) while the planned cost fits `token_budget` (0: no limit).

Continuations are ordinary episodes of the round: episode_id `<source>:b<step>.<k>`, the source's group,
task and sample, step_idx from 0 at the branch point, and the link `branch_of_episode`, `branch_of_step`
on their episode and step rows (the depth of a continuation's step in the source's episode is
branch_of_step + step_idx).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np
import pandas as pd

from creditline import ids
from creditline.config.stage_settings import BranchSettings
from creditline.engines.base import Completion, Engine, SamplingParams
from creditline.envs.base import Environment, Observation, SnapshotEnvironment
from creditline.rollout.conversation import Conversation
from creditline.rollout.episodes import (
    LiveEpisode,
    RolloutTables,
    next_prompt,
    play,
    resolve_prompt_format,
    start_episode,
)


def can_snapshot(env: Environment) -> TypeGuard[SnapshotEnvironment]:
    """True when `env` offers snapshot() and restore(state) (else branching replays recorded actions)."""
    return callable(getattr(env, "snapshot", None)) and callable(getattr(env, "restore", None))


class ReplayDivergence(ValueError):
    """Replaying recorded actions did not reproduce the recorded episode: the environment is not
    deterministic, and restarting it from a step would not restart the episode that was played."""


@dataclass(frozen=True)
class BranchPoint:
    episode_id: str
    step_idx: int
    planned_tokens: int
    """K × the completion tokens the source spent from this step to its end."""


def surprisal(steps: pd.DataFrame) -> np.ndarray:
    """−mean log μ(y) over each step's completion tokens (S,): a one-sample estimate of the entropy of the
    sampling distribution at that step (its expectation under μ is the entropy)."""
    return -steps["completion_logprobs"].map(lambda lp: float(np.mean(lp)) if len(lp) else 0.0).to_numpy()


def choose_points(steps: pd.DataFrame, settings: BranchSettings, seed: int, round_: int) -> list[BranchPoint]:
    """The round's branch points, in the order they are taken, within the token budget.

    `steps`: the round's own step rows (no continuations). Deterministic: it depends on the rows' ids and
    values and on (seed, round), never on row order.
    """
    if not settings.enabled or steps.empty:
        return []
    rows = steps.sort_values(["episode_id", "step_idx"], kind="stable").reset_index(drop=True)
    tokens = rows["completion_ids"].map(len).to_numpy()
    # tokens from step t to the end of its episode: a suffix sum within each episode
    to_end = rows.assign(tokens=tokens)[::-1].groupby("episode_id", sort=False)["tokens"].cumsum()[::-1]
    rows = rows.assign(to_end=to_end.to_numpy(), surprisal=surprisal(rows))
    candidates = rows[rows["step_idx"] >= 1]
    chosen: list[pd.DataFrame] = []
    for episode_id, episode in candidates.groupby("episode_id", sort=True):
        if settings.points == "every":
            picked = episode[episode["step_idx"] % settings.every == 0].sort_values("step_idx")
        elif settings.points == "uniform":
            rng = random.Random(ids.derive_seed(seed, round_, "branch-points", episode_id))
            picked = episode.loc[
                sorted(rng.sample(list(episode.index), min(settings.per_episode, len(episode))))
            ]
        else:  # entropy: the most surprising steps first, ties to the earlier step
            picked = episode.sort_values(["surprisal", "step_idx"], ascending=[False, True], kind="stable")
            picked = picked.head(settings.per_episode)
        chosen.append(picked.assign(rank=np.arange(len(picked))))
    if not chosen:
        return []
    order = pd.concat(chosen).sort_values(
        ["rank", "surprisal", "episode_id", "step_idx"], ascending=[True, False, True, True], kind="stable"
    )
    points, spent = [], 0
    for row in order.itertuples():
        cost = settings.continuations * int(row.to_end)
        if settings.token_budget and spent + cost > settings.token_budget:
            continue
        spent += cost
        points.append(BranchPoint(row.episode_id, int(row.step_idx), cost))
    return sorted(points, key=lambda p: (p.episode_id, p.step_idx))


def restart(
    env_factory: Callable[[], Environment],
    episode: pd.DataFrame,
    step_idx: int,
    reset_seed: int,
    snapshot: object | None = None,
) -> tuple[Environment, Observation]:
    """A fresh environment in the state of `episode`'s step `step_idx`, and that state's observation.

    `episode`: the source's step rows sorted by step_idx. With a `snapshot` the environment is restored;
    otherwise it is reset with `reset_seed` and given the recorded actions. Either way what it shows is
    checked against the recording (`ReplayDivergence` at the first difference).
    """
    recorded = episode.reset_index(drop=True)
    source = recorded.at[0, "episode_id"]
    env = env_factory()
    if snapshot is not None:
        assert can_snapshot(env), "a snapshot is taken only of an environment that can restore it"
        observation = env.restore(snapshot)
    else:
        observation = env.reset(int(recorded.at[0, "task_id"]), reset_seed)
        for k in range(step_idx):
            _check_observation(source, k, recorded, observation)
            transition = env.step(recorded.at[k, "action"])
            _check(source, k, "reward", float(recorded.at[k, "step_reward"]), float(transition.reward))
            observation = transition.observation
    _check_observation(source, step_idx, recorded, observation)
    return env, observation


def recorded_prompt(
    env: Environment, episode: pd.DataFrame, step_idx: int, tokenizer, prompt_format: str
) -> tuple[list[int], Conversation | None]:
    """The prompt ids (and chat conversation) the policy saw at `episode`'s step `step_idx`, rebuilt from the
    recorded observations and completions by the rollout's own rules, and checked against the recording."""
    recorded = episode.reset_index(drop=True)
    first = 0 if prompt_format == "chat" else step_idx  # only a chat prompt holds the history
    live = start_episode(
        env,
        Observation(recorded.at[first, "observation"], ""),
        tokenizer,
        prompt_format,
        episode_id="",
        group_id="",
        task_id=0,
        sample_idx=0,
    )
    for k in range(first, step_idx):
        completion = Completion(
            list(recorded.at[k, "completion_ids"]),
            list(recorded.at[k, "completion_logprobs"]),
            recorded.at[k, "finish_reason"],
        )
        live.prompt_ids = next_prompt(
            live, tokenizer, completion, Observation(recorded.at[k + 1, "observation"], "")
        )
    _check(
        recorded.at[0, "episode_id"],
        step_idx,
        "prompt",
        list(recorded.at[step_idx, "prompt_ids"]),
        live.prompt_ids,
    )
    return live.prompt_ids, live.conversation


def _check_observation(source: str, step_idx: int, recorded: pd.DataFrame, observation: Observation) -> None:
    _check(source, step_idx, "observation", recorded.at[step_idx, "observation"], observation.text)
    _check(
        source, step_idx, "anchor", recorded.at[step_idx, "anchor_key"], ids.anchor_key(observation.anchor)
    )


def _check(episode_id: str, step_idx: int, what: str, recorded, replayed) -> None:
    if recorded != replayed:
        raise ReplayDivergence(
            f"branching: episode {episode_id} did not replay: at step {step_idx} the environment gave "
            f"{what} {_short(replayed)} where the recording has {_short(recorded)}; restarting from a step "
            "needs a deterministic environment, or one with snapshot()/restore()"
        )


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def play_branches(
    engine: Engine,
    tokenizer,
    env_factory: Callable[[], Environment],
    steps: pd.DataFrame,
    points: list[BranchPoint],
    continuations: int,
    round_: int,
    sampling: SamplingParams,
    prompt_format: str,
    reset_seed: Callable[[int, int], int],
    snapshots: dict[tuple[str, int], object] | None = None,
) -> RolloutTables:
    """The `continuations` of every point, played to the end in one batch (with their own turn seeds).

    `steps`: the round's own step rows; `reset_seed(task, sample)`: the seed its episode was reset with.
    """
    prompt_format = resolve_prompt_format(tokenizer, prompt_format)
    wanted = {point.episode_id for point in points}
    by_episode = {
        eid: rows.sort_values("step_idx")
        for eid, rows in steps[steps["episode_id"].isin(wanted)].groupby("episode_id")
    }
    starts = []
    for point in points:
        episode = by_episode[point.episode_id]
        task, sample = int(episode["task_id"].iloc[0]), int(episode["sample_idx"].iloc[0])
        snapshot = None if snapshots is None else snapshots.get((point.episode_id, point.step_idx))
        prompt = None  # rebuilt and checked once a point; each continuation plays on in a copy
        for k in range(continuations):
            env, observation = restart(  # each continuation its own environment, in the state of the step
                env_factory, episode, point.step_idx, reset_seed(task, sample), snapshot
            )
            prompt = prompt or recorded_prompt(env, episode, point.step_idx, tokenizer, prompt_format)
            prompt_ids, conversation = list(prompt[0]), copy.deepcopy(prompt[1])
            starts.append(
                LiveEpisode(
                    env=env,
                    episode_id=ids.branch_episode_id(point.episode_id, point.step_idx, k),
                    group_id=episode["group_id"].iloc[0],
                    task_id=task,
                    sample_idx=sample,
                    observation=observation,
                    prompt_ids=prompt_ids,
                    conversation=conversation,
                    history=prompt_format == "chat",
                    branch_of=(point.episode_id, point.step_idx),
                )
            )
    return play(engine, tokenizer, starts, round_, sampling, ("branch",))


def with_branches(tables: RolloutTables, branches: RolloutTables) -> RolloutTables:
    """The round's tables with the continuations appended; the round's own rows get null links."""
    if branches.episodes.empty:
        return tables
    episodes = pd.concat([tables.episodes, branches.episodes], ignore_index=True)
    steps = pd.concat([tables.steps, branches.steps], ignore_index=True)
    for frame in (episodes, steps):
        frame["branch_of_episode"] = (
            frame["branch_of_episode"].astype(object).where(frame["branch_of_episode"].notna(), None)
        )
        frame["branch_of_step"] = frame["branch_of_step"].astype("Int64")
    return RolloutTables(episodes=episodes, steps=steps)


def branch_links(steps: pd.DataFrame) -> list[tuple[str, str, int]]:
    """(episode_id, branch_of_episode, branch_of_step) of every continuation in a steps table, sorted."""
    if "branch_of_episode" not in steps:
        return []
    firsts = steps[steps["branch_of_episode"].notna() & (steps["step_idx"] == 0)]
    links = zip(firsts["episode_id"], firsts["branch_of_episode"], firsts["branch_of_step"], strict=True)
    return sorted((str(e), str(src), int(t)) for e, src, t in links)


def branch_summary(steps: pd.DataFrame, shown: int = 20) -> dict:
    """What a person checks of a branched round (empty without branches): points, continuations, the share
    of sampled completion tokens the continuations took, and the first `shown` links as a Markdown table."""
    links = branch_links(steps)
    if not links:
        return {}
    tokens = steps["completion_ids"].map(len)
    in_branches = steps["branch_of_episode"].notna()
    rows = "\n".join(f"| {e} | {src} | {t} |" for e, src, t in links[:shown])
    more = f"\n\n… and {len(links) - shown} more" if len(links) > shown else ""
    return {
        "branch_points": len({(src, t) for _, src, t in links}),
        "continuations": len(links),
        "continuation_token_share": float(tokens[in_branches].sum() / max(int(tokens.sum()), 1)),
        "links": f"| continuation | branch of episode | at step |\n|---|---|---|\n{rows}{more}",
    }
