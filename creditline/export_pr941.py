"""A round as verifiers 0.3.x `RolloutOutput`s with PR #941's per-step `completion_advantages`.

verifiers PR #941 ("send step level advantages to prime rl", never merged) adds to each `TrajectoryStep`
`completion_advantages`: one value per completion token, the vector prime-rl's companion PR #1838 trains
on. Here the vector is whatever the round's estimator assigned per token (PR #941 repeats the step's scalar,
the same thing for step-level estimators). Everything else is what verifiers 0.3.x itself writes to
`results.jsonl` (`verifiers/legacy/types.py`, `utils/save_utils.py::state_to_output`), so its own types and
prime-rl's classic converter (`interleave_rollout`, which reads `output["error"]`) read the lines:

- rollout: `example_id` (task id), `task` (experiment), `prompt` (the first step's prompt), `completion`
  (every message after it), `answer` "", `info` (provenance), `reward` R, `error` null, `timing` (zeros:
  not measured), `is_completed`, `is_truncated` (any model call cut at the length limit, verifiers'
  meaning; an environment's step limit is not truncation there), `stop_condition` null, `metrics` (the
  rubric's criteria on the last step), `trajectory`, `use_verifiers_advantages` true;
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
`tool_calls` (`creditline.tool_calls`, as vLLM's parser gives them to verifiers). A step whose prompt
tokens extend the previous prompt + completion continues the conversation; otherwise its prompt starts
afresh (chat-last and plain prompts), as the tokens say.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from creditline.imported_rollouts import read_json_lines
from creditline.tool_calls import parse_tool_calls

TIMING = {"start_time": 0.0, **{k: {"start": 0.0, "end": 0.0, "duration": 0.0} for k in
          ("setup", "generation", "scoring")}, **{k: {"spans": [], "duration": 0.0} for k in ("model", "env")},
          "total": 0.0, "overhead": 0.0}  # fmt: skip
"""verifiers' `RolloutTiming` with nothing measured."""


def pr941_records(experiment: str, round_: int, rows: pd.DataFrame, messages: list[tuple[list, list]],
                  source: dict) -> Iterator[dict]:  # fmt: skip
    """One `RolloutOutput` per episode of `rows` (steps in play order); `messages[i]` = (prompt,
    completion) of row i; `source[episode_id]` = the provenance put in `info`."""
    rows = rows.assign(_messages=messages)
    criteria = [c for c in rows.columns if c.startswith("criterion.")]
    for episode_id, episode in rows.groupby("episode_id", sort=False):
        turns = episode.to_dict("records")
        trajectory = [_step(turn, experiment) for turn in turns]
        metrics = {c.removeprefix("criterion.").removeprefix("source."): float(turns[-1][c])
                   for c in criteria if pd.notna(turns[-1][c])}  # fmt: skip
        yield {
            "example_id": int(turns[0]["task_id"]),
            "task": experiment,
            "prompt": trajectory[0]["prompt"],
            "completion": _completion(trajectory),
            "answer": "",
            "info": source[episode_id],
            "reward": float(turns[0]["episode_reward"]),
            "error": None,
            "timing": TIMING,
            "is_completed": True,
            "is_truncated": any(step["is_truncated"] for step in trajectory),
            "stop_condition": None,
            "metrics": metrics,
            "trajectory": trajectory,
            "use_verifiers_advantages": True,
        }


def _step(turn: dict, experiment: str) -> dict:
    prompt, completion = turn["_messages"]
    prompt_ids = [int(t) for t in turn["prompt_ids"]]
    completion_ids = [int(t) for t in turn["completion_ids"]]
    cut = turn.get("finish_reason") == "length"
    tokens = {"prompt_ids": prompt_ids, "prompt_mask": [0] * len(prompt_ids), "completion_ids": completion_ids,
              "completion_mask": [1] * len(completion_ids),
              "completion_logprobs": [float(x) for x in turn["completion_logprobs"]]}  # fmt: skip
    assistant = completion[-1]
    finish = "length" if cut else "tool_calls" if assistant.get("tool_calls") else "stop"
    response = {"id": f"{turn['episode_id']}:{int(turn['step_idx'])}", "created": 0, "model": experiment,
                "usage": {"prompt_tokens": len(prompt_ids), "reasoning_tokens": 0,
                          "completion_tokens": len(completion_ids),
                          "total_tokens": len(prompt_ids) + len(completion_ids)},
                "message": {**assistant, "finish_reason": finish, "is_truncated": cut, "tokens": tokens}}  # fmt: skip
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
        },  # fmt: skip
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
    calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in parsed.tool_calls]  # fmt: skip
    return {
        "role": "assistant",
        **({"content": parsed.content} if parsed.content else {}),
        "tool_calls": calls,
    }


def rebuilt_messages(rows: pd.DataFrame, system: str | None) -> list[tuple[list, list]]:
    """(prompt, completion) messages of each row of a round played here (see the module doc)."""
    out, state = [], {}
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


def source_messages(rows: pd.DataFrame, path: Path, format_: str) -> list[tuple[list, list]]:
    """(prompt, completion) messages of each row of an imported round, from the staged source file
    (`results.jsonl` for "classic", `traces.jsonl` for "v1"), found by the row's `source_ref`."""
    lines = dict(read_json_lines(path))
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
