"""Rubrics: named, weighted criteria that turn stored rollouts into rewards.

A criterion has an explicit signature and a level:

- a *step* criterion maps the steps table (S rows) to one value per step row, `fn(steps, **params) -> (S,)`;
- an *episode* criterion maps the episodes table (E rows) and the steps table to one value per
  episode, `fn(episodes, steps, **params) -> (E,)`, aligned with `episodes` rows.

Scoring gives every criterion its own column, then combines them (verifiers' `Rubric`, with explicit
arguments instead of injection by introspection):

    step_reward[s]     = Σ_{k step}  w_k · c_k[s]
    episode_reward[e]  = Σ_{k step}  w_k · Σ_{s ∈ e} c_k[s]  +  Σ_{k episode} w_k · c_k[e]

One exception, for rounds imported from verifiers (episodes with `source_components`): the built-in
`env_reward` criterion's episode value is the episode's `env_return`, verifiers' reward R, not the sum of
its step rewards. verifiers scores a rollout on R alone; a step reward its environment set is a per-step
value (its fill writes R on every step), kept as `step_reward` for estimators that read step rewards but
never added into the return (`creditline.interop.imported_rollouts`). Generated rounds are unaffected (their
`env_return` is Σ step_reward anyway), and the rubric's version does not change.

A `RubricGroup` sums its members' step and episode rewards. Advantages are computed later, once,
from these totals: a member's partial reward never reaches an advantage (the RubricGroup bug of
verifiers PR #941, where the first child's partial reward was frozen into every step's advantage).

A rubric's version is a hash of its definition: criteria names, levels, weights, parameters and each
function's source code. Editing a criterion's code yields a new version, so re-scored data can sit
beside the old without ambiguity.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from creditline.ids import canonical_hash


@dataclass(frozen=True)
class Criterion:
    name: str
    fn: Callable[..., np.ndarray]
    level: Literal["step", "episode"]
    weight: float = 1.0
    """0 makes it a metric: recorded as a column, not part of the reward."""
    params: Mapping[str, float] = field(default_factory=dict)

    def definition(self) -> dict:
        return {
            "name": self.name,
            "level": self.level,
            "weight": self.weight,
            "params": dict(self.params),
            "source": inspect.getsource(self.fn),
        }


@dataclass(frozen=True)
class Rubric:
    name: str
    criteria: tuple[Criterion, ...]

    @property
    def version(self) -> str:
        """`<name>-<8 hex>`: a stable hash of the whole definition (also a valid partition key)."""
        digest = canonical_hash([c.definition() for c in self.criteria], 8, ensure_ascii=True, default=str)
        return f"{self.name}-{digest}"

    def score(self, episodes: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
        return score(self, episodes, steps)


@dataclass(frozen=True)
class RubricGroup:
    """Several rubrics scored side by side; the group's rewards are the sums of its members'."""

    name: str
    members: tuple[Rubric, ...]

    @property
    def version(self) -> str:
        digest = canonical_hash([m.version for m in self.members], 8, ensure_ascii=True, default=str)
        return f"{self.name}-{digest}"

    def score(self, episodes: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
        return score(self, episodes, steps)


def _criterion_values(rubric: Rubric, episodes: pd.DataFrame, steps: pd.DataFrame, prefix: str):
    """Per-criterion columns (episode level, aligned with `steps`) and the rubric's two reward arrays."""
    step_episode = pd.Index(episodes["episode_id"]).get_indexer(
        steps["episode_id"]
    )  # (S,) row of each step's episode
    if (step_episode < 0).any():
        missing = steps["episode_id"].to_numpy()[step_episode < 0][0]
        raise ValueError(f"steps.episode_id {missing!r} has no row in episodes")
    columns: dict[str, np.ndarray] = {}
    step_reward = np.zeros(len(steps))
    episode_reward = np.zeros(len(episodes))
    for criterion in rubric.criteria:
        if criterion.level == "step":
            per_step = np.asarray(criterion.fn(steps, **criterion.params), dtype=np.float64)  # (S,)
            _check_length(rubric, criterion, per_step, len(steps), "steps")
            per_episode = np.bincount(step_episode, weights=per_step, minlength=len(episodes))  # (E,)
            if criterion.fn is env_reward and "source_components" in episodes:  # imported: R, see docstring
                per_episode = episodes["env_return"].to_numpy(dtype=np.float64)  # (E,)
            step_reward += criterion.weight * per_step
        else:
            per_episode = np.asarray(criterion.fn(episodes, steps, **criterion.params), dtype=np.float64)
            _check_length(rubric, criterion, per_episode, len(episodes), "episodes")
        episode_reward += criterion.weight * per_episode
        columns[f"criterion.{prefix}{criterion.name}"] = per_episode[step_episode]
    return columns, step_reward, episode_reward[step_episode]


def _check_length(rubric, criterion, values, expected, table):
    if values.shape != (expected,):
        raise ValueError(
            f"rubric {rubric.name!r} criterion {criterion.name!r} returned shape {values.shape}, "
            f"expected ({expected},) aligned with the {table} table"
        )
    if not np.isfinite(values).all():
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ValueError(
            f"rubric {rubric.name!r} criterion {criterion.name!r} "
            f"gave a non-finite value at {table} row {row}"
        )


def score(rubric: Rubric | RubricGroup, episodes: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The scores table: one row per step row, aligned with `steps`.

    Columns: episode_id, group_id, step_idx, rubric_version, step_reward (the rubric's per-step
    reward), episode_reward (the rubric's total for the episode, on each of its rows) and one
    `criterion.<name>` column per criterion with its episode-level value.
    """
    members = rubric.members if isinstance(rubric, RubricGroup) else (rubric,)
    columns: dict[str, np.ndarray] = {}
    step_reward = np.zeros(len(steps))
    episode_reward = np.zeros(len(steps))
    for member in members:
        prefix = f"{member.name}." if isinstance(rubric, RubricGroup) else ""
        member_columns, member_step, member_episode = _criterion_values(member, episodes, steps, prefix)
        columns.update(member_columns)
        step_reward += member_step
        episode_reward += member_episode
    if "source_components" in episodes:
        columns.update(source_component_columns(episodes, steps))
    return pd.DataFrame(
        {
            "episode_id": steps["episode_id"].to_numpy(),
            "group_id": steps["group_id"].to_numpy(),
            "step_idx": steps["step_idx"].to_numpy(),
            "rubric_version": rubric.version,
            "step_reward": step_reward,
            "episode_reward": episode_reward,
            **columns,
        }
    )


def source_component_columns(episodes: pd.DataFrame, steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """An imported round's own reward components and metrics (`episodes.source_components`, JSON) as
    `criterion.source.<name>` columns aligned with `steps`: recorded beside the rubric's criteria, never
    part of its reward. An episode whose source did not score a component (an error) reads NaN there."""
    parsed = [json.loads(text) if isinstance(text, str) else {} for text in episodes["source_components"]]
    names = sorted({name for components in parsed for name in components})
    step_episode = pd.Index(episodes["episode_id"]).get_indexer(steps["episode_id"])  # (S,)
    return {
        f"criterion.source.{name}": np.array([c.get(name, np.nan) for c in parsed], dtype=np.float64)[
            step_episode
        ]
        for name in names
    }


# --- built-in criteria -----------------------------------------------------------------------------


def env_reward(steps: pd.DataFrame) -> np.ndarray:
    """The environment's own reward for each step, passed through."""
    return steps["step_reward"].to_numpy(dtype=np.float64)


def step_cost(steps: pd.DataFrame) -> np.ndarray:
    """−1 for every step taken: with a small weight, a preference for shorter solutions."""
    return -np.ones(len(steps))


def invalid_action(steps: pd.DataFrame) -> np.ndarray:
    """1 for every completion the environment could not parse as an action."""
    return (~steps["valid_action"].to_numpy(dtype=bool)).astype(np.float64)


def success(episodes: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """1 if the episode solved its task."""
    return episodes["success"].to_numpy(dtype=np.float64)


RUBRICS: dict[str, Rubric | RubricGroup] = {
    "env": Rubric(
        "env", (Criterion("env_reward", env_reward, "step"), Criterion("success", success, "episode", 0.0))
    ),
    "env-efficient": Rubric(
        "env-efficient",
        (
            Criterion("env_reward", env_reward, "step"),
            Criterion("step_cost", step_cost, "step", weight=0.02),
            Criterion("success", success, "episode", 0.0),
        ),
    ),
}
"""The built-in rubrics, by name. A config may also name a plugin's rubric or one by import path
(`creditline.credit.rubric_registry`)."""
