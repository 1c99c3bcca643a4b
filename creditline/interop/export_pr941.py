"""A round as verifiers 0.3.x `RolloutOutput`s with PR #941's per-step `completion_advantages`.

verifiers PR #941 ("send step level advantages to prime rl", never merged) adds to each `TrajectoryStep`
`completion_advantages`: one value per completion token, the vector prime-rl's companion PR #1838 trains
on. Here the vector is whatever the round's estimator assigned per token (PR #941 repeats the step's scalar,
the same thing for step-level estimators). Everything else is what verifiers 0.3.x itself writes to
`results.jsonl` (`verifiers/legacy/types.py`, `utils/save_utils.py::state_to_output`), so its own types and
prime-rl's classic converter (`interleave_rollout`, which reads `output["error"]`) read the lines:

- rollout: `example_id` (task id), `task` (experiment), `prompt` (the first step's prompt), `completion`
  (every message after it), `answer`, `info` (provenance), `reward` R, `error`, `timing`, `is_completed`,
  `is_truncated` (any model call cut at the length limit, verifiers' meaning; an environment's step limit
  is not truncation there), `stop_condition`, `metrics` (the rubric's criteria on the last step), each
  metric again as a top-level key (`state_to_output` flattens them), `tool_defs`, `token_usage`,
  `trajectory`, `use_verifiers_advantages` true. `answer`, `error`, `timing`, `stop_condition`,
  `tool_defs` and `token_usage` are the source's own for an imported round (`source_rollout_fields`; a v1
  trace's are put in 0.3.x's shapes) and derived from the steps for a round played here
  (`played_rollout_fields`: the stop condition from how the last step ended, token counts summed over the
  calls, `timing` zeros because episodes are played in batches and not timed one by one);
- step: `prompt` (all messages sent, cumulative as verifiers keeps it), `completion` (one assistant
  message: `content`, `tool_calls` `[{id, name, arguments}]`), `response` (verifiers' `Response`, the
  assistant message with `finish_reason`, `is_truncated` and `tokens`), `tokens` (`prompt_ids`,
  `prompt_mask` 0s, `completion_ids`, `completion_mask` 1s, `completion_logprobs`, `overlong_prompt`,
  `is_truncated`, `routed_experts`), `reward` R on every step (verifiers' fill), `advantage` (the step's
  advantage), `completion_advantages` (len = len(completion_ids)), `is_truncated` (this call was cut),
  `trajectory_id` (episode id), `extras` (`step_idx`, our `step_reward`, `valid_action`, `env_truncated`).

Messages: a round imported from verifiers keeps the source's own messages (classic: the step's `prompt`
and `completion`; v1: the message nodes from the root). A round played here is rebuilt from its
observations and actions: the environment's `instructions` as the system message (chat prompts), each
observation a user message, each action an assistant message whose hermes `<tool_call>` blocks become
`tool_calls` (`creditline.rollout.tool_calls`, as vLLM's parser gives them to verifiers). A step whose prompt
tokens extend the previous prompt + completion continues the conversation; otherwise its prompt starts
afresh (chat-last and plain prompts), as the tokens say.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from creditline.interop.imported_rollouts import read_json_lines
from creditline.rollout.tool_calls import parse_tool_calls

TIMING = {
    "start_time": 0.0,
    **{k: {"start": 0.0, "end": 0.0, "duration": 0.0} for k in ("setup", "generation", "scoring")},
    **{k: {"spans": [], "duration": 0.0} for k in ("model", "env")},
    "total": 0.0,
    "overhead": 0.0,
}
"""verifiers' `RolloutTiming` with nothing measured."""


STOP_CONDITIONS = {"done": "is_done", "step_limit": "max_turns_reached", "context_limit": "prompt_too_long"}
"""How an episode played here ended → the name of verifiers' stop condition that means it (`@vf.stop`
methods: `GymEnv.is_done`, `MultiTurnEnv.max_turns_reached`, `MultiTurnEnv.prompt_too_long`)."""


def pr941_records(
    experiment: str,
    round_: int,
    rows: pd.DataFrame,
    messages: list[tuple[list, list]],
    source: dict,
    rollout_fields: dict[str, dict],
) -> Iterator[dict]:
    """One `RolloutOutput` per episode of `rows` (steps in play order); `messages[i]` = (prompt,
    completion) of row i; `source[episode_id]` = the provenance put in `info`; `rollout_fields[episode_id]`
    = its `answer`, `error`, `timing`, `stop_condition`, `tool_defs` and `token_usage`
    (`source_rollout_fields` or `played_rollout_fields`)."""
    rows = rows.assign(_messages=messages)
    criteria = [c for c in rows.columns if c.startswith("criterion.")]
    for episode_id, episode in rows.groupby("episode_id", sort=False):
        turns = episode.to_dict("records")
        trajectory = [_step(turn, experiment) for turn in turns]
        metrics = {
            c.removeprefix("criterion.").removeprefix("source."): float(turns[-1][c])
            for c in criteria
            if pd.notna(turns[-1][c])
        }
        fields = rollout_fields[episode_id]
        output = {
            "example_id": int(turns[0]["task_id"]),
            "task": experiment,
            "prompt": trajectory[0]["prompt"],
            "completion": _completion(trajectory),
            "answer": fields["answer"],
            "info": source[episode_id],
            "reward": float(turns[0]["episode_reward"]),
            "error": fields["error"],
            "timing": fields["timing"],
            "is_completed": True,
            "is_truncated": any(step["is_truncated"] for step in trajectory),
            "stop_condition": fields["stop_condition"],
            "metrics": metrics,
            "tool_defs": fields["tool_defs"],
            "token_usage": fields["token_usage"],
        }
        # verifiers flattens the metrics to top-level keys too (never over a field of its own)
        output.update({k: v for k, v in metrics.items() if k not in output})
        yield {**output, "trajectory": trajectory, "use_verifiers_advantages": True}


def played_rollout_fields(rows: pd.DataFrame) -> dict[str, dict]:
    """episode_id → the rollout-level fields of an episode played here (see the module doc); `rows` in
    play order."""
    out: dict[str, dict] = {}
    for episode_id, episode in rows.groupby("episode_id", sort=False):
        last = episode.iloc[-1]
        ended = "done" if last["done"] else "step_limit" if last["truncated"] else "context_limit"
        prompts = [len(ids) for ids in episode["prompt_ids"]]
        completions = [len(ids) for ids in episode["completion_ids"]]
        out[episode_id] = {
            "answer": "",
            "error": None,
            "timing": TIMING,
            "stop_condition": STOP_CONDITIONS[ended],
            "tool_defs": [],
            "token_usage": _token_usage(prompts, completions),
        }
    return out


def _token_usage(prompts: list[int], completions: list[int]) -> dict[str, float]:
    """verifiers' `token_usage` from each call's prompt and completion lengths: totals over the calls, and
    its context metrics (`compute_context_token_metrics`: the model's tokens in the last context, and the
    rest of that context)."""
    generated = sum(completions)
    return {
        "input_tokens": float(sum(prompts)),
        "output_tokens": float(generated),
        "final_output_tokens": float(generated),
        "final_input_tokens": float(prompts[-1] + completions[-1] - generated),
    }


def source_rollout_fields(rows: pd.DataFrame, lines: dict[int, dict], format_: str) -> dict[str, dict]:
    """episode_id → the rollout-level fields verifiers saved for an imported episode (classic: its
    `results.jsonl` line's own; v1: its trace's, in 0.3.x's shapes), found by the rows' `source_ref` in
    `lines` (`source_lines`)."""
    out = {}
    for episode_id, ref in rows.drop_duplicates("episode_id")[["episode_id", "source_ref"]].itertuples(
        index=False
    ):
        line = lines[int(ref.split(":")[0])]
        if format_ == "classic":
            out[episode_id] = {
                "answer": line.get("answer", ""),
                "error": line.get("error"),
                "timing": line.get("timing", TIMING),
                "stop_condition": line.get("stop_condition"),
                "tool_defs": line.get("tool_defs") or [],
                "token_usage": line.get("token_usage"),
            }
        else:
            out[episode_id] = _v1_rollout_fields(line["traces"][0])
    return out


def _v1_rollout_fields(trace: dict) -> dict:
    """A verifiers v1 trace's rollout-level fields in verifiers 0.3.x's shapes."""
    calls = trace.get("calls") or []
    usage = [call.get("usage") or {} for call in calls]
    errors = trace.get("errors") or []
    error = None
    if errors:
        text = json.dumps(errors[0]) if not isinstance(errors[0], str) else errors[0]
        error = {"error": text, "error_chain_repr": text, "error_chain_str": text}
    return {
        "answer": str(((trace.get("task") or {}).get("data") or {}).get("answer") or ""),
        "error": error,
        "timing": _v1_timing(trace.get("timing") or {}, [call.get("time") or {} for call in calls]),
        "stop_condition": trace.get("stop_condition"),
        "tool_defs": [{k: v for k, v in tool.items() if k != "type"} for tool in trace.get("tools") or []],
        "token_usage": {
            "input_tokens": float(sum(u.get("prompt_tokens", 0) for u in usage)),
            "output_tokens": float(sum(u.get("completion_tokens", 0) for u in usage)),
            "final_output_tokens": float(trace.get("num_output_tokens") or 0),
            "final_input_tokens": float(trace.get("num_input_tokens") or 0),
        },
    }


def _v1_timing(timing: dict, call_times: list[dict]) -> dict:
    """A v1 trace's `timing` as 0.3.x's `RolloutTiming`: setup, generation (v1's agent phase) and scoring
    spans; the model calls' spans; the harness time as the environment's."""

    def span(name: str) -> dict:
        part = timing.get(name) or {}
        start, end = float(part.get("start") or 0.0), float(part.get("end") or 0.0)
        return {"start": start, "end": end, "duration": end - start}

    model = [{"start": float(t.get("start") or 0.0), "end": float(t.get("end") or 0.0)} for t in call_times]
    model = [{**s, "duration": s["end"] - s["start"]} for s in model]
    env = float((((timing.get("agent") or {}).get("harness")) or {}).get("duration") or 0.0)
    start = float(timing.get("start") or 0.0)
    scoring = span("scoring")
    total = max(scoring["end"] - start, 0.0)
    model_time = sum(s["duration"] for s in model)
    return {
        "start_time": start,
        "setup": span("setup"),
        "generation": span("agent"),
        "scoring": scoring,
        "model": {"spans": model, "duration": model_time},
        "env": {"spans": [], "duration": env},
        "total": total,
        "overhead": max(total - model_time - env - scoring["duration"], 0.0),
    }


def _step(turn: dict, experiment: str) -> dict:
    prompt, completion = turn["_messages"]
    prompt_ids = [int(t) for t in turn["prompt_ids"]]
    completion_ids = [int(t) for t in turn["completion_ids"]]
    cut = turn.get("finish_reason") == "length"
    tokens = {
        "prompt_ids": prompt_ids,
        "prompt_mask": [0] * len(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": [1] * len(completion_ids),
        "completion_logprobs": [float(x) for x in turn["completion_logprobs"]],
    }
    assistant = completion[-1]
    finish = "length" if cut else "tool_calls" if assistant.get("tool_calls") else "stop"
    response = {
        "id": f"{turn['episode_id']}:{int(turn['step_idx'])}",
        "created": 0,
        "model": experiment,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "reasoning_tokens": 0,
            "completion_tokens": len(completion_ids),
            "total_tokens": len(prompt_ids) + len(completion_ids),
        },
        "message": {**assistant, "finish_reason": finish, "is_truncated": cut, "tokens": tokens},
    }
    return {
        "prompt": prompt,
        "completion": completion,
        "response": response,
        "tokens": {**tokens, "overlong_prompt": False, "is_truncated": cut, "routed_experts": None},
        "reward": float(turn["episode_reward"]),
        "advantage": float(turn["advantage"]),
        "completion_advantages": [float(x) for x in turn["completion_advantages"]],
        "is_truncated": cut,
        "trajectory_id": turn["episode_id"],
        "extras": {
            "step_idx": int(turn["step_idx"]),
            "step_reward": float(turn["step_reward"]),
            "valid_action": bool(turn.get("valid_action", True)),
            "env_truncated": bool(turn["truncated"]),
        },
    }


def _completion(trajectory: list[dict]) -> list[dict]:
    """Every message after the first prompt (verifiers' `render_completion`): each step's new prompt
    messages, then its completion."""
    out, previous = [], None
    for step in trajectory:
        prompt = step["prompt"]
        if previous is not None:
            out += prompt[len(previous) :] if prompt[: len(previous)] == previous else prompt
        out += step["completion"]
        previous = prompt + step["completion"]
    return out


def assistant_message(action: str) -> dict:
    """An action as verifiers' assistant message: hermes tool-call blocks become flat `tool_calls`."""
    parsed = parse_tool_calls(action)
    if not parsed.tool_calls:
        return {"role": "assistant", "content": action}
    calls = [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in parsed.tool_calls
    ]
    return {
        "role": "assistant",
        **({"content": parsed.content} if parsed.content else {}),
        "tool_calls": calls,
    }


def rebuilt_messages(rows: pd.DataFrame, system: str | None) -> list[tuple[list, list]]:
    """(prompt, completion) messages of each row of a round played here (see the module doc)."""
    out: list[tuple[list, list]] = []
    state: dict[str, tuple[list[int], list]] = {}
    for row in rows.to_dict("records"):
        previous = state.get(row["episode_id"])
        completion = [assistant_message(row["action"])]
        user = {"role": "user", "content": row["observation"]}
        prompt_ids = [int(t) for t in row["prompt_ids"]]
        if previous is not None and prompt_ids[: len(previous[0])] == previous[0]:
            prompt = previous[1] + [user]
        else:
            prompt = ([{"role": "system", "content": system}] if system else []) + [user]
        state[row["episode_id"]] = (prompt_ids + [int(t) for t in row["completion_ids"]], prompt + completion)
        out.append((prompt, completion))
    return out


def source_lines(path: Path) -> dict[int, dict]:
    """Line number → record of an imported round's staged source file (`results.jsonl` for "classic",
    `traces.jsonl` for "v1"), read once for `source_messages` and `source_rollout_fields`."""
    return dict(read_json_lines(path))


def source_messages(rows: pd.DataFrame, lines: dict[int, dict], format_: str) -> list[tuple[list, list]]:
    """(prompt, completion) messages of each row of an imported round, from its source's `lines`
    (`source_lines`), found by the row's `source_ref`."""
    out = []
    for ref in rows["source_ref"]:
        line, index = (int(x) for x in ref.split(":"))
        if format_ == "classic":
            step = lines[line]["trajectory"][index]
            out.append((step["prompt"], step["completion"]))
            continue
        nodes = lines[line]["traces"][0]["nodes"]
        path_, current = [], index
        while current is not None:
            path_.append(current)
            current = nodes[current].get("parent")
        messages = [_classic_message(nodes[i].get("message") or {}) for i in path_[::-1]]
        out.append((messages[:-1], messages[-1:]))
    return out


def _classic_message(message: dict) -> dict:
    """A v1 message in verifiers 0.3.x's shape: tool calls without v1's `type`, no null fields."""
    out = {k: v for k, v in message.items() if v is not None}
    if out.get("tool_calls"):
        out["tool_calls"] = [{k: v for k, v in call.items() if k != "type"} for call in out["tool_calls"]]
    return json.loads(json.dumps(out))
