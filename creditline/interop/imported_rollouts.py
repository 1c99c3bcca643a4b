"""Rollouts made elsewhere (verifiers' files), turned into the round's episodes and steps tables.

A reader of a foreign format (`verifiers_classic`, `verifiers_v1`) yields `ImportedRollout`s: per rollout
its group key (the example / task it answered), the reward its own rubric gave, the named components
of that reward, and one `ImportedStep` per model call with the exact token ids and sampling log-probs
that were saved (never re-tokenised). `rollout_tables` turns them into the tables a generated round has:

- ids derive from (experiment, round, task, sample), as for a generated round; `task_id` is the
  example id where every group key is a non-negative integer (verifiers' `example_id`), else the rank of
  the key in sorted order; `sample_idx` orders a group's rollouts by their content hash, so the line
  order of the file does not matter and the same rollouts give the same tables;
- the episode's return (`env_return`) is R, the reward the source's rubric gave, as verifiers trains on
  it (its `score_group` computes advantages from R alone). A step reward the environment set itself
  (`preset_t`) stays that step's reward: `step_reward[t] = preset_t` where set, else verifiers' fill
  (R) carried as an outcome, `R if t is the last step else 0`. Presets are never added into the return:
  in verifiers a step reward is a per-step value (its fill writes R on every step), not an increment,
  so the "env" rubric reads an imported episode's return from `env_return`
  (`rubrics.env_reward`), not from Σ step_reward;
- `preset_advantage`: an advantage the source assigned to the step (NaN where it assigned none); the
  `preset` estimator keeps it and fills the rest (verifiers' fill-if-None);
- `preset_completion_advantages`: the per-token advantages the source assigned (one per completion token,
  `[]` where it assigned none); such a step's `completion_advantages` are exactly these values, and its
  `preset_advantage` (so its scalar `advantage`) is their mean (`round_advantages.with_token_advantages`);
- `anchor_key`: the hash of the tokens the step added to the context before sampling (the environment's
  reply, or the whole first prompt), so GiGPO's anchor groups compare steps that saw the same reply;
- `source_components`: the reward's named components and metrics as JSON, scored as
  `criterion.source.<name>` columns (recorded, never part of the reward);
- `source_ref`: where in the source the step came from, for exporting advantages back into it;
- `temperature`, `top_p`, `top_k`: the sampling settings the source saved for the call (NaN where it
  saved none), which the trainer scores the step at (`creditline.config.sampling_settings`).

Errors name the file, the line and the field (`SourceError`); a group with one rollout is refused
(no baseline to compare it with), and so is greedy sampling (log-probs the trainer cannot reproduce), unless
the rollouts are read `for_training=False`: a held-out evaluation's, which are measured, never trained on
(one greedy rollout per example).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import pandas as pd

from creditline import ids
from creditline.rollout.episodes import RolloutTables


class SourceError(ValueError):
    """A source file that cannot be imported: `<file> line <n>: <field>: <why>`."""

    def __init__(self, where: str, field: str, why: str) -> None:
        super().__init__(f"{where}: {field}: {why}")
        self.where, self.field, self.why = where, field, why


@dataclass(frozen=True)
class ImportedStep:
    """One model call: the context it saw (token ids) and what it sampled."""

    observation: str
    """The text the step added before sampling (the first prompt, or the environment's reply)."""
    action: str
    """The completion's text, tool calls as `name(arguments)` lines after it."""
    prompt_ids: list[int]
    new_prompt_ids: list[int]
    """The suffix of `prompt_ids` this step added (all of it for the first step): the anchor."""
    completion_ids: list[int]
    completion_logprobs: list[float]
    truncated: bool
    preset_reward: float | None
    preset_advantage: float | None
    """The scalar advantage the source assigned (the mean of `preset_completion_advantages` where it
    assigned per-token ones); None where it assigned none."""
    source_ref: str
    temperature: float | None = None
    """The sampling settings the call was made with, where the source saved them (None: not saved)."""
    top_p: float | None = None
    top_k: float | None = None
    preset_completion_advantages: list[float] | None = None
    """Per-token advantages the source assigned, one per completion token (verifiers v1 node
    `advantages`, which may vary per token); None where it assigned none."""


@dataclass(frozen=True)
class ImportedRollout:
    group_key: str
    rollout_key: str
    """Unique within the source: a duplicate is refused."""
    reward: float
    components: dict[str, float]
    stop_condition: str | None
    steps: tuple[ImportedStep, ...]
    where: str
    """`<file> line <n>`, for errors."""

    def content_hash(self) -> str:
        steps = [(s.prompt_ids, s.completion_ids) for s in self.steps]
        return ids.canonical_hash([self.reward, steps], ensure_ascii=True, default=str)


STEP_LIMIT_CONDITIONS = {"max_turns_reached", "max_turns"}
CONTEXT_LIMIT_CONDITIONS = {"prompt_too_long", "overlong_prompt"}


def rollout_tables(
    rollouts: Sequence[ImportedRollout], experiment: str, round_: int, *, for_training: bool = True
) -> RolloutTables:
    """The episodes (E rows) and steps (S rows) tables of imported rollouts; see the module docstring.
    `for_training=False` (an evaluation's rollouts) accepts a task with one rollout."""
    groups: dict[str, list[ImportedRollout]] = defaultdict(list)
    seen: dict[str, str] = {}
    for rollout in rollouts:
        if rollout.rollout_key in seen:
            raise SourceError(
                rollout.where,
                "id",
                f"duplicate rollout id {rollout.rollout_key!r} (also at {seen[rollout.rollout_key]})",
            )
        seen[rollout.rollout_key] = rollout.where
        if not rollout.steps:
            raise SourceError(rollout.where, "trajectory", "the rollout has no model calls")
        groups[rollout.group_key].append(rollout)
    if not groups:
        raise SourceError("the source", "rollouts", "no rollouts found")
    for key, members in groups.items():
        if len(members) < 2 and for_training:
            raise SourceError(
                members[0].where,
                "group",
                f"task {key!r} has one rollout; step credit needs "
                "at least two per task (rollouts_per_example ≥ 2)",
            )
    task_ids = _task_ids(sorted(groups))
    episode_rows, step_rows = [], []
    for key in sorted(groups):
        task = task_ids[key]
        for sample, rollout in enumerate(sorted(groups[key], key=ImportedRollout.content_hash)):
            episode = ids.episode_id(experiment, round_, task, sample)
            common = {
                "round": round_,
                "episode_id": episode,
                "group_id": ids.group_id(experiment, round_, task),
                "task_id": task,
                "sample_idx": sample,
            }
            last = len(rollout.steps) - 1
            for t, step in enumerate(rollout.steps):
                step_rows.append(
                    {
                        **common,
                        "step_idx": t,
                        "observation": step.observation,
                        "action": step.action,
                        "anchor_key": ids.anchor_key(json.dumps(step.new_prompt_ids)),
                        "prompt_ids": step.prompt_ids,
                        "completion_ids": step.completion_ids,
                        "completion_logprobs": step.completion_logprobs,
                        "step_reward": step.preset_reward
                        if step.preset_reward is not None
                        else (rollout.reward if t == last else 0.0),
                        "valid_action": True,
                        "done": t == last,
                        "truncated": step.truncated,
                        "finish_reason": "length" if step.truncated else "stop",
                        "preset_advantage": math.nan
                        if step.preset_advantage is None
                        else step.preset_advantage,
                        "preset_completion_advantages": list(step.preset_completion_advantages or []),
                        "source_ref": step.source_ref,
                        **_sampling(step),
                    }
                )
            episode_rows.append(
                {
                    **common,
                    "num_steps": len(rollout.steps),
                    "success": rollout.reward > 0,
                    "env_return": rollout.reward,
                    "stop_reason": _stop_reason(rollout),
                    "source_components": json.dumps(rollout.components, sort_keys=True),
                }
            )
    return RolloutTables(episodes=pd.DataFrame(episode_rows), steps=pd.DataFrame(step_rows))


def _sampling(step: ImportedStep) -> dict[str, float]:
    """The step's sampling settings as columns, NaN where not saved
    (`creditline.config.sampling_settings`)."""
    return {
        name: math.nan if (value := getattr(step, name)) is None else float(value)
        for name in ("temperature", "top_p", "top_k")
    }


def _task_ids(keys: list[str]) -> dict[str, int]:
    """verifiers' integer example ids where every key is one, else ranks in sorted order."""
    if all(k.isdigit() for k in keys):
        return {k: int(k) for k in keys}
    return {k: i for i, k in enumerate(keys)}


def _stop_reason(rollout: ImportedRollout) -> str:
    if rollout.stop_condition in CONTEXT_LIMIT_CONDITIONS:
        return "context_limit"
    if rollout.stop_condition in STEP_LIMIT_CONDITIONS:
        return "step_limit"
    return "success" if rollout.reward > 0 else "done"


def number(value, where: str, field: str) -> float:
    """A finite float from a JSON value, or a SourceError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SourceError(where, field, f"expected a finite number, got {value!r}")
    return float(value)


def int_list(value, where: str, field: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise SourceError(where, field, "expected a list of token ids (non-negative integers)")
    return value


def float_list(value, where: str, field: str) -> list[float]:
    if not isinstance(value, list):
        raise SourceError(where, field, "expected a list of numbers")
    return [number(v, where, f"{field}[{i}]") for i, v in enumerate(value)]


class SamplingSettings(TypedDict):
    """A call's saved sampling settings (the `ImportedStep` fields of the same names); None where absent."""

    temperature: float | None
    top_p: float | None
    top_k: float | None


def sampling_settings(args, where: str, field: str, for_training: bool = True) -> SamplingSettings:
    """`temperature`, `top_p`, `top_k` from a call's sampling arguments (OpenAI keys, vLLM's in
    `extra_body` too); None where absent. A temperature ≤ 0 (greedy decoding) is refused `for_training`: its
    log-probs are not a distribution's the trainer can reproduce (an evaluation's rollouts may be greedy)."""
    if args is None:
        return {"temperature": None, "top_p": None, "top_k": None}
    if not isinstance(args, dict):
        raise SourceError(where, field, "expected an object of sampling arguments")
    extra = args["extra_body"] if isinstance(args.get("extra_body"), dict) else {}
    out: dict[str, float | None] = {}
    for name in ("temperature", "top_p", "top_k"):
        value = args.get(name, extra.get(name))
        out[name] = None if value is None else number(value, where, f"{field}.{name}")
    if for_training and out["temperature"] is not None and out["temperature"] <= 0:
        raise SourceError(
            where,
            f"{field}.temperature",
            f"{out['temperature']:g}: greedy decoding; only "
            "rollouts sampled at a temperature > 0 can be trained on",
        )
    if out["top_p"] is not None and not 0 < out["top_p"] <= 1:
        raise SourceError(where, f"{field}.top_p", f"{out['top_p']:g}: expected a value in (0, 1]")
    return SamplingSettings(temperature=out["temperature"], top_p=out["top_p"], top_k=out["top_k"])


def read_json_lines(path) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a line that is not a JSON object is a SourceError."""
    lines = []
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SourceError(
                    f"{path} line {n}",
                    "encoding",
                    f"not UTF-8 (byte 0x{raw[exc.start]:02x} at "
                    f"column {exc.start + 1}); verifiers writes UTF-8 JSON lines",
                ) from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SourceError(
                    f"{path} line {n}",
                    "json",
                    f"not valid JSON ({exc.msg} at column {exc.colno}); a truncated or half-written file?",
                ) from None
            if not isinstance(obj, dict):
                raise SourceError(f"{path} line {n}", "json", f"expected an object, got {type(obj).__name__}")
            lines.append((n, obj))
    return lines


def message_text(message: dict) -> str:
    """A chat message as one line of text: `role: content`, tool calls as `name(arguments)`."""
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    parts = [content] if content else []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call)  # OpenAI nests name/arguments; verifiers is flat
        parts.append(f"{function.get('name')}({function.get('arguments')})")
    return f"{message.get('role', '?')}: " + "\n".join(parts)
