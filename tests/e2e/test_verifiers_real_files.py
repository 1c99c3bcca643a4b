"""Files written by verifiers itself (0.3.1 classic, 0.4.0 v1; tests/data/verifiers, made by
scripts/verifiers against `creditline serve`) import to the rewards, tokens and advantages verifiers saved.

The expected values are read from the raw JSON here, independently of the readers: each rollout's reward
(classic `reward`; v1 Σ score × weight over `rewards`), each model call's sampled token ids and log-probs,
and, for the classic files, verifiers' own step `advantage` (R − group mean, `Rubric.score_group`), which
is what GRPO without std normalisation must give on every token of the step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from creditline.config import AdvantageSettings
from creditline.credit.round_advantages import step_advantages
from creditline.credit.rubrics import RUBRICS
from creditline.interop.verifiers_import import read_source, source_tables
from creditline.round import training_rows
from creditline.store import LineageStore, read_parquet
from tests.e2e.cli import creditline

DATA = Path(__file__).resolve().parents[1] / "data" / "verifiers"
POLICY = DATA / "policy"
CASES = ["single_turn", "tool_calls", "step_rewards"]


def raw(version: str, case: str) -> list[dict]:
    name = "results.jsonl" if version == "v03" else "traces.jsonl"
    return [
        json.loads(line) for line in (DATA / version / case / name).read_text().splitlines() if line.strip()
    ]


def expected_calls(version: str, case: str) -> dict[str, tuple[list[int], list[float]]]:
    """source_ref → (sampled token ids, their log-probs), straight from the file."""
    calls = {}
    for n, line in enumerate(raw(version, case), start=1):
        if version == "v03":
            for t, step in enumerate(line["trajectory"]):
                calls[f"{n}:{t}"] = (step["tokens"]["completion_ids"], step["tokens"]["completion_logprobs"])
        else:
            for i, node in enumerate(line["traces"][0]["nodes"]):
                if node.get("sampled"):
                    ids = [t for t, m in zip(node["token_ids"], node["mask"], strict=True) if m]
                    calls[f"{n}:{i}"] = (ids, node["logprobs"])
    return calls


def expected_rewards(version: str, case: str) -> list[float]:
    if version == "v03":
        return sorted(line["reward"] for line in raw(version, case))
    return sorted(
        sum(r["score"] * r["weight"] for r in line["traces"][0]["rewards"].values())
        for line in raw(version, case)
    )


@pytest.mark.parametrize("version", ["v03", "v04"])
@pytest.mark.parametrize("case", CASES)
def test_real_files_keep_every_sampled_token_and_reward(version, case):
    source = read_source(DATA / version / case)
    assert source.format == ("classic" if version == "v03" else "v1")
    tables = source_tables(source, "real", 1)
    steps = tables.steps.set_index("source_ref")
    calls = expected_calls(version, case)
    assert sorted(steps.index) == sorted(calls)  # one step per model call, none lost
    for ref, (ids, logprobs) in calls.items():
        assert steps.at[ref, "completion_ids"] == ids and steps.at[ref, "completion_logprobs"] == logprobs
    assert (tables.steps["temperature"] == 1.0).all()  # what the runs were sampled at (scripts/verifiers)
    # the return is verifiers' reward, always; it arrives at the last step unless the environment set
    # step rewards itself (0.3.1's step_rewards env: test_preset_step_rewards_and_node_advantages_are_kept)
    assert sorted(tables.episodes["env_return"]) == pytest.approx(expected_rewards(version, case))
    if not (version == "v03" and case == "step_rewards"):
        returns = tables.steps.groupby("episode_id")["step_reward"].sum()
        assert returns.reindex(tables.episodes["episode_id"]).to_numpy() == pytest.approx(
            tables.episodes["env_return"].to_numpy()
        )
        assert (tables.steps.loc[~tables.steps["done"], "step_reward"] == 0).all()


@pytest.mark.parametrize("case", CASES)
def test_grpo_without_std_gives_verifiers_own_step_advantages_on_every_token(case):
    tables = source_tables(read_source(DATA / "v03" / case), "real", 1)
    scores = RUBRICS["env"].score(tables.episodes, tables.steps)
    advantages = step_advantages(tables.steps, scores, AdvantageSettings("grpo", {"norm_by_std": False}))
    rows = training_rows(tables.steps, advantages).merge(
        advantages[["episode_id", "step_idx", "completion_length"]]
    )
    saved = {f"{n}:{t}": step["advantage"] for n, line in enumerate(raw("v03", case), start=1)
             for t, step in enumerate(line["trajectory"])}  # fmt: skip
    for ref, tokens, length in zip(
        rows["source_ref"], rows["completion_advantages"], rows["completion_length"], strict=True
    ):
        assert list(tokens) == pytest.approx([saved[ref]] * length, abs=1e-12)


def test_tool_call_turns_keep_the_calls_and_the_tool_replies():
    for version in ("v03", "v04"):
        steps = source_tables(read_source(DATA / version / "tool_calls"), "real", 1).steps
        calls = steps[steps["action"].str.contains(r"add\(", regex=True)]
        assert len(calls) >= 10  # the served policy calls `add` in most rollouts
        replies = steps[steps["step_idx"] == 1]
        assert (replies["observation"].str.startswith("tool: ")
                | replies["observation"].str.contains("tool_response")).all()  # fmt: skip
        # multi-turn prefix extension: the second call's prompt starts with the first call's prompt + completion
        for _, episode in steps.groupby("episode_id"):
            if len(episode) == 2:
                first, second = episode.sort_values("step_idx").to_dict("records")
                assert second["prompt_ids"][: len(first["prompt_ids"]) + len(first["completion_ids"])] == \
                    first["prompt_ids"] + first["completion_ids"]  # fmt: skip


def test_preset_step_rewards_and_node_advantages_are_kept():
    classic = source_tables(read_source(DATA / "v03" / "step_rewards"), "real", 1)
    lines = raw("v03", "step_rewards")
    steps = classic.steps.set_index("source_ref")
    for n, line in enumerate(lines, start=1):
        last = len(line["trajectory"]) - 1
        for t, step in enumerate(line["trajectory"]):
            # the environment's own step reward where it set one (≠ verifiers' fill, R), else R at the
            # last step; never added into the return
            filled = line["reward"] if t == last else 0.0
            expected = step["reward"] if step["reward"] != line["reward"] else filled
            assert steps.at[f"{n}:{t}", "step_reward"] == pytest.approx(expected)
    assert sorted(classic.episodes["env_return"]) == pytest.approx(sorted(line["reward"] for line in lines))

    v1 = source_tables(read_source(DATA / "v04" / "step_rewards"), "real", 1)
    scores = RUBRICS["env"].score(v1.episodes, v1.steps)
    advantages = step_advantages(v1.steps, scores, AdvantageSettings("gigpo", {}))
    rows = training_rows(v1.steps, advantages).set_index("source_ref")
    preset_nodes = {f"{n}:{i}": node["advantages"] for n, line in enumerate(raw("v04", "step_rewards"), start=1)
                    for i, node in enumerate(line["traces"][0]["nodes"]) if "advantages" in node}  # fmt: skip
    assert len(preset_nodes) == 13
    for ref, values in preset_nodes.items():
        assert list(rows.at[ref, "completion_advantages"]) == values  # kept, token for token
    filled = rows.drop(index=list(preset_nodes))
    assert filled["preset_advantage"].isna().all() and len(filled) == 15  # the answers: the estimator's


@pytest.mark.slow
def test_real_files_import_train_and_export_through_the_cli(tmp_path):
    config = tmp_path / "real.toml"
    config.write_text(f'initial_policy = "{POLICY}"\nrounds = 2\n[advantages]\nestimator = "grpo"\n'
                      '[advantages.params]\nnorm_by_std = false\n[rollouts]\ntasks_per_round = 4\ngroup_size = 4\n'
                      "[train]\nepochs = 1\nminibatches = 2\n[eval]\nnum_tasks = 4\n")  # fmt: skip
    data = tmp_path / "data"
    first = creditline(
        data,
        "import",
        "verifiers",
        str(DATA / "v03" / "tool_calls"),
        "--experiment",
        "real",
        "--config",
        str(config),
    )
    assert first.returncode == 0, first.stderr
    second = creditline(data, "import", "verifiers", str(DATA / "v04" / "step_rewards" / "traces.jsonl"), "--experiment", "real",
                        "--config", str(config))  # fmt: skip
    assert second.returncode == 0 and "as real round 2" in second.stdout, second.stderr

    store = LineageStore(data / "lineage.duckdb")
    steps = read_parquet(store.artifact("real", 1, "steps").path)
    advantages = read_parquet(store.artifact("real", 1, "advantages").path)
    rows = training_rows(steps, advantages)
    saved = {f"{n}:{t}": step["advantage"] for n, line in enumerate(raw("v03", "tool_calls"), start=1)
             for t, step in enumerate(line["trajectory"])}  # fmt: skip
    for ref, tokens in zip(rows["source_ref"], rows["completion_advantages"], strict=True):
        assert list(tokens) == pytest.approx([saved[ref]] * len(tokens), abs=1e-12)
    initialized_from = [h for h, relation in store.artifact("real", 2, "checkpoint").parents
                        if relation == "initialized_from"]  # fmt: skip
    assert initialized_from == [store.artifact("real", 1, "checkpoint").content_hash]

    out = tmp_path / "traces.jsonl"
    assert (
        creditline(
            data,
            "export",
            "--experiment",
            "real",
            "--round",
            "2",
            "--format",
            "verifiers-v1",
            "--out",
            str(out),
        ).returncode
        == 0
    )
    exported, original = [json.loads(x) for x in out.read_text().splitlines()], raw("v04", "step_rewards")
    for before, after in zip(original, exported, strict=True):
        for node_before, node_after in zip(
            before["traces"][0]["nodes"], after["traces"][0]["nodes"], strict=True
        ):
            assert ("advantages" in node_after) == node_before.get("sampled", False)
            if "advantages" in node_before:
                assert node_after["advantages"] == node_before["advantages"]  # the environment's own credit
    verify = creditline(data, "verify", "--experiment", "real")
    assert verify.returncode == 0 and "0 problem(s)" in verify.stdout, verify.stdout
