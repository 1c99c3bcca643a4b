import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from creditline.engines import SamplingParams, TorchEngine
from creditline.envs import make_env
from creditline.policy.models import load_policy, save_policy
from creditline.rollout.episodes import run_episodes
from creditline.store import hash_directory, write_parquet_atomic


def test_checkpoint_is_a_plain_hf_folder_that_transformers_loads(tiny_policy_dir):
    names = {p.name for p in tiny_policy_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_dir)
    assert (
        tokenizer.decode(tokenizer.encode("pos 1 2 have no", add_special_tokens=False)) == "pos 1 2 have no"
    )
    assert model.config.vocab_size == len(tokenizer)


def test_save_then_load_gives_identical_logits_and_hash(tiny_policy, tmp_path):
    model, tokenizer = tiny_policy
    save_policy(model, tokenizer, tmp_path / "a", optimizer_state={"state": {}, "param_groups": []})
    save_policy(model, tokenizer, tmp_path / "b", optimizer_state={"state": {}, "param_groups": []})
    assert hash_directory(tmp_path / "a") == hash_directory(tmp_path / "b")
    reloaded, _ = load_policy(tmp_path / "a")
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, reloaded(input_ids=ids).logits)


def test_rollouts_are_deterministic_down_to_the_file_hash(tiny_policy, tmp_path):
    model, tokenizer = tiny_policy
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)

    def play():
        return run_episodes(engine, tokenizer, lambda: make_env("maze"), "exp", 3, [5, 9], 4,
                            SamplingParams(temperature=1.0, max_new_tokens=1, seed=7))  # fmt: skip

    first, second = play(), play()
    hashes = [
        write_parquet_atomic(t.steps, tmp_path / f"{i}.parquet").content_hash
        for i, t in enumerate((first, second))
    ]
    assert hashes[0] == hashes[1]
    steps, episodes = first.steps, first.episodes
    assert len(episodes) == 8 and episodes["episode_id"].iloc[0] == "exp:r3:t5:s0"
    assert steps.groupby("episode_id")["step_idx"].apply(lambda s: sorted(s) == list(range(len(s)))).all()
    assert (steps.groupby("episode_id").size() == episodes.set_index("episode_id")["num_steps"]).all()
    returns = steps.groupby("episode_id")["step_reward"].sum()
    pd.testing.assert_series_equal(returns, episodes.set_index("episode_id")["env_return"], check_names=False)
    # all samples of a task start in the same state: their first anchor keys agree
    first_steps = steps[steps["step_idx"] == 0]
    assert first_steps.groupby("task_id")["anchor_key"].nunique().eq(1).all()
