"""Reading verifiers' v1 output (`traces.jsonl`, verifiers ≥ 0.4), and writing advantages back into it.

One JSON line per episode: `{id, task: {key, data, ...}, group?: {id}, traces: [Trace]}`. A trace holds a
message graph: `nodes[i] = {parent, message, sampled, token_ids, mask, logprobs, advantages?}`, where each
node keeps only the token ids it adds, so a model call's prompt + completion is the concatenation of the
node ids from the root to its assistant node. On a sampled (assistant) node, `token_ids` is the
generation-prompt scaffold (`mask` false) followed by the sampled completion (`mask` true); `logprobs`
and `advantages` cover only the sampled tokens (length `sum(mask)`). `calls[i].node` links each model
call to its node, `calls[i].sampling` holds the sampling arguments it was made with (`temperature`,
`top_p`, `top_k`, imported per step), and `calls[i].finish_reason == "length"` marks truncation. The
trace's reward is
Σ score × weight over `rewards` (not stored); `metrics` are unweighted. Lines are written with
`exclude_none`: an unassigned `advantages` is an absent key.

Import: one rollout per trace, one step per sampled node in call order. The group is the episode's
`group.id` if a consumer set one, else `task.key` (eval runs: rollouts of one task share it). A node's
`advantages` (one per sampled token; they may vary per token, verifiers #2245) are kept per token as the
step's preset `completion_advantages` (`ImportedStep.preset_completion_advantages`); the step's scalar
preset (`preset_advantage`, the `advantage` column) is their mean (the value itself where all are equal).
Episodes with several traces (several agents) are refused: their credit is per agent, not yet modelled.

Export (`fill_advantages`): each imported step's per-token advantages go onto its node; nodes without a
step keep no `advantages` (verifiers' "unassigned", not zero).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path

from creditline.interop.imported_rollouts import (
    ImportedRollout,
    ImportedStep,
    SourceError,
    float_list,
    int_list,
    message_text,
    number,
    read_json_lines,
    sampling_settings,
)

TRACES = "traces.jsonl"


def read_v1(path: Path, *, for_training: bool = True) -> list[ImportedRollout]:
    """The rollouts of one `traces.jsonl`; see the module docstring. `for_training=False`: greedy sampling
    is accepted (`imported_rollouts.sampling_settings`)."""
    rollouts = []
    for n, episode in read_json_lines(path):
        where = f"{path} line {n}"
        traces = episode.get("traces")
        if not isinstance(traces, list) or not traces:
            raise SourceError(where, "traces", "missing or empty (an episode that produced no trace)")
        if len(traces) > 1:
            raise SourceError(
                where,
                "traces",
                f"{len(traces)} traces (a multi-agent episode); only single-agent episodes can be imported",
            )
        trace = traces[0]
        if not isinstance(trace, dict):
            raise SourceError(where, "traces[0]", "expected an object")
        rollouts.append(_rollout(episode, trace, where, n, for_training))
    return rollouts


def _rollout(episode: dict, trace: dict, where: str, line: int, for_training: bool) -> ImportedRollout:
    group_info, task = episode.get("group") or {}, trace.get("task") or {}
    if not isinstance(group_info, dict) or not isinstance(task, dict):
        raise SourceError(
            where, "group" if not isinstance(group_info, dict) else "traces[0].task", "expected an object"
        )
    group = group_info.get("id") or task.get("key")
    if not group:
        raise SourceError(
            where, "task.key", "missing (and no group.id): cannot tell which rollouts share a task"
        )
    rewards = trace.get("rewards") or {}
    if not isinstance(rewards, dict):
        raise SourceError(where, "traces[0].rewards", "expected an object of name → {score, weight}")
    reward, components = 0.0, {}
    for name, value in rewards.items():
        if value is None:
            continue
        if not isinstance(value, dict):
            raise SourceError(where, f"traces[0].rewards.{name}", "expected an object {score, weight}")
        score = number(value.get("score"), where, f"traces[0].rewards.{name}.score")
        reward += score * number(value.get("weight", 1.0), where, f"traces[0].rewards.{name}.weight")
        components[name] = score
    for name, value in (trace.get("metrics") or {}).items():
        if value is not None:
            components[name] = number(value, where, f"traces[0].metrics.{name}")
    nodes = trace.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise SourceError(where, "traces[0].nodes", "missing or empty")
    if (bad := next((i for i, node in enumerate(nodes) if not isinstance(node, dict)), None)) is not None:
        raise SourceError(where, f"traces[0].nodes[{bad}]", "expected an object")
    if not isinstance(trace.get("calls") or [], list):
        raise SourceError(where, "traces[0].calls", "expected a list")
    calls = [c for c in trace.get("calls") or [] if isinstance(c, dict) and c.get("node") is not None]
    sampled = [c["node"] for c in calls] or [i for i, node in enumerate(nodes) if node.get("sampled")]
    truncated = {c["node"] for c in calls if c.get("finish_reason") == "length"}
    sampling = {
        c["node"]: sampling_settings(c.get("sampling"), where, f"traces[0].calls[{i}].sampling", for_training)
        for i, c in enumerate(trace.get("calls") or [])
        if c in calls
    }
    steps, previous = [], None
    for index in sampled:
        step = _step(nodes, index, where, line, truncated=index in truncated, previous=previous)
        steps.append(replace(step, **sampling[index]) if index in sampling else step)
        previous = index
    return ImportedRollout(
        str(group),
        str(trace.get("id") or episode.get("id") or where),
        reward,
        components,
        trace.get("stop_condition"),
        tuple(steps),
        where,
    )


def _path(nodes: list, index: int, where: str) -> list[int]:
    """Node indices from the root to `index` (inclusive)."""
    path: list[int] = []
    current = index
    while current is not None:
        if not isinstance(current, int) or not 0 <= current < len(nodes) or current in path:
            raise SourceError(
                where,
                f"traces[0].nodes[{path[-1] if path else index}].parent",
                f"{current!r} is not a node of this trace (or forms a loop)",
            )
        path.append(current)
        current = nodes[current].get("parent")
    return path[::-1]


def _step(
    nodes: list, index: int, where: str, line: int, *, truncated: bool, previous: int | None
) -> ImportedStep:
    field = f"traces[0].nodes[{index}]"
    node = nodes[index]
    token_ids = int_list(node.get("token_ids"), where, f"{field}.token_ids")
    mask = node.get("mask")
    if not token_ids:
        raise SourceError(
            where,
            f"{field}.token_ids",
            "empty: the run was saved without token ids (an "
            "endpoint that returns them is needed, e.g. vLLM or `creditline serve`)",
        )
    if (
        not isinstance(mask, list)
        or len(mask) != len(token_ids)
        or not all(isinstance(m, bool) for m in mask)
    ):
        raise SourceError(where, f"{field}.mask", f"expected {len(token_ids)} booleans, one per token id")
    sampled = sum(bool(m) for m in mask)
    if sampled == 0 or not all(mask[len(mask) - sampled :]):
        raise SourceError(
            where,
            f"{field}.mask",
            "the sampled tokens must be the node's last tokens (scaffold first, then the completion)",
        )
    logprobs = float_list(node.get("logprobs"), where, f"{field}.logprobs")
    if len(logprobs) != sampled:
        raise SourceError(where, f"{field}.logprobs", f"{len(logprobs)} values for {sampled} sampled tokens")
    preset, per_token = None, None
    if node.get("advantages") is not None:
        per_token = float_list(node["advantages"], where, f"{field}.advantages")
        if len(per_token) != sampled:
            raise SourceError(
                where,
                f"{field}.advantages",
                f"{len(per_token)} values for {sampled} sampled "
                "tokens (one per sampled token, the layout of logprobs)",
            )
        preset = per_token[0] if len(set(per_token)) == 1 else math.fsum(per_token) / sampled
    path = _path(nodes, index, where)
    context = [
        t
        for i in path[:-1]
        for t in int_list(nodes[i].get("token_ids"), where, f"traces[0].nodes[{i}].token_ids")
    ]
    prompt_ids = context + token_ids[: len(token_ids) - sampled]
    new_from = 0
    if previous is not None and previous in path:
        new_from = path.index(previous) + 1  # the nodes after the previous call's answer
    observation = "\n".join(message_text(nodes[i].get("message") or {}) for i in path[new_from:-1])
    new_ids = [t for i in path[new_from:-1] for t in nodes[i]["token_ids"]] + token_ids[
        : len(token_ids) - sampled
    ]
    return ImportedStep(
        observation=observation,
        action=message_text(node.get("message") or {}).removeprefix("assistant: "),
        prompt_ids=prompt_ids,
        new_prompt_ids=new_ids,
        completion_ids=token_ids[len(token_ids) - sampled :],
        completion_logprobs=logprobs,
        truncated=truncated,
        preset_reward=None,
        preset_advantage=preset,
        source_ref=f"{line}:{index}",
        preset_completion_advantages=per_token,
    )


def fill_advantages(path: Path, per_step: dict[str, list[float]]) -> list[str]:
    """The lines of `traces.jsonl` with each node named by a `source_ref` ("<line>:<node>") given its
    per-token advantages; other nodes keep none. Raises SourceError on a ref the file does not have, or a
    length that is not the node's number of sampled tokens."""
    out, used = [], set()
    for n, episode in read_json_lines(path):
        filled = copy.deepcopy(episode)
        for node_index, node in enumerate(filled["traces"][0]["nodes"]):
            ref = f"{n}:{node_index}"
            node.pop("advantages", None)
            if ref not in per_step:
                continue
            values = per_step[ref]
            sampled = sum(bool(m) for m in node.get("mask", []))
            if len(values) != sampled:
                raise SourceError(
                    f"{path} line {n}",
                    f"traces[0].nodes[{node_index}].advantages",
                    f"{len(values)} advantages for {sampled} sampled tokens",
                )
            node["advantages"] = [float(v) for v in values]
            used.add(ref)
        out.append(json.dumps(filled, ensure_ascii=False))
    if missing := sorted(set(per_step) - used):
        raise SourceError(
            str(path),
            "source_ref",
            f"{len(missing)} step(s) name nodes the file does not have, first {missing[0]!r}",
        )
    return out
