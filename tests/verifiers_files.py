"""verifiers-shaped files written by the tests: classic `results.jsonl` lines and v1 `traces.jsonl` episodes.

Small and explicit, so expected tables can be worked out by hand; the shapes follow verifiers 0.3.x
(`RolloutOutput` with `trajectory`) and 0.4.x (`Episode` with one `Trace` of message nodes). Token ids stay
below 20 so that the built-in tiny policy can train on them. Files written by verifiers itself live in
tests/data/verifiers/.
"""

from __future__ import annotations

import json
from pathlib import Path

SYSTEM, QUESTION, SCAFFOLD, TOOL_REPLY = [1, 2], [3, 4], [9], [5, 6]


def classic_line(example: int, trajectory_id: str, reward: float, completions: list[list[int]], *,
                 step_rewards=None, step_advantages=None, truncated_last=False) -> dict:  # fmt: skip
    """One rollout of `len(completions)` model calls; step t's prompt is the previous prompt + completion +
    TOOL_REPLY. `step_rewards` / `step_advantages`: what each saved step holds (default: verifiers' fill,
    the rollout's reward and None, which the reader treats as filled by `score_group`)."""
    steps, prompt_ids = [], QUESTION + [10 + example]
    for t, ids in enumerate(completions):
        last = t == len(completions) - 1
        steps.append({
            "prompt": [{"role": "user", "content": f"question {example}"}] + [{"role": "tool", "content": "3"}] * t,
            "completion": [{"role": "assistant", "content": f"answer {t}"}],
            "tokens": {"prompt_ids": prompt_ids, "prompt_mask": [0] * len(prompt_ids), "completion_ids": ids,
                       "completion_mask": [1] * len(ids), "completion_logprobs": [-0.25] * len(ids),
                       "overlong_prompt": False, "is_truncated": truncated_last and last},
            "reward": reward if step_rewards is None else step_rewards[t],
            "advantage": None if step_advantages is None else step_advantages[t],
            "is_truncated": truncated_last and last, "trajectory_id": trajectory_id, "extras": {},
        })  # fmt: skip
        prompt_ids = prompt_ids + ids + TOOL_REPLY
    return {"example_id": example, "task": "toy", "prompt": [], "completion": [], "answer": "", "info": {},
            "reward": reward, "metrics": {"correct": reward, "num_turns": float(len(completions))},
            "is_completed": True, "is_truncated": truncated_last, "stop_condition": "no_tools_called",
            "timing": {}, "trajectory": steps}  # fmt: skip


def v1_episode(task_key: str, trace_id: str, reward: float, completions: list[list[int]], *,
               advantages=None, truncated_last=False, weight=2.0) -> dict:  # fmt: skip
    """One single-agent episode: system, user, then per call an assistant node (SCAFFOLD + completion,
    sampled) followed by a tool node (TOOL_REPLY) except after the last. `rewards.correct` has score
    `reward` and weight `weight`; `advantages[t]`: a node's per-token advantages (absent if None)."""
    nodes = [{"message": {"role": "system", "content": "sys"}, "token_ids": SYSTEM, "mask": [False, False]},
             {"parent": 0, "message": {"role": "user", "content": "q"}, "token_ids": QUESTION,
              "mask": [False, False]}]  # fmt: skip
    calls = []
    for t, ids in enumerate(completions):
        node = {"parent": len(nodes) - 1, "sampled": True,
                "message": {"role": "assistant", "content": None,
                            "tool_calls": [{"id": "call_0", "type": "function", "name": "add", "arguments": "{}"}]},
                "token_ids": SCAFFOLD + ids, "mask": [False] + [True] * len(ids), "logprobs": [-0.5] * len(ids)}  # fmt: skip
        if advantages is not None and advantages[t] is not None:
            node["advantages"] = advantages[t]
        nodes.append(node)
        last = t == len(completions) - 1
        calls.append(
            {"node": len(nodes) - 1, "finish_reason": "length" if truncated_last and last else "tool_calls"}
        )
        if not last:
            nodes.append({"parent": len(nodes) - 1, "message": {"role": "tool", "tool_call_id": "call_0",
                          "content": "3", "name": "add"}, "token_ids": TOOL_REPLY, "mask": [False, False]})  # fmt: skip
    task = {"type": "Task", "data": {"q": task_key}, "key": task_key}
    trace = {"version": 1, "id": trace_id, "task": task, "nodes": nodes, "calls": calls,
             "rewards": {"correct": {"score": reward, "weight": weight}}, "metrics": {"turns": float(len(completions))},
             "is_completed": True, "ok": True, "stop_condition": "no_tool_calls"}  # fmt: skip
    return {"id": f"episode-{trace_id}", "task": task, "ok": True, "traces": [trace]}


def write_lines(path: Path, lines: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def classic_run(folder: Path) -> Path:
    """Two examples × two rollouts, two calls each: rewards (1, 0) and (0.5, 0.5)."""
    lines = [classic_line(0, "a", 1.0, [[7, 8], [7]]), classic_line(0, "b", 0.0, [[8, 8], [8]]),
             classic_line(1, "c", 0.5, [[7], [7, 7]]), classic_line(1, "d", 0.5, [[8], [7, 8]])]  # fmt: skip
    write_lines(folder / "results.jsonl", lines)
    (folder / "metadata.json").write_text(
        json.dumps({"env_id": "toy", "model": "tiny", "rollouts_per_example": 2})
    )
    return folder


def v1_run(folder: Path, advantages: dict | None = None) -> Path:
    """Two tasks × two rollouts, two calls each; rewards 1/0 (task "k1") and 0/0 (task "k2")."""
    advantages = advantages or {}
    lines = [v1_episode("k1", "t1", 1.0, [[7, 8], [7]], advantages=advantages.get("t1")),
             v1_episode("k1", "t2", 0.0, [[8], [8, 8]], advantages=advantages.get("t2")),
             v1_episode("k2", "t3", 0.0, [[7], [7]], advantages=advantages.get("t3")),
             v1_episode("k2", "t4", 0.0, [[8, 7], [7]], advantages=advantages.get("t4"))]  # fmt: skip
    return write_lines(folder / "traces.jsonl", lines).parent
