"""A round's per-token advantages in the formats verifiers and prime-rl read: the dispatcher.

- `pr941` (`creditline.interop.export_pr941`) — verifiers 0.3.x `RolloutOutput` lines with PR #941's per-step
  `completion_advantages`, for verifiers' own readers and prime-rl's classic converter.
- `prime-rl` (`creditline.interop.export_prime_rl`) — prime-rl's `TrainingSample`, one positional array per
chain
  of turns, for `msgspec.json.decode(line, type=TrainingSample)`.
- `verifiers-v1` — for a round imported from verifiers' v1 `traces.jsonl`: the imported file itself, each
  sampled message node given its step's per-token `advantages` (one per sampled token, the layout of its
  `logprobs`); nodes with no step keep none ("unassigned", not zero). Lines keep the source's order and
  fields, so verifiers and prime-rl read them as they read their own traces.
- `prime-rl-rollouts` (`export_rollout_files`) — the `verifiers-v1` lines in prime-rl's saved-rollout
  folders, `step_<round>/train/{all,effective}/traces.jsonl`.

`pr941` lines name where they came from (experiment, round, episode id, task, rubric version, estimator) in
`info`, so an exported file can be traced back to its round's lineage; a prime-rl sample has no such field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from creditline.config.sampling_settings import round_sampling
from creditline.credit.round_advantages import join_on_step, with_token_advantages
from creditline.interop.export_pr941 import (
    played_rollout_fields,
    pr941_records,
    rebuilt_messages,
    source_lines,
    source_messages,
    source_rollout_fields,
)
from creditline.interop.export_prime_rl import prime_rl_samples, rollout_files
from creditline.interop.verifiers_v1 import fill_advantages

FORMATS = ("pr941", "prime-rl", "verifiers-v1", "prime-rl-rollouts")
FOLDER_FORMATS = ("prime-rl-rollouts",)
"""Formats written as a folder of files (`export_rollout_files`), not as one JSON lines file."""


def export_lines(
    format_: str,
    experiment: str,
    round_: int,
    steps: pd.DataFrame,
    scores: pd.DataFrame,
    advantages: pd.DataFrame,
    temperature: float = 1.0,
    source: Path | None = None,
    *,
    source_format: str = "v1",
    env_name: str = "",
    system: str | None = None,
) -> Iterator[str]:
    """The JSON lines of `format_` for one round (see the module doc): `pr941` in (task, sample) order,
    `prime-rl` by episode id, then chain; `verifiers-v1` in the order of `source`, the round's staged
    `traces.jsonl`. `temperature`: the experiment's `[rollouts]` one, used where the steps record none.
    `source` / `source_format`: an imported round's staged file and its format ("classic" results.jsonl or
    "v1" traces.jsonl), None for a round played here; `env_name`: the experiment's environment (prime-rl's
    `env_name`); `system`: the system message of a chat round played here."""
    if format_ == "verifiers-v1" and (source is None or source_format != "v1" or "source_ref" not in steps):
        raise ValueError(f"round {round_} was not imported from verifiers v1 traces: nothing to fill")
    rows = _joined(steps, scores, advantages)
    records: Iterator[dict] | Iterator[list]
    if format_ == "verifiers-v1":
        assert source is not None  # refused above otherwise
        yield from fill_advantages(
            source, dict(zip(rows["source_ref"], rows["completion_advantages"], strict=True))
        )
        return
    if format_ == "pr941":
        imported = source is not None and "source_ref" in rows
        lines = source_lines(source) if imported and source is not None else {}
        messages = source_messages(rows, lines, source_format) if imported else rebuilt_messages(rows, system)
        provenance = {
            r["episode_id"]: _source(experiment, round_, r)
            for r in rows.drop_duplicates("episode_id").to_dict("records")
        }
        fields = (
            source_rollout_fields(rows, lines, source_format) if imported else played_rollout_fields(rows)
        )
        records = pr941_records(experiment, round_, rows, messages, provenance, fields)
    elif (
        format_ == "prime-rl"
    ):  # the temperature the round was sampled (and trained) at, where it recorded one
        records = prime_rl_samples(rows, round_sampling(steps, temperature, 1.0)[0], env_name)
    else:
        raise ValueError(f"unknown export format {format_!r}; choose one of {', '.join(FORMATS)}")
    for record in records:
        yield json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def export_rollout_files(
    round_: int, steps: pd.DataFrame, scores: pd.DataFrame, advantages: pd.DataFrame, source: Path | None
) -> dict[str, list[str]]:
    """`prime-rl-rollouts`: relative path → lines (`export_prime_rl.rollout_files`); the round must have
    been imported from verifiers v1 traces (`source`, its staged `traces.jsonl`)."""
    if source is None or "source_ref" not in steps:
        raise ValueError(f"round {round_} was not imported from verifiers v1 traces: no episodes to write")
    return rollout_files(round_, _joined(steps, scores, advantages), source)


def _joined(steps: pd.DataFrame, scores: pd.DataFrame, advantages: pd.DataFrame) -> pd.DataFrame:
    """steps ⋈ scores ⋈ advantages on (episode_id, step_idx), one row per step, in play order."""
    criteria = [c for c in scores.columns if c.startswith("criterion.")]
    rows = join_on_step(
        steps.drop(columns=["step_reward"]),
        scores,
        ["step_reward", "episode_reward", "rubric_version", *criteria],
        "the round's scores",
    )
    rows = with_token_advantages(
        join_on_step(rows, advantages, ["advantage", "estimator"], "the round's advantages")
    )
    return rows.sort_values(["task_id", "sample_idx", "step_idx"], kind="stable").reset_index(drop=True)


def _source(experiment: str, round_: int, row) -> dict:
    return {
        "experiment": experiment,
        "round": round_,
        "episode_id": row["episode_id"],
        "task_id": int(row["task_id"]),
        "rubric_version": row["rubric_version"],
        "estimator": row["estimator"],
    }
