"""The chat example through the real CLI, Dagster instance, DuckDB catalog and MLflow store: a warm-started
built-in chat policy plays a multi-turn maze with free-text actions, and the round lands like any other."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from creditline.store import LineageStore, read_parquet

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat-maze.toml"
EXPERIMENT = "chat-maze"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    data_root = tmp_path_factory.mktemp("data")
    env = {**os.environ, "CREDITLINE_DATA_ROOT": str(data_root)}
    result = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--config", str(EXAMPLE), "--rounds", "1"],
                            env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return data_root, LineageStore(data_root / "lineage.duckdb")


def test_the_initial_policy_is_the_warm_started_chat_model_and_its_lineage_says_so(finished):
    _, store = finished
    initial = store.initial_policy(EXPERIMENT)
    assert initial.meta["source"] == "builtin:chat"
    warm = initial.meta["warm_start"]
    assert warm["episodes"] == 128 and warm["loss_after"] < warm["loss_before"] / 3
    assert warm["started_from"] != initial.content_hash
    tokenizer = AutoTokenizer.from_pretrained(initial.path)
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    assert AutoModelForCausalLM.from_pretrained(initial.path).config.model_type == "qwen2"


def test_the_round_is_multi_turn_with_free_text_actions_and_kept_token_ids(finished):
    _, store = finished
    steps = read_parquet(store.artifact(EXPERIMENT, 1, "steps").path)
    assert steps["step_idx"].max() >= 5 and steps["completion_ids"].map(len).max() > 1
    assert set(steps["finish_reason"]) <= {"stop", "length"} and steps["valid_action"].mean() > 0.9
    for _, episode in steps.groupby("episode_id"):
        rows = episode.sort_values("step_idx").to_dict("records")
        for before, after in zip(rows, rows[1:], strict=False):
            sampled = [*before["prompt_ids"], *before["completion_ids"]]
            assert list(after["prompt_ids"][: len(sampled)]) == sampled


def test_the_round_has_every_artifact_and_verifies(finished):
    _, store = finished
    kinds = {record.kind for record in store.artifacts(EXPERIMENT, 1)}
    assert {"episodes", "steps", "scores", "advantages", "checkpoint", "training", "evaluation"} <= kinds
    assert store.verify(EXPERIMENT) == []
    assert [e.round for e in store.evaluations(EXPERIMENT)] == [0, 1]
    checkpoint = store.artifact(EXPERIMENT, 1, "checkpoint")
    assert AutoTokenizer.from_pretrained(
        checkpoint.path
    ).chat_template  # the template travels with the policy
