"""Exports read by their consumers' own code: verifiers 0.3.1's types (pr941), verifiers 0.4.0's trace reader
(prime-rl-rollouts) and prime-rl's branch rule (verifiers-v1 vs prime-rl), on rounds imported from files
verifiers itself wrote (tests/data/verifiers) and on a round played here (test_export.STEPS).

The verifiers packages run in their own virtual environments (.venv-verifiers-0.3, .venv-verifiers-0.4), as
subprocesses given the exported files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import msgspec
import pandas as pd
import pytest

from core.test_export import ADVANTAGES, SCORES, STEPS, TrainingSample
from creditline.interop import export
from creditline.interop.export import export_lines
from creditline.interop.verifiers_import import read_source, source_tables

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "verifiers"
VENVS = {"0.3": ROOT / ".venv-verifiers-0.3", "0.4": ROOT / ".venv-verifiers-0.4"}

LOAD_ROLLOUT_OUTPUTS = """
import json, sys, typing
from pydantic import TypeAdapter
from verifiers.legacy.types import Messages, RolloutOutput, RolloutTiming, TrajectoryStep
hints = typing.get_type_hints(RolloutOutput)
required = ["example_id", "prompt", "completion", "reward", "timing", "is_completed", "is_truncated", "metrics"]
roles = []
for n, text in enumerate(open(sys.argv[1]), start=1):
    line = json.loads(text)
    assert all(k in line for k in required), (n, [k for k in required if k not in line])
    for key, value in line.items():
        if key in hints and key != "trajectory":
            TypeAdapter(hints[key]).validate_json(json.dumps(value), strict=True)
    RolloutTiming.model_validate(line["timing"])
    for step in TypeAdapter(list[TrajectoryStep]).validate_json(json.dumps(line["trajectory"]), strict=True):
        TypeAdapter(Messages).validate_python(step["prompt"])
        roles.append([type(m).__name__ for m in step["prompt"] + step["completion"]])
print(json.dumps(roles))
"""

READ_EPISODES = """
import sys
from pathlib import Path
from verifiers.v1 import WireTrace
from verifiers.v1.utils.trace_store import read_episodes
print(len(read_episodes(Path(sys.argv[1]), WireTrace)))
"""


def run_in(version: str, script: str, *args) -> str:
    python = VENVS[version] / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{VENVS[version]} is not installed")
    done = subprocess.run(
        [str(python), "-c", script, *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def imported(folder: Path):
    """An imported round's steps, scores and advantages (reward − group mean, a step-dependent nudge so that
    steps differ), and the staged file."""
    source = read_source(folder)
    t = source_tables(source, "x", 1)
    reward = t.episodes.set_index("episode_id")["env_return"]
    steps = t.steps.assign(episode_reward=t.steps["episode_id"].map(reward))
    centred = steps["episode_reward"] - steps.groupby("group_id")["episode_reward"].transform("mean")
    scores = steps[["episode_id", "step_idx", "step_reward", "episode_reward"]].assign(rubric_version="env@1")
    advantages = steps[["episode_id", "step_idx"]].assign(advantage=centred + 0.125 * steps["step_idx"],
                                                         estimator="grpo")  # fmt: skip
    name = "traces.jsonl" if source.format == "v1" else "results.jsonl"
    return t.steps, scores, advantages, folder / name, source.format


def test_pr941_lines_load_as_verifiers_031_rollout_outputs(tmp_path):
    out = tmp_path / "results.jsonl"
    out.write_text(
        "".join(x + "\n" for x in export_lines("pr941", "exp", 1, STEPS, SCORES, ADVANTAGES, system="s"))
    )
    roles = json.loads(run_in("0.3", LOAD_ROLLOUT_OUTPUTS, out))
    assert roles[1] == ["SystemMessage", "UserMessage", "AssistantMessage", "UserMessage", "AssistantMessage"]


@pytest.mark.parametrize("version", ["v03", "v04"])
def test_pr941_of_an_imported_round_keeps_verifiers_own_messages(tmp_path, version):
    steps, scores, advantages, source, format_ = imported(DATA / version / "tool_calls")
    lines = [json.loads(x) for x in export_lines("pr941", "x", 1, steps, scores, advantages, 1.0, source,
                                                  source_format=format_)]  # fmt: skip
    out = tmp_path / "results.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    roles = json.loads(run_in("0.3", LOAD_ROLLOUT_OUTPUTS, out))
    assert ["SystemMessage", "UserMessage", "AssistantMessage", "ToolMessage", "AssistantMessage"] in roles
    second = next(step for line in lines for step in line["trajectory"][1:])
    tool = second["prompt"][3]
    assert tool["role"] == "tool" and tool["tool_call_id"] == second["prompt"][2]["tool_calls"][0]["id"]
    for line in lines:
        assert {step["reward"] for step in line["trajectory"]} == {line["reward"]}  # verifiers' fill
    saved = [json.loads(x) for x in source.read_text().splitlines()]
    firsts = steps.drop_duplicates("episode_id")["source_ref"].map(lambda ref: int(ref.split(":")[0]))
    if version == "v03":  # the very messages verifiers saved, and its rollouts' own fields
        refs = steps["source_ref"].tolist()
        ours = [step for line in lines for step in line["trajectory"]]
        for ref, step in zip(refs, ours, strict=True):
            n, t = map(int, ref.split(":"))
            kept = saved[n - 1]["trajectory"][t]
            assert (step["prompt"], step["completion"]) == (kept["prompt"], kept["completion"])
        for line, n in zip(lines, firsts, strict=True):
            kept = saved[n - 1]
            for key in ("answer", "error", "timing", "stop_condition", "tool_defs", "token_usage"):
                assert line[key] == kept[key], key
            assert {k: line[k] for k in line["metrics"]} == line["metrics"]  # flattened, as verifiers does
    else:  # a v1 trace's fields in 0.3.x's shapes
        for line, n in zip(lines, firsts, strict=True):
            trace = saved[n - 1]["traces"][0]
            assert line["stop_condition"] == trace["stop_condition"] == "agent_completed"
            assert [t["name"] for t in line["tool_defs"]] == [t["name"] for t in trace["tools"]] == ["add"]
            calls = trace["calls"]
            assert line["timing"]["model"]["spans"][0]["start"] == calls[0]["time"]["start"]
            assert line["timing"]["start_time"] == trace["timing"]["start"] and line["timing"]["total"] > 0
            assert line["token_usage"]["input_tokens"] == sum(c["usage"]["prompt_tokens"] for c in calls)
            assert line["token_usage"]["final_input_tokens"] == trace["num_input_tokens"]


def test_prime_rl_rollouts_are_read_by_verifiers_040(tmp_path):
    steps, scores, advantages, source, _ = imported(DATA / "v04" / "step_rewards")
    advantages.loc[advantages.episode_id == advantages.episode_id.iloc[0], "advantage"] = 0.0
    files = export.export_rollout_files(7, steps, scores, advantages, source)
    assert set(files) == {"step_7/train/all/traces.jsonl", "step_7/train/effective/traces.jsonl"}
    for relative, lines in files.items():
        (tmp_path / relative).parent.mkdir(parents=True)
        (tmp_path / relative).write_text("".join(x + "\n" for x in lines))
        assert int(run_in("0.4", READ_EPISODES, (tmp_path / relative).parent)) == len(lines)
    every, effective = files["step_7/train/all/traces.jsonl"], files["step_7/train/effective/traces.jsonl"]
    assert len(every) == len(source.read_text().splitlines()) and len(effective) == len(every) - 1
    for line in map(json.loads, effective):  # each effective episode carries a nonzero advantage
        assert any(v != 0.0 for node in line["traces"][0]["nodes"] for v in node.get("advantages", []))


def trace_to_samples(episode: dict) -> list[dict]:
    """prime-rl's `trace_to_samples` rule: one sample per root-to-leaf branch (cut after its last sampled
    node), token ids and mask concatenated along it, each node's advantages spread over its sampled tokens
    (0.0 elsewhere)."""
    nodes = episode["traces"][0]["nodes"]
    parents = {node.get("parent") for node in nodes}
    samples = []
    for leaf in (i for i in range(len(nodes)) if i not in parents):
        path, current = [], leaf
        while current is not None:
            path.append(current)
            current = nodes[current].get("parent")
        path = path[::-1]
        path = path[: max(k for k, i in enumerate(path) if nodes[i].get("sampled")) + 1]
        sample = {"token_ids": [], "mask": [], "advantages": []}
        for i in path:
            node, values = nodes[i], iter(nodes[i].get("advantages") or [])
            sample["token_ids"] += node["token_ids"]
            sample["mask"] += node["mask"]
            sample["advantages"] += [next(values, 0.0) if m else 0.0 for m in node["mask"]]
        samples.append(sample)
    return samples


@pytest.mark.parametrize("version", ["step_rewards", "tool_calls"])
def test_prime_rls_branch_rule_on_our_verifiers_v1_export_gives_our_prime_rl_samples(version):
    steps, scores, advantages, source, _ = imported(DATA / "v04" / version)
    args = ("x", 1, steps, scores, advantages, 1.0, source)
    branched = [s for x in export_lines("verifiers-v1", *args) for s in trace_to_samples(json.loads(x))]
    ours = [msgspec.json.decode(x, type=TrainingSample, strict=True)
            for x in export_lines("prime-rl", *args, env_name="e")]  # fmt: skip
    # ours are ordered by episode id, the traces by line: compare as sets of (tokens, mask, advantages)
    key = lambda s: json.dumps([s["token_ids"], s["mask"], s["advantages"]])  # noqa: E731
    assert sorted(map(key, branched)) == sorted(
        key({"token_ids": s.token_ids, "mask": s.mask, "advantages": s.advantages}) for s in ours
    )
    assert not pd.isna(advantages["advantage"]).any()
