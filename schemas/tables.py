"""The data contract as pandera DataFrameModels (see ARCHITECTURE.md, "Data contract").

Ids are explicit columns and nothing relies on row order: uniqueness of (episode_id, step_idx) and
contiguity of `step_idx` are checked, not assumed. List-valued columns (token ids, log-probs,
per-token advantages) are object columns whose element lengths are checked against each other.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.text import Text

STOP_REASONS = ["success", "done", "step_limit", "context_limit"]
FINISH_REASONS = ["stop", "length"]


def row_check(error: str):
    """A check over whole rows (`pa.dataframe_check`) that judges every row, rows null everywhere included.

    With pandera's default (`ignore_na=True`), each such check also computed `isna` over the whole table,
    every column of it (the token-id lists element by element), to let a row pass that is null everywhere: a
    row no column of these tables allows anyway."""
    return pa.dataframe_check(error=error, ignore_na=False)


def _lengths(values: pd.Series) -> np.ndarray:
    return np.fromiter(map(len, values), dtype=np.int64, count=len(values))


_HEX_KEY = re.compile(r"[0-9a-f]{16}")
_HEX_KEYS = re.compile(r"[0-9a-f]{16}(?:\n[0-9a-f]{16})*")


def _hex_keys(values: pd.Series) -> pd.Series:
    """Whether each value is 16 lowercase hex digits (an anchor key), judged in one regex pass over the
    column joined by newlines, and value by value only where that pass fails. The pass finds no newline inside
    a key: it matches only blocks of 16 digits, and n values joined are 17n − 1 characters only if they are n
    blocks."""
    try:
        joined = "\n".join(values)
    except TypeError:  # a value that is not a string
        joined = None
    if joined is not None and len(joined) == 17 * len(values) - 1 and _HEX_KEYS.fullmatch(joined):
        return pd.Series(True, index=values.index)
    return pd.Series(
        [isinstance(v, str) and _HEX_KEY.fullmatch(v) is not None for v in values], index=values.index
    )


def _branch_link_complete(df: pd.DataFrame) -> pd.Series:
    if "branch_of_episode" not in df and "branch_of_step" not in df:
        return pd.Series(True, index=df.index)
    if "branch_of_episode" not in df or "branch_of_step" not in df:
        return pd.Series(False, index=df.index)
    return df["branch_of_episode"].isna() == df["branch_of_step"].isna()


class EpisodesTable(pa.DataFrameModel):
    round: Series[int] = pa.Field(ge=0)
    episode_id: Series[Text] = pa.Field(unique=True)
    group_id: Series[Text]
    task_id: Series[int] = pa.Field(ge=0)
    sample_idx: Series[int] = pa.Field(ge=0)
    num_steps: Series[int] = pa.Field(ge=1)
    success: Series[bool]
    env_return: Series[float] = pa.Field(nullable=False)
    stop_reason: Series[Text] = pa.Field(isin=STOP_REASONS)
    source_components: Series[Text] | None
    """Imported rounds only: the source rubric's reward components and metrics, a JSON object of
    name → value (`creditline.interop.imported_rollouts`)."""
    branch_of_episode: Series[Text] | None = pa.Field(nullable=True)
    """Branched rounds only: the episode a continuation restarted from; null on the round's own episodes
    (`creditline.rollout.branching`)."""
    branch_of_step: Series[pd.Int64Dtype] | None = pa.Field(nullable=True, ge=1)
    """Branched rounds only: the step of `branch_of_episode` it restarted from; null with it."""

    class Config:
        strict = True
        coerce = True

    @row_check(error="branch_of_episode and branch_of_step must be null together")
    def branch_link(cls, df: pd.DataFrame) -> pd.Series:
        return _branch_link_complete(df)


class StepsTable(pa.DataFrameModel):
    round: Series[int] = pa.Field(ge=0)
    episode_id: Series[Text]
    group_id: Series[Text]
    task_id: Series[int] = pa.Field(ge=0)
    sample_idx: Series[int] = pa.Field(ge=0)
    step_idx: Series[int] = pa.Field(ge=0)
    observation: Series[Text]
    action: Series[Text]
    anchor_key: Series[Text]
    prompt_ids: Series[object]
    completion_ids: Series[object]
    completion_logprobs: Series[object]
    step_reward: Series[float] = pa.Field(nullable=False)
    valid_action: Series[bool]
    done: Series[bool]
    truncated: Series[bool]
    finish_reason: Series[Text] | None = pa.Field(isin=FINISH_REASONS)
    """Why the completion ended: "stop" (EOS) or "length" (cut at max_new_tokens). Absent in rounds
    written before it was recorded."""
    preset_advantage: Series[float] | None = pa.Field(nullable=True)
    """Imported rounds only: the advantage the source assigned to the step; NaN where it assigned none. The
    mean of `preset_completion_advantages` where the source assigned per-token ones."""
    preset_completion_advantages: Series[object] | None
    """Imported rounds only: the per-token advantages the source assigned (verifiers v1 node `advantages`),
    one per completion token; [] where it assigned none. They are the step's `completion_advantages`."""
    source_ref: Series[Text] | None
    """Imported rounds only: where the step came from in the source file ("<line>:<step or node>")."""
    temperature: Series[float] | None = pa.Field(nullable=True, gt=0)
    """The sampling temperature the step's completion was drawn at; NaN where an imported source did not
    save it (the trainer then uses `[rollouts] temperature`; `creditline.config.sampling_settings`)."""
    top_p: Series[float] | None = pa.Field(nullable=True, gt=0, le=1)
    """The nucleus top-p it was drawn with; NaN where not saved."""
    top_k: Series[float] | None = pa.Field(nullable=True)
    """Imported rounds: the top-k cut the source saved (≤ 0: none); NaN where not saved."""
    branch_of_episode: Series[Text] | None = pa.Field(nullable=True)
    """Branched rounds only: as on the episode row (a continuation's step_idx 0 is its source's step
    `branch_of_step`)."""
    branch_of_step: Series[pd.Int64Dtype] | None = pa.Field(nullable=True, ge=1)
    gold_logprob: Series[float] | None
    """Rounds whose estimator reads it (IGPO): the policy's mean log-probability of the task's gold answer
    after this step's prompt (`creditline.credit.gold_answer`)."""

    class Config:
        strict = True
        coerce = True
        unique = ["episode_id", "step_idx"]

    @row_check(error="step_idx must run 0..n-1 within each episode")
    def contiguous_steps(cls, df: pd.DataFrame) -> pd.Series:
        size = df.groupby("episode_id")["step_idx"].transform("size")
        top = df.groupby("episode_id")["step_idx"].transform("max")
        return top == size - 1

    @row_check(error="completion_logprobs must have one value per completion token")
    def logprobs_align(cls, df: pd.DataFrame) -> pd.Series:
        return pd.Series(
            _lengths(df["completion_logprobs"]) == _lengths(df["completion_ids"]), index=df.index
        )

    @row_check(error="branch_of_episode and branch_of_step must be null together")
    def branch_link(cls, df: pd.DataFrame) -> pd.Series:
        return _branch_link_complete(df)

    @row_check(
        error="preset_completion_advantages must be [] or one finite value per completion token, "
        "with preset_advantage their mean"
    )
    def preset_tokens_align(cls, df: pd.DataFrame) -> pd.Series:
        if "preset_completion_advantages" not in df:
            return pd.Series(True, index=df.index)
        presets = df["preset_completion_advantages"]
        scalar = df["preset_advantage"] if "preset_advantage" in df else pd.Series(np.nan, index=df.index)
        ok = [
            len(p) == 0
            or (len(p) == len(ids) and np.isfinite(p).all() and np.isclose(np.mean(p), s, rtol=0, atol=1e-9))
            for p, ids, s in zip(presets, df["completion_ids"], scalar, strict=True)
        ]
        return pd.Series(ok, index=df.index)

    @pa.check("anchor_key", error="anchor_key must be 16 lowercase hex digits")
    def hex_anchor_key(cls, values: Series[str]) -> Series[bool]:
        return _hex_keys(values)

    @pa.check("step_reward", error="step_reward must be finite")
    def finite_reward(cls, values: Series[float]) -> Series[bool]:
        return pd.Series(np.isfinite(values.to_numpy()), index=values.index)


class ScoresTable(pa.DataFrameModel):
    episode_id: Series[Text]
    group_id: Series[Text]
    step_idx: Series[int] = pa.Field(ge=0)
    rubric_version: Series[Text]
    step_reward: Series[float]
    episode_reward: Series[float]
    criterion: Series[float] = pa.Field(alias=r"^criterion\.(?!source\.).+$", regex=True)
    source_criterion: Series[float] | None = pa.Field(
        alias=r"^criterion\.source\..+$", regex=True, nullable=True
    )
    """Imported rounds: the source's own reward components (`rubrics.source_component_columns`); NaN where
    the source did not score one."""

    class Config:
        strict = True
        coerce = True
        unique = ["episode_id", "step_idx", "rubric_version"]

    @pa.check("step_reward", "episode_reward", error="rewards must be finite")
    def finite(cls, values: Series[float]) -> Series[bool]:
        return pd.Series(np.isfinite(values.to_numpy()), index=values.index)

    @row_check(error="episode_reward must be the same on every step row of an episode")
    def episode_constant(cls, df: pd.DataFrame) -> pd.Series:
        return df.groupby("episode_id")["episode_reward"].transform("nunique") == 1


class AdvantagesTable(pa.DataFrameModel):
    episode_id: Series[Text]
    group_id: Series[Text]
    step_idx: Series[int] = pa.Field(ge=0)
    rubric_version: Series[Text]
    estimator: Series[Text]
    params_hash: Series[Text]
    advantage: Series[float]
    completion_length: Series[int] = pa.Field(ge=0)
    kept: Series[bool] | None
    """Rounds with a sample filter only: False on the rows of an episode the filter dropped (advantage 0,
    not trained on; `creditline.credit.sample_filter`)."""
    completion_advantages: Series[object] | None
    """Written by rounds before per-token advantages were expanded at pack time
    (`creditline.credit.round_advantages.with_token_advantages`); kept readable, never written now."""

    class Config:
        strict = True
        coerce = True
        unique = ["episode_id", "step_idx"]

    @pa.check("advantage", error="advantage must be finite")
    def finite(cls, values: Series[float]) -> Series[bool]:
        return pd.Series(np.isfinite(values.to_numpy()), index=values.index)

    @row_check(error="completion_advantages must have one value per completion token")
    def tokens_align(cls, df: pd.DataFrame) -> pd.Series:
        if "completion_advantages" not in df:
            return pd.Series(True, index=df.index)
        return pd.Series(
            _lengths(df["completion_advantages"]) == df["completion_length"].to_numpy(), index=df.index
        )


class ModelRewardsTable(pa.DataFrameModel):
    """A step-reward model's value of every step of a round (`creditline.credit.reward_model`)."""

    episode_id: Series[Text]
    step_idx: Series[int] = pa.Field(ge=0)
    model_reward: Series[float]

    class Config:
        strict = True
        coerce = True
        unique = ["episode_id", "step_idx"]

    @pa.check("model_reward", error="model_reward must be finite")
    def finite(cls, values: Series[float]) -> Series[bool]:
        return pd.Series(np.isfinite(values.to_numpy()), index=values.index)


class TrainingTable(pa.DataFrameModel):
    epoch: Series[int] = pa.Field(ge=0)
    minibatch: Series[int] = pa.Field(ge=0)
    loss: Series[float]
    grad_norm: Series[float] = pa.Field(ge=0)
    entropy: Series[float] = pa.Field(ge=0)
    tokens: Series[int] = pa.Field(ge=0)
    rows: Series[int] = pa.Field(ge=1)
    clip_fraction: Series[float] = pa.Field(ge=0, le=1)
    approx_kl: Series[float]
    """k3 estimate of KL(π_old‖π_θ) over the minibatch's tokens, before the update."""
    reference_kl: Series[float] = pa.Field(ge=0)
    """Mean k3 KL to the reference policy (0 when `kl_coef` is 0)."""
    sampler_kl: Series[float] = pa.Field(ge=0)
    """The round's sampler/trainer mismatch KL(μ‖π_old) by k3, on the first minibatch; the same in every
    row."""

    class Config:
        strict = True
        coerce = True

    @pa.check(
        "loss",
        "grad_norm",
        "approx_kl",
        "reference_kl",
        "sampler_kl",
        error="training metrics must be finite",
    )
    def finite(cls, values: Series[float]) -> Series[bool]:
        return pd.Series(np.isfinite(values.to_numpy()), index=values.index)


class EvaluationTable(pa.DataFrameModel):
    policy_round: Series[int] = pa.Field(ge=0)
    episode_id: Series[Text] = pa.Field(unique=True)
    task_id: Series[int] = pa.Field(ge=0)
    num_steps: Series[int] = pa.Field(ge=1)
    success: Series[bool]
    env_return: Series[float]
    stop_reason: Series[Text] = pa.Field(isin=STOP_REASONS)

    class Config:
        strict = True
        coerce = True


class RescoreComparisonTable(pa.DataFrameModel):
    round: Series[int] = pa.Field(ge=1)
    training_rubric: Series[Text]
    rescored_rubric: Series[Text]
    reward_correlation: Series[float] = pa.Field(nullable=True)
    advantage_rank_correlation: Series[float] = pa.Field(nullable=True)
    sign_flip_share: Series[float] = pa.Field(ge=0, le=1)
    steps: Series[int] = pa.Field(ge=1)

    class Config:
        strict = True
        coerce = True
