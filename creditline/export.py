"""A round's per-token advantages in the formats verifiers and prime-rl read (JSON lines).

Three formats, from a round's steps, scores and advantages tables:

- `pr941` — verifiers PR #941 ("send step level advantages to prime rl"): one line per rollout, shaped
  like verifiers' saved `RolloutOutput` with its `trajectory` (one `TrajectoryStep` per model call) and
  `use_verifiers_advantages: true`. Each step carries its `tokens` (`prompt_ids`, `prompt_mask` of 0s,
  `completion_ids`, `completion_mask` of 1s, `completion_logprobs`), its `reward`, its scalar `advantage`
  and `completion_advantages`, one value per completion token (len = len(completion_ids)), which is the
  vector prime-rl's companion PR #1838 trains on. PR #941 repeats the step's scalar over its tokens; here
  the vector is whatever the round's estimator assigned per token (the same thing for step-level
  estimators, which give every token of a step its step's advantage).
- `prime-rl` — one training sample per chain of turns, as prime-rl's orchestrator builds them
  (`interleave_rollout`, best-effort interleaving: turns merge while each prompt extends the previous
  prompt + completion exactly, and a new sample starts where one does not; `creditline.turn_packing`, the
  rule our own trainer uses). A sample holds `token_ids` (prompt, then completions and the environment's
  replies between them), `mask` (1 on sampled tokens), `logprobs` and `advantages`, all of that length,
  0 on prompt and environment tokens, as prime-rl's `TrainingSample` does.

- `verifiers-v1` — for a round imported from verifiers' v1 `traces.jsonl`: the imported file itself, each
  sampled message node given its step's per-token `advantages` (one per sampled token, the layout of its
  `logprobs`); nodes with no step keep none ("unassigned", not zero). Lines keep the source's order and
  fields, so verifiers and prime-rl read them as they read their own traces.

Every `pr941` and `prime-rl` line also names where it came from (experiment, round, episode id, task, rubric version, estimator),
so an exported file can be traced back to its round's lineage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from creditline.round import join_on_step, with_token_advantages
from creditline.turn_packing import merge_turns
from creditline.verifiers_v1 import fill_advantages

FORMATS = ("pr941", "prime-rl", "verifiers-v1")


def export_lines(
    format_: str,
    experiment: str,
    round_: int,
    steps: pd.DataFrame,
    scores: pd.DataFrame,
    advantages: pd.DataFrame,
    temperature: float = 1.0,
    source: Path | None = None,
) -> Iterator[str]:
    """The JSON lines of `format_` for one round (see the module doc): `pr941` in (task, sample) order,
    `prime-rl` by episode id, then chain; `verifiers-v1` in the order of `source`, the round's staged
    `traces.jsonl`."""
    if format_ == "verifiers-v1" and (source is None or "source_ref" not in steps):
        raise ValueError(f"round {round_} was not imported from verifiers v1 traces: nothing to fill")
    rows = _joined(steps, scores, advantages)
    if format_ == "verifiers-v1":
        yield from fill_advantages(
            source, dict(zip(rows["source_ref"], rows["completion_advantages"], strict=True))
        )
        return
    if format_ == "pr941":
        records = pr941_records(experiment, round_, rows)
    elif format_ == "prime-rl":
        records = prime_rl_samples(experiment, round_, rows, temperature)
    else:
        raise ValueError(f"unknown export format {format_!r}; choose one of {', '.join(FORMATS)}")
    for record in records:
        yield json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _joined(steps: pd.DataFrame, scores: pd.DataFrame, advantages: pd.DataFrame) -> pd.DataFrame:
    """steps ⋈ scores ⋈ advantages on (episode_id, step_idx), one row per step, in play order."""
    rows = join_on_step(steps.drop(columns=["step_reward"]), scores,
                        ["step_reward", "episode_reward", "rubric_version"], "the round's scores")  # fmt: skip
    rows = with_token_advantages(
        join_on_step(rows, advantages, ["advantage", "estimator"], "the round's advantages")
    )
    return rows.sort_values(["task_id", "sample_idx", "step_idx"], kind="stable").reset_index(drop=True)


def _source(experiment: str, round_: int, row) -> dict:
    return {"experiment": experiment, "round": round_, "episode_id": row["episode_id"],
            "task_id": int(row["task_id"]), "rubric_version": row["rubric_version"],
            "estimator": row["estimator"]}  # fmt: skip


def pr941_records(experiment: str, round_: int, rows: pd.DataFrame) -> Iterator[dict]:
    """One verifiers rollout per episode, each trajectory step with its `completion_advantages`."""
    for _, episode in rows.groupby("episode_id", sort=False):
        turns = episode.to_dict("records")
        first, last = turns[0], turns[-1]
        trajectory = []
        for turn in turns:
            completion = [int(t) for t in turn["completion_ids"]]
            truncated = bool(turn["truncated"]) or turn.get("finish_reason") == "length"
            trajectory.append({
                "prompt": [{"role": "user", "content": turn["observation"]}],
                "completion": [{"role": "assistant", "content": turn["action"]}],
                "tokens": {
                    "prompt_ids": [int(t) for t in turn["prompt_ids"]],
                    "prompt_mask": [0] * len(turn["prompt_ids"]),
                    "completion_ids": completion,
                    "completion_mask": [1] * len(completion),
                    "completion_logprobs": [float(x) for x in turn["completion_logprobs"]],
                    "overlong_prompt": False,
                    "is_truncated": truncated,
                },
                "reward": float(turn["step_reward"]),
                "advantage": float(turn["advantage"]),
                "completion_advantages": [float(x) for x in turn["completion_advantages"]],
                "is_truncated": truncated,
                "trajectory_id": turn["episode_id"],
                "extras": {"step_idx": int(turn["step_idx"]), "valid_action": bool(turn["valid_action"])},
            })  # fmt: skip
        yield {
            "example_id": int(first["task_id"]),
            "task": experiment,
            "prompt": trajectory[0]["prompt"],
            "completion": [m for step in trajectory for m in step["completion"]],
            "reward": float(first["episode_reward"]),
            "is_completed": True,
            "is_truncated": bool(last["truncated"]),
            "trajectory": trajectory,
            "use_verifiers_advantages": True,
            "info": _source(experiment, round_, first),
        }


def prime_rl_samples(experiment: str, round_: int, rows: pd.DataFrame, temperature: float) -> Iterator[dict]:
    """One prime-rl training sample per chain of turns (best-effort interleaving)."""
    rewards = rows.groupby("episode_id", sort=False)["episode_reward"].first()
    firsts = rows.groupby("episode_id", sort=False).first()
    for sample in merge_turns(rows).to_dict("records"):
        prompt = [int(t) for t in sample["prompt_ids"]]
        rest = [int(t) for t in sample["completion_ids"]]
        padding = [0] * len(prompt)
        info = _source(
            experiment, round_, {**firsts.loc[sample["episode_id"]], "episode_id": sample["episode_id"]}
        )
        yield {
            "token_ids": prompt + rest,
            "mask": padding + [int(m) for m in sample["sampled_mask"]],
            "logprobs": [0.0] * len(prompt) + [float(x) for x in sample["completion_logprobs"]],
            "advantages": [0.0] * len(prompt) + [float(x) for x in sample["completion_advantages"]],
            "temperature": temperature,
            "reward": float(rewards[sample["episode_id"]]),
            "steps": sample["steps"],
            "info": info,
        }
