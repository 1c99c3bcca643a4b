"""The chat example through the real CLI, Dagster instance, DuckDB catalog and MLflow store, and the same
experiment with its turns rendered as one growing conversation (`prompt_format = "chat"`): both rounds land
like any other, and the conversation round keeps every sampled token id from turn to turn."""

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from creditline.store import LineageStore, read_parquet
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat-maze.toml"
EXPERIMENT, CONVERSATION = "chat-maze", "chat-maze-conversation"
KINDS = {"episodes", "steps", "scores", "advantages", "checkpoint", "training", "evaluation"}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chat")
    data_root = folder / "data"
    conversation = folder / "conversation.toml"  # the example, smaller, as one conversation per episode
    text = EXAMPLE.read_text()
    for old, new in (('name = "chat-maze"', f'name = "{CONVERSATION}"'), ("tasks_per_round = 64", "tasks_per_round = 8"),
                     ('prompt_format = "plain"', 'prompt_format = "chat"'), ("num_tasks = 100", "num_tasks = 16")):  # fmt: skip
        assert old in text
        text = text.replace(old, new)
    conversation.write_text(
        text + "\n[warm_start]\nepisodes = 16\nepochs = 2\n"
    )  # and a warm-started round 0
    for config in (EXAMPLE, conversation):
        result = creditline(data_root, "run", "--config", str(config), "--rounds", "1")
        assert result.returncode == 0, result.stderr[-3000:]
    return data_root, LineageStore(data_root / "lineage.duckdb")


def test_the_initial_policy_is_the_built_in_chat_model_at_random_init(finished):
    _, store = finished
    initial = store.initial_policy(EXPERIMENT)
    assert initial.meta["source"] == "builtin:chat" and "warm_start" not in initial.meta
    tokenizer = AutoTokenizer.from_pretrained(initial.path)
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    assert AutoModelForCausalLM.from_pretrained(initial.path).config.model_type == "qwen2"


def test_a_warm_start_is_the_round_0_checkpoint_and_its_lineage_says_so(finished):
    _, store = finished
    initial = store.initial_policy(CONVERSATION)
    warm = initial.meta["warm_start"]
    assert warm["episodes"] == 16 and warm["epochs"] == 2 and warm["loss_after"] < warm["loss_before"]
    assert warm["started_from"] != initial.content_hash  # the random init it was fitted from
    assert "started_from_path" not in warm  # a built-in policy: nothing of the user's was left in place


@pytest.mark.parametrize("experiment", [EXPERIMENT, CONVERSATION])
def test_each_round_is_multi_turn_with_multi_token_actions_and_verifies(finished, experiment):
    _, store = finished
    steps = read_parquet(store.artifact(experiment, 1, "steps").path)
    assert steps["step_idx"].max() >= 5 and steps["completion_ids"].map(len).max() > 1
    assert set(steps["finish_reason"]) == {"stop", "length"}  # random init: some answers end, some are cut
    assert KINDS <= {record.kind for record in store.artifacts(experiment, 1)}
    assert store.verify(experiment) == []
    assert [e.round for e in store.evaluations(experiment)] == [0, 1]
    assert AutoTokenizer.from_pretrained(store.artifact(experiment, 1, "checkpoint").path).chat_template


def test_the_conversation_round_keeps_every_sampled_token_id_turn_to_turn(finished):
    _, store = finished
    steps = read_parquet(store.artifact(CONVERSATION, 1, "steps").path)
    for _, episode in steps.groupby("episode_id"):
        rows = episode.sort_values("step_idx").to_dict("records")
        for before, after in zip(rows, rows[1:], strict=False):
            sampled = [*before["prompt_ids"], *before["completion_ids"]]
            assert list(after["prompt_ids"][: len(sampled)]) == sampled


def test_a_conversation_exports_to_prime_rl_as_one_sample_per_episode(finished, tmp_path):
    data_root, store = finished
    out = tmp_path / "prime-rl.jsonl"
    result = creditline(
        data_root, "export", "--experiment", CONVERSATION, "--format", "prime-rl", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    steps = read_parquet(store.artifact(CONVERSATION, 1, "steps").path)
    assert len(samples) == steps["episode_id"].nunique()
    # positional TrainingSamples (token_ids, mask, ...), one per episode, by episode id
    for episode_id, (token_ids, mask, *_) in zip(sorted(steps["episode_id"].unique()), samples, strict=True):
        episode = steps[steps["episode_id"] == episode_id].sort_values("step_idx")
        last = episode.iloc[-1]
        assert token_ids == [*last["prompt_ids"], *last["completion_ids"]]  # the whole conversation
        sampled = [t for t, m in zip(token_ids, mask, strict=True) if m]
        assert sampled == [t for ids in episode["completion_ids"] for t in ids]
