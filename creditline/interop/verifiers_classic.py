"""Reading verifiers' classic output: `results.jsonl` (+ `metadata.json`), verifiers ≤ 0.3.x
(`verifiers.legacy`).

One JSON line per rollout (a `RolloutOutput`): `example_id` (the group: rollouts of one example),
`reward`, `metrics` (each reward function's and metric's value by name), `stop_condition`, and, when the
run saved it (`state_columns=["trajectory"]`, as prime-rl always asks), `trajectory`: one step per model
call with `tokens = {prompt_ids, completion_ids, completion_logprobs, is_truncated, overlong_prompt, ...}`,
`reward`, `advantage`, `prompt` and `completion` messages. The sampling arguments (`temperature`,
`top_p`, `top_k`) are the line's own `sampling_args` where saved (prime-rl's state columns), else
`metadata.json`'s, one set for the whole run.

verifiers' `Rubric.score_group` fills every step's `reward` with the rollout's reward and its `advantage`
with `R_i − mean_group(R)` unless the environment set them first (fill-if-None). The saved file cannot say
which happened, so a value equal to what the fill would have written is read as not set, and anything
else as the environment's own (`ImportedStep.preset_reward`, `preset_advantage`). A preset equal to the
fill value is thereby lost, which changes nothing under verifiers' own semantics.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from creditline.interop.imported_rollouts import (
    ImportedRollout,
    ImportedStep,
    SamplingSettings,
    SourceError,
    float_list,
    int_list,
    message_text,
    number,
    read_json_lines,
    sampling_settings,
)

RESULTS = "results.jsonl"
METADATA = "metadata.json"
_SAME = 1e-9
"""How close a saved step value must be to verifiers' fill value to count as filled (JSON round trip)."""


def read_metadata(folder: Path) -> dict:
    """`metadata.json` beside the results (env id, model, sampling, versions), or {} if there is none."""
    path = folder / METADATA
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SourceError(str(path), "json", f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError as exc:
        raise SourceError(str(path), "encoding", f"not UTF-8 (byte offset {exc.start})") from None
    if not isinstance(meta, dict):
        raise SourceError(str(path), "json", "expected an object")
    return meta


def read_classic(
    path: Path, metadata: dict | None = None, *, for_training: bool = True
) -> list[ImportedRollout]:
    """The rollouts of one `results.jsonl`; see the module docstring. `metadata`: its `metadata.json`,
    whose `sampling_args` hold for every line that did not save its own. `for_training=False`: greedy
    sampling is accepted (`imported_rollouts.sampling_settings`)."""
    run_args = (metadata or {}).get("sampling_args")
    run_sampling = sampling_settings(run_args, str(path.parent / METADATA), "sampling_args", for_training)
    parsed = [
        _parse_line(obj, f"{path} line {n}", run_sampling, for_training) for n, obj in read_json_lines(path)
    ]
    by_example: dict[str, list[float]] = defaultdict(list)
    for line in parsed:
        by_example[line["group"]].append(line["reward"])
    rollouts = []
    for line in parsed:
        mean = sum(by_example[line["group"]]) / len(by_example[line["group"]])
        fill_advantage = line["reward"] - mean
        steps = tuple(
            ImportedStep(
                **{
                    **step,
                    "preset_reward": _unless(step["preset_reward"], line["reward"]),
                    "preset_advantage": _unless(step["preset_advantage"], fill_advantage),
                }
            )
            for step in line["steps"]
        )
        rollouts.append(
            ImportedRollout(
                line["group"],
                line["key"],
                line["reward"],
                line["components"],
                line["stop_condition"],
                steps,
                line["where"],
            )
        )
    return rollouts


def _unless(value: float | None, fill: float) -> float | None:
    return None if value is None or math.isclose(value, fill, rel_tol=0, abs_tol=_SAME) else value


def _parse_line(obj: dict, where: str, run_sampling: SamplingSettings, for_training: bool) -> dict:
    for field in ("example_id", "reward"):
        if field not in obj:
            raise SourceError(where, field, "missing")
    example = obj["example_id"]
    if isinstance(example, bool) or not isinstance(example, int | str):
        raise SourceError(where, "example_id", f"expected an integer or string, got {example!r}")
    reward = number(obj["reward"], where, "reward")
    metrics = obj.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise SourceError(where, "metrics", "expected an object of name → value")
    components = {name: number(v, where, f"metrics.{name}") for name, v in metrics.items() if v is not None}
    trajectory = obj.get("trajectory")
    if not isinstance(trajectory, list) or not trajectory:
        raise SourceError(
            where,
            "trajectory",
            'missing or empty: save the run with state_columns=["trajectory"] '
            "so each model call's token ids and log-probs are kept",
        )
    sampling = (
        run_sampling
        if obj.get("sampling_args") is None
        else sampling_settings(obj["sampling_args"], where, "sampling_args", for_training)
    )
    steps = []
    previous: tuple[list[int], int] | None = None  # (prompt + completion ids, messages) of the step before
    for t, step in enumerate(trajectory):
        at = f"trajectory[{t}]"
        if not isinstance(step, dict):
            raise SourceError(where, at, "expected an object")
        tokens = step.get("tokens")
        if not isinstance(tokens, dict):
            raise SourceError(
                where,
                f"{at}.tokens",
                "missing: the run was saved without token ids (serve the "
                "model with an endpoint that returns them, e.g. vLLM or `creditline serve`)",
            )
        prompt_ids = int_list(tokens.get("prompt_ids"), where, f"{at}.tokens.prompt_ids")
        completion_ids = int_list(tokens.get("completion_ids"), where, f"{at}.tokens.completion_ids")
        logprobs = float_list(tokens.get("completion_logprobs"), where, f"{at}.tokens.completion_logprobs")
        if len(logprobs) != len(completion_ids):
            raise SourceError(
                where,
                f"{at}.tokens.completion_logprobs",
                f"{len(logprobs)} values for {len(completion_ids)} completion tokens",
            )
        prompt = step.get("prompt") or []
        completion = step.get("completion") or []
        for name, messages in (("prompt", prompt), ("completion", completion)):
            if not isinstance(messages, list):
                raise SourceError(where, f"{at}.{name}", "expected a list of messages")
        seen_messages = 0
        new_ids = prompt_ids
        if previous is not None:
            before, seen_messages = previous
            if prompt_ids[: len(before)] == before:
                new_ids = prompt_ids[len(before) :]
        steps.append(
            {
                "observation": "\n".join(
                    message_text(m) for m in prompt[seen_messages:] if isinstance(m, dict)
                ),
                "action": _action(completion),
                "prompt_ids": prompt_ids,
                "new_prompt_ids": new_ids,
                "completion_ids": completion_ids,
                "completion_logprobs": logprobs,
                "truncated": bool(step.get("is_truncated") or tokens.get("is_truncated")),
                "preset_reward": None
                if step.get("reward") is None
                else number(step["reward"], where, f"{at}.reward"),
                "preset_advantage": None
                if step.get("advantage") is None
                else number(step["advantage"], where, f"{at}.advantage"),
                "source_ref": f"{where.rsplit(' line ', 1)[-1]}:{t}",
                **sampling,
            }
        )
        previous = (prompt_ids + completion_ids, len(prompt) + len(completion))
    key = trajectory[0].get("trajectory_id") or f"{where}"
    return {
        "group": str(example),
        "key": str(key),
        "reward": reward,
        "components": components,
        "stop_condition": obj.get("stop_condition"),
        "steps": steps,
        "where": where,
    }


def _action(completion: list) -> str:
    """The assistant message's text, without the role prefix."""
    texts = [message_text(m) for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
    return "\n".join(t.removeprefix("assistant: ") for t in texts)
