"""Multi-turn rounds with a real chat policy: conversations grow by the sampled ids, cut turns are recorded,
the trainer sees what the sampler saw, and a warm start teaches the answer format."""

import copy
import random
from dataclasses import replace

import pytest
import torch

from creditline.config import ExperimentConfig
from creditline.engines import SamplingParams, TorchEngine
from creditline.envs import make_env
from creditline.policy.chat_policy import ChatPolicyConfig, build_chat_policy, environment_corpus
from creditline.policy.initial_policy import build_initial_policy
from creditline.policy.models import build_tokenizer, load_policy
from creditline.rollout.conversation import ChatTemplateError
from creditline.rollout.episodes import run_episodes
from creditline.rollout.turn_packing import merge_turns
from creditline.store import hash_path
from creditline.train.logprobs import completion_logprobs
from creditline.train.trainer import TrainConfig, pack, score, train
from creditline.train.warm_start import WarmStartSettings
from schemas import StepsTable

SMALL = ChatPolicyConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, intermediate_size=64,
                         max_positions=512, vocab_size=320)  # fmt: skip


def maze():
    return make_env("maze", size=4, max_steps=6)


@pytest.fixture(scope="module")
def chat_policy(tmp_path_factory):
    folder = build_chat_policy(
        tmp_path_factory.mktemp("chat") / "policy", environment_corpus(maze, 50), SMALL
    )
    model, tokenizer = load_policy(folder)
    return model, tokenizer


@pytest.fixture(scope="module")
def chat_round(chat_policy):
    model, tokenizer = chat_policy
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=3, seed=7)
    return run_episodes(engine, tokenizer, maze, "chat", 1, list(range(8)), 2, sampling, "chat")


def test_every_prompt_is_the_previous_prompt_plus_its_completion_then_the_reply(chat_round, chat_policy):
    _, tokenizer = chat_policy
    steps = chat_round.steps
    assert steps["step_idx"].max() >= 3  # multi-turn
    pairs = 0
    for _, episode in steps.groupby("episode_id"):
        rows = episode.sort_values("step_idx").to_dict("records")
        for before, after in zip(rows, rows[1:], strict=False):
            sampled = list(before["prompt_ids"]) + list(before["completion_ids"])
            assert list(after["prompt_ids"][: len(sampled)]) == sampled
            tail = tokenizer.decode(after["prompt_ids"][len(sampled) :])
            assert tail.endswith(
                f"<|im_start|>user\n{after['observation']}<|im_end|>\n<|im_start|>assistant\n"
            )
            pairs += 1
    assert pairs > 20
    StepsTable.validate(steps)


def test_cut_completions_are_recorded_and_stopped_ones_end_at_the_eos(chat_round, chat_policy):
    _, tokenizer = chat_policy
    steps = chat_round.steps
    ends_at_eos = steps["completion_ids"].map(lambda c: c[-1] == tokenizer.eos_token_id)
    assert (steps["finish_reason"] == "stop").equals(ends_at_eos)
    assert set(steps["finish_reason"]) == {"stop", "length"}  # a random policy does both
    assert (steps.loc[~ends_at_eos, "completion_ids"].map(len) == 3).all()


def test_the_trainer_scores_the_sampled_tokens_as_the_sampler_did(chat_round, chat_policy):
    """No drift: the trainer's log-prob of each completion token, in the kept multi-turn context, is the
    sampling log-prob the engine recorded."""
    model, tokenizer = chat_policy
    steps = chat_round.steps
    zeros = [[0.0] * len(c) for c in steps["completion_ids"]]
    batch = pack(steps["prompt_ids"], steps["completion_ids"], steps["completion_logprobs"], zeros,
                 tokenizer.pad_token_id)  # fmt: skip
    trainer = score(model, batch, temperature=1.0)
    mask = batch.completion_mask
    assert torch.allclose(trainer[mask], batch.old_logprobs[mask], atol=1e-5)


def test_an_episode_that_outgrows_the_context_ends_truncated_instead_of_failing(tmp_path):
    short = replace(SMALL, max_positions=160)
    model, tokenizer = load_policy(build_chat_policy(tmp_path / "short", environment_corpus(maze, 20), short))
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    env = lambda: make_env("maze", size=5, max_steps=30)  # noqa: E731
    tables = run_episodes(engine, tokenizer, env, "ctx", 1, [0, 1, 2], 2,
                          SamplingParams(max_new_tokens=4, seed=0), "chat")  # fmt: skip
    cut = tables.episodes[tables.episodes["stop_reason"] == "context_limit"]
    assert len(cut) > 0
    last = tables.steps[tables.steps["episode_id"].isin(cut["episode_id"])].groupby("episode_id").tail(1)
    assert last["truncated"].all() and not last["done"].any()
    assert (tables.steps["prompt_ids"].map(len) + 4 <= 160).all()
    StepsTable.validate(tables.steps)


def test_chat_format_needs_a_chat_template_and_auto_falls_back_to_plain():
    tokenizer = build_tokenizer(make_env("maze").vocabulary())
    engine = None  # never reached
    with pytest.raises(ChatTemplateError, match=r"no chat template.*prompt_format = \"plain\""):
        run_episodes(engine, tokenizer, maze, "x", 1, [0], 1, SamplingParams(), "chat")


def test_a_warm_start_teaches_the_answer_format_not_the_task(tmp_path):
    config = replace(ExperimentConfig(), initial_policy="builtin:chat",
                     env=replace(ExperimentConfig().env, params={"size": 4, "max_steps": 6}),
                     rollouts=replace(ExperimentConfig().rollouts, prompt_format="chat", max_new_tokens=4),
                     warm_start=WarmStartSettings(episodes=32, epochs=4, batch_rows=4))  # fmt: skip
    random_folder, _ = build_initial_policy(
        replace(config, warm_start=WarmStartSettings()), tmp_path / "random"
    )
    folder, meta = build_initial_policy(config, tmp_path / "warm")
    facts = meta["warm_start"]
    assert facts["loss_after"] < facts["loss_before"] / 3
    assert facts["started_from"] == hash_path(random_folder)  # the same random init, then fitted

    def valid_rate(path) -> tuple[float, set[str]]:
        model, tokenizer = load_policy(path)
        engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
        tables = run_episodes(engine, tokenizer, config.env.build, "w", 1, list(range(16)), 2,
                              SamplingParams(max_new_tokens=4, seed=1), "chat")  # fmt: skip
        return tables.steps["valid_action"].mean(), set(tables.steps["action"])

    before, _ = valid_rate(random_folder)
    after, actions = valid_rate(folder)
    assert before < 0.1 and after > 0.9
    assert {"up", "down", "left", "right"} <= actions  # all four moves, at random: the format, not the task
    again, _ = build_initial_policy(config, tmp_path / "again")
    assert hash_path(again) == hash_path(folder)  # deterministic


@pytest.mark.parametrize(
    "action, valid, moved",
    [("up", True, "up"), ("Up.", True, "up"), ("  LEFT, then up", True, "left"), ("upward", False, None),
     ("", False, None), ("3 up", True, "up"), ("<|im_end|>", False, None)],
)  # fmt: skip
def test_the_maze_reads_the_first_word(action, valid, moved):
    env = make_env("maze", size=5)
    env.reset(0, 0)
    transition = env.step(action)
    assert transition.valid_action is valid
    assert transition.observation.text.endswith(f"last {moved or 'invalid'}")


@pytest.mark.parametrize(
    "action, valid", [("1 2", True), ("12", True), (" 12 ", True), ("twelve", False), ("12.", False),
                      ("", False), ("١٢", False), ("1 2 3", True)],
)  # fmt: skip
def test_arithmetic_reads_the_digits_spaces_ignored(action, valid):
    env = make_env("arithmetic")
    env.reset(0, 0)
    assert env.step(action).valid_action is valid
    assert env.format_example(random.Random(0)).isdigit()


def test_one_training_row_per_episode_gives_the_same_loss_and_gradients_from_fewer_tokens(
    chat_round, chat_policy
):
    model, tokenizer = chat_policy
    steps = chat_round.steps
    generator = torch.Generator().manual_seed(0)
    rows = steps.assign(completion_advantages=[torch.randn(len(c), generator=generator).tolist()
                                               for c in steps["completion_ids"]])  # fmt: skip
    merged = merge_turns(rows)
    assert len(merged) == rows["episode_id"].nunique()
    per_step = pack(rows["prompt_ids"], rows["completion_ids"], rows["completion_logprobs"],
                    rows["completion_advantages"], tokenizer.pad_token_id)  # fmt: skip
    per_episode = pack(merged["prompt_ids"], merged["completion_ids"], merged["completion_logprobs"],
                       merged["completion_advantages"], tokenizer.pad_token_id, merged["sampled_mask"])  # fmt: skip
    assert int(per_episode.completion_mask.sum()) == int(per_step.completion_mask.sum())
    assert int(per_episode.attention_mask.sum()) * 2 < int(per_step.attention_mask.sum())

    def loss_and_grads(batch):
        model.zero_grad()
        logp, _ = completion_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.completion_mask, 1.0
        )
        mask = batch.completion_mask
        loss = -(batch.advantages[mask] * logp).sum() / mask.sum()
        loss.backward()
        return float(loss), {name: p.grad.clone() for name, p in model.named_parameters()}

    loss_a, grads_a = loss_and_grads(per_step)
    loss_b, grads_b = loss_and_grads(per_episode)
    assert loss_a == pytest.approx(loss_b, abs=1e-6)
    for name, grad in grads_a.items():
        assert torch.allclose(grad, grads_b[name], atol=1e-6, rtol=1e-4), name
    config = TrainConfig(epochs=1, minibatches=1)
    first = train(copy.deepcopy(model), per_step, config, 1.0, seed=0)[0][0]
    again = train(copy.deepcopy(model), per_episode, config, 1.0, seed=0)[0][0]
    assert first["loss"] == pytest.approx(again["loss"], abs=1e-6) and first["tokens"] == again["tokens"]
    assert first["sampler_kl"] == pytest.approx(again["sampler_kl"], abs=1e-6)


def test_chat_last_renders_each_turn_fresh_from_the_instructions_and_the_current_observation(chat_policy):
    from creditline.rollout.conversation import Conversation

    model, tokenizer = chat_policy
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    steps = run_episodes(engine, tokenizer, maze, "last", 1, list(range(4)), 2,
                         SamplingParams(temperature=1.0, max_new_tokens=3, seed=7), "chat-last").steps  # fmt: skip
    assert steps["step_idx"].max() >= 3
    instructions = maze().instructions
    for row in steps.itertuples():
        assert list(row.prompt_ids) == Conversation(tokenizer, row.observation, instructions).prompt_ids
    rows = steps.assign(completion_advantages=steps["completion_ids"].map(lambda c: [1.0] * len(c)))
    assert len(merge_turns(rows)) == len(steps)  # fresh prompts never chain: one training row per turn


def test_chat_last_needs_a_chat_template_too(tmp_path):
    from creditline.config import ConfigError, from_dict

    with pytest.raises(ConfigError) as caught:
        from_dict({"rollouts": {"prompt_format": "chat-last"}})
    (line,) = caught.value.problems
    assert line.startswith(
        'rollouts.prompt_format = "chat-last": the built-in tiny policy has no chat template'
    )


@pytest.mark.parametrize("prompt_format", ["chat", "chat-last"])
def test_branching_a_chat_episode_rebuilds_its_conversation_token_for_token(chat_policy, prompt_format):
    """A continuation of a chat episode starts from the prompt the policy saw at the branch point: the
    conversation rebuilt from the recorded observations and completions (checked against the recording)."""
    from creditline.rollout.branching import BranchSettings, choose_points, play_branches, with_branches
    from creditline.rollout.episodes import reset_seed

    model, tokenizer = chat_policy
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=3, seed=7)
    tables = run_episodes(engine, tokenizer, maze, "chat", 1, [0, 1], 2, sampling, prompt_format)
    points = choose_points(tables.steps, BranchSettings(points="every", every=2, continuations=1), 0, 1)
    assert points
    branches = play_branches(engine, tokenizer, maze, tables.steps, points, 1, 1, sampling, prompt_format,
                             lambda t, s: reset_seed(7, 1, t, s))  # fmt: skip
    steps = with_branches(tables, branches).steps.set_index(["episode_id", "step_idx"])
    StepsTable.validate(steps.reset_index())
    for point in points:
        first = steps.loc[(f"{point.episode_id}:b{point.step_idx}.0", 0)]
        assert list(first["prompt_ids"]) == list(steps.loc[(point.episode_id, point.step_idx)]["prompt_ids"])
