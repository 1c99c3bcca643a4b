"""The step-reward model through Dagster: PRIME's and SPA-RL's model trained each round, recorded, and read."""

import dagster as dg
import numpy as np
import pandas as pd
import pytest
from transformers import AutoConfig, AutoModelForSequenceClassification

from creditline.config import from_dict
from creditline.credit.reward_model import all_row_values, load_reward_model, reward_model_kind, step_batch
from creditline.policy.models import load_policy
from creditline.store.rounds import round_commits, round_problems
from tests.pipeline.test_round_assets import TINY, run_round

HF_CLASS = {"prime": "LlamaForCausalLM", "spa": "LlamaForSequenceClassification"}


@pytest.mark.parametrize("estimator", ["prime", "spa"])
def test_two_rounds_train_record_and_read_the_reward_model(tmp_path, estimator):
    name = f"rm-{estimator}"
    with dg.instance_for_test() as instance:
        for round_ in (1, 2):
            result, store = run_round(
                tmp_path, name, round_, instance, advantages={"estimator": estimator, "params": {}}
            )
            assert result.success
        initial = store.initial_policy(name)
        first, second = (store.artifact(name, r, "reward_model") for r in (1, 2))
        # round 1 starts from the initial policy, round 2 from round 1's model; both trained on their round
        assert dict(first.parents)[initial.content_hash] == "initialized_from"
        assert dict(second.parents)[first.content_hash] == "initialized_from"
        assert dict(second.parents)[store.artifact(name, 2, "steps").content_hash] == "trained_on"
        assert len({first.content_hash, second.content_hash, initial.content_hash}) == 3
        # a real HF folder of the right class, whose values are the recorded ones
        rewards = store.artifact(name, 2, "model_rewards")
        steps = pd.read_parquet(store.artifact(name, 2, "steps").path)
        table = pd.read_parquet(rewards.path)
        # the folder says what it is (transformers would load a causal LM as a classifier with a new head)
        assert AutoConfig.from_pretrained(second.path).architectures == [HF_CLASS[estimator]]
        assert type(AutoModelForSequenceClassification.from_pretrained(second.path)).__name__.startswith(
            "Llama"
        )
        kind = reward_model_kind(estimator)
        model, tokenizer = load_reward_model(kind, second.path, seed=0)
        batch = step_batch(steps, tokenizer.pad_token_id)
        context = kind.prepare(
            batch,
            from_dict(TINY).reward_model,
            load_policy(initial.path)[0] if kind.needs_reference else None,
        )
        direct = all_row_values(kind, model, batch, context, 16_384)
        merged = steps[["episode_id", "step_idx"]].merge(table, on=["episode_id", "step_idx"])
        np.testing.assert_allclose(merged["model_reward"], direct, rtol=1e-5, atol=1e-6)
        # the advantages were computed from those values, and the round's commit lists both artifacts
        advantages = store.artifact(name, 2, "advantages")
        assert dict(advantages.parents)[rewards.content_hash] == "computed_from"
        committed = round_commits(store, name)[2].artifacts
        assert (
            committed["reward_model"] == second.content_hash
            and committed["model_rewards"] == rewards.content_hash
        )
        assert round_problems(store, name) == []
        shown = instance.get_latest_materialization_event(dg.AssetKey("reward_model")).asset_materialization
        assert (
            shown.metadata["kind"].value == kind.name
            and shown.metadata["reward_model"].value == second.content_hash
        )


def test_a_round_without_a_model_estimator_records_no_reward_model(tmp_path):
    with dg.instance_for_test() as instance:
        result, store = run_round(tmp_path, "rm-none", 1, instance)
        assert result.success
        assert store.artifact("rm-none", 1, "reward_model") is None
        shown = instance.get_latest_materialization_event(dg.AssetKey("reward_model")).asset_materialization
        assert shown.metadata["reward_model"].value.startswith("none: estimator 'gigpo'")


def test_a_rerun_reuses_the_recorded_reward_model(tmp_path):
    """Running a finished round again trains nothing: same model, same values, same checkpoint."""
    with dg.instance_for_test() as instance:
        settings = {"advantages": {"estimator": "prime", "params": {}}}
        store = run_round(tmp_path, "rm-again", 1, instance, **settings)[1]
        kinds = ("reward_model", "model_rewards", "checkpoint")
        before = {k: store.artifact("rm-again", 1, k) for k in kinds}
        folder = tmp_path / "rm-again" / "r001" / "reward_model"
        written = sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())
        result, store = run_round(tmp_path, "rm-again", 1, instance, **settings)
        assert result.success
        assert {k: r.content_hash for k, r in before.items()} == {
            k: store.artifact("rm-again", 1, k).content_hash for k in kinds
        }
        assert (
            sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir()) == written
        )  # not trained again
