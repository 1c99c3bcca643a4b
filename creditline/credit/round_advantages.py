"""Stage 3 of a round, the step advantages, as both the round and `creditline advantages` compute them.

The round's tables are joined one way, on (episode_id, step_idx), one row to one row (`join_on_step`); the
advantage of every joined row comes from `estimate`: the estimator over the episodes the sample filter
keeps, then the source's own advantage wherever an imported step carries one (verifiers' fill-if-None).
`step_advantages` is the round's advantages table built on it; `creditline advantages` calls `estimate` on a
user's table, so the command computes what a round computes (tests/core/test_advantages_command.py). The
same joins give the steps their model rewards (`with_model_rewards`) and the advantages their per-token
form (`with_token_advantages`), for the trainer, the exports and the credit picture.

Nothing here imports torch: the command stays a fraction of a second to start.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from creditline.config import AdvantageSettings
from creditline.credit.advantages import (
    completion_advantages,
    compute,
    fill_preset,
    input_columns,
    params_hash,
)
from creditline.credit.advantages.model_reward import MODEL_REWARD_COLUMN
from creditline.credit.sample_filter import prof_keep

STEP_KEY = ["episode_id", "step_idx"]
"""What identifies a step row in every round table."""
ID_COLUMNS = ("episode_id", "group_id", "anchor_key")
"""The ids the estimators group by. The stages that estimate read them as categoricals straight from the
steps and scores files (`creditline.store.read_parquet(path, categories=ID_COLUMNS)`), so the join and every
estimator use Parquet's dictionary codes and no id string is hashed (docs/advantages.md, Performance); the
tables they write carry the ids as plain strings again (`with_string_ids`)."""
REWARD_COLUMNS = ["step_reward", "episode_reward"]
"""What a scores table gives the estimator."""


def join_on_step(left: pd.DataFrame, right: pd.DataFrame, columns: list[str], what: str) -> pd.DataFrame:
    """`left` with `columns` of `right` joined on (episode_id, step_idx), one to one, every left row kept.

    `what` names `right` in the error when it does not cover every step of `left`. Where both sides read
    the episode ids as categoricals, `right`'s are recoded to `left`'s categories (its K distinct ids
    looked up, not its S rows), so the join matches codes and the result keeps `left`'s categorical; its
    rows of episodes `left` does not have are dropped first (recoded they would all be null, and equal).
    """
    right = right[[*STEP_KEY, *columns]]
    left_ids, right_ids = left["episode_id"], right["episode_id"]
    if isinstance(left_ids.dtype, pd.CategoricalDtype) and isinstance(right_ids.dtype, pd.CategoricalDtype):
        recoded = right_ids.cat.set_categories(left_ids.cat.categories)
        right = right.assign(episode_id=recoded)[recoded.notna().to_numpy()]
    joined = left.merge(right, on=STEP_KEY, how="inner", validate="one_to_one")
    if len(joined) != len(left):
        raise ValueError(f"{what} cover {len(joined)} of {len(left)} step rows")
    return joined


def with_string_ids(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its categorical `ID_COLUMNS` as plain string columns (the others unchanged): what the
    tables on disk hold, and what code that sorts or groups by an id expects (a categorical sorts by its
    categories' order and groups over categories no row has)."""
    categorical = [c for c in ID_COLUMNS if c in frame and isinstance(frame[c].dtype, pd.CategoricalDtype)]
    return frame.astype({c: object for c in categorical}) if categorical else frame


def reads_model_rewards(estimator: str) -> bool:
    """True when `estimator` reads a step-reward model's values (prime, spa: the round's `reward_model`)."""
    return MODEL_REWARD_COLUMN in input_columns(estimator)


def with_model_rewards(steps: pd.DataFrame, rewards: pd.DataFrame) -> pd.DataFrame:
    """`steps` plus the `model_reward` column of `fit_reward_model`'s table (`creditline.round`)."""
    return join_on_step(steps, rewards, [MODEL_REWARD_COLUMN], "model rewards")


def with_token_advantages(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (with `advantage` and `completion_ids`) plus `completion_advantages`: the step's advantage on
    each of its completion tokens, (len(completion_ids),) per row (verifiers PR #941). Where `rows` carry
    an imported step's non-empty `preset_completion_advantages` (the source's per-token credit), those
    values are its `completion_advantages` unchanged, as long as its `advantage` is their mean (the preset
    `step_advantages` keeps); an advantage that differs (set by something else) is repeated instead."""
    lengths = rows["completion_ids"].map(len).to_numpy()
    advantage = rows["advantage"].to_numpy(dtype=np.float64)  # (S,)
    per_token = [a.tolist() for a in completion_advantages(advantage, lengths)]
    if "preset_completion_advantages" in rows:
        for i, preset in enumerate(rows["preset_completion_advantages"]):
            if preset is None or isinstance(preset, float) or len(preset) == 0:
                continue  # the source assigned no per-token credit (NaN: a row of a round without any)
            if not np.isclose(np.mean(preset), advantage[i], rtol=0, atol=1e-9):
                continue  # the advantages table overrode the source's credit: its scalar wins
            if len(preset) != lengths[i]:
                raise ValueError(
                    f"row {i}: {len(preset)} preset completion advantages for {lengths[i]} tokens"
                )
            per_token[i] = [float(v) for v in preset]
    return rows.assign(completion_advantages=per_token)


def estimate(
    joined: pd.DataFrame, settings: AdvantageSettings, episodes: pd.DataFrame | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The advantage of every row of `joined` (step rows with their rewards): (advantage (S,), kept (S,)).

    With a sample filter (`settings.sample_filter`, which reads the `episodes`' success) the estimator sees
    the kept episodes only; a dropped episode's rows get advantage 0 and kept False, and the trainer skips
    them. Where a row carries the advantage its source assigned (`preset_advantage`, NaN where none), that
    value is kept and the estimator's fills the rest (`fill_preset`).
    """
    kept = np.ones(len(joined), dtype=bool)
    if settings.sample_filter == "prof":
        if episodes is None:
            raise ValueError("the prof sample filter needs the round's episodes (their success)")
        plain = with_string_ids(joined[["episode_id", "group_id", "step_reward"]])
        kept = prof_keep(plain, episodes, settings.filter_remove).reindex(plain["episode_id"]).to_numpy()
    advantage = np.zeros(len(joined))
    advantage[kept] = compute(settings.estimator, joined[kept], **settings.params)  # (S_kept,)
    if "preset_advantage" in joined:
        advantage = fill_preset(joined["preset_advantage"].to_numpy(dtype=float), advantage)
    return advantage, kept


def step_advantages(
    steps: pd.DataFrame,
    scores: pd.DataFrame,
    settings: AdvantageSettings,
    episodes: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The round's advantages table: one advantage per step row (`estimate`), computed once over the round's
    steps joined with its scores, with the rubric version, estimator, parameters' hash and completion length.
    An imported round's steps may carry the advantage their source assigned (`preset_advantage`): it is kept.
    """
    preset = ["preset_advantage"] if "preset_advantage" in steps else []
    extra = [name for name in input_columns(settings.estimator) if name in steps]
    columns = ["episode_id", "group_id", "step_idx", "anchor_key", "completion_ids", *preset, *extra]
    joined = join_on_step(steps[columns], scores, ["rubric_version", *REWARD_COLUMNS], "scores")
    advantage, kept = estimate(joined, settings, episodes)
    ids = with_string_ids(joined[["episode_id", "group_id"]])
    table = pd.DataFrame(
        {
            "episode_id": ids["episode_id"],
            "group_id": ids["group_id"],
            "step_idx": joined["step_idx"],
            "rubric_version": joined["rubric_version"],
            "estimator": settings.estimator,
            "params_hash": params_hash(settings.estimator, settings.params),
            "advantage": advantage,
            "completion_length": joined["completion_ids"].map(len).to_numpy(),
        }
    )
    return table.assign(kept=kept) if settings.sample_filter != "none" else table
