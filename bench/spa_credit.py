"""Where SPA puts the credit on the credit dial: its progress model's step rewards and the advantages made of
them, by episode outcome and by whether the turn is decisive.

Plays the learning bench's run of `--task` with estimator `spa` and `--seed` (the same config, the same stage
functions: generate, score, fit the progress model, advantages, train) for `--rounds` rounds, and prints per
round the mean model reward ĉ_t and the mean advantage A_t of four kinds of steps: decisive or filler turns
(`creditline.envs.credit_dial.task_layout`), of successful or failed episodes.

`--baseline group-turn` is an experiment, not an estimator of the registry: it replaces SPA's advantage by
ĉ_t standardised within the step's (group, turn), (ĉ_t − mean) / (std + 1e-6) over the group's episodes at
that turn (0 where they all agree), a state-dependent baseline in place of the round's mean, and trains on that.

    .venv/bin/python bench/spa_credit.py --task dial-h8-d2 --seed 4 [--rounds 1] [--baseline group-turn]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learning import DIAL_TASKS, task_config  # noqa: E402

from creditline.credit.reward_model import load_reward_model, reward_model_kind  # noqa: E402
from creditline.credit.round_advantages import step_advantages, with_model_rewards  # noqa: E402
from creditline.engines import TorchEngine  # noqa: E402
from creditline.envs.credit_dial import task_layout  # noqa: E402
from creditline.policy.initial_policy import build_initial_policy  # noqa: E402
from creditline.policy.models import load_policy  # noqa: E402
from creditline.round import (
    evaluate_policy,
    fit_reward_model,
    generate_rollouts,
    score_rollouts,
    train_policy,
)  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="dial-h8-d2", choices=sorted(DIAL_TASKS))
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", default="round", choices=["round", "group-turn"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = task_config(args.task, "spa", args.seed, quick=False)
    dials = config.env.params
    folder, _ = build_initial_policy(config, Path(tempfile.mkdtemp()) / "policy")
    model, tokenizer = load_policy(folder)
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer=tokenizer)
    print(f"{args.task}, seed {args.seed}: held-out success before round 1 "
          f"{evaluate_policy(engine, tokenizer, config, 0)[1].success_rate:.2f}")  # fmt: skip
    reward_model, _ = load_reward_model(reward_model_kind("spa"), folder, config.seed)
    fit_state, optimizer_state = None, None
    for round_ in range(1, args.rounds + 1):
        tables = generate_rollouts(engine, tokenizer, config, round_)
        scores = score_rollouts(config, tables.episodes, tables.steps)
        rewards, _, fit_state = fit_reward_model(reward_model, None, tokenizer, tables.episodes,
                                                          tables.steps, scores, config, round_, fit_state)  # fmt: skip
        steps = with_model_rewards(tables.steps, rewards)
        advantages = step_advantages(steps, scores, config.advantages, tables.episodes)
        if args.baseline == "group-turn":
            advantages = _within_group_and_turn(advantages, steps)
        rows = steps.merge(tables.episodes[["episode_id", "success"]], on="episode_id").merge(
            advantages[["episode_id", "step_idx", "advantage"]], on=["episode_id", "step_idx"]
        )
        decisive = {
            task: set(task_layout(int(task), dials["horizon"], dials["decisive"], dials["distinct_states"],
                                  dials["choices"], dials.get("rule", "word")).decisive_turns)
            for task in rows["task_id"].unique()
        }  # fmt: skip
        rows["turn"] = [
            "decisive" if s in decisive[t] else "filler"
            for t, s in zip(rows["task_id"], rows["step_idx"], strict=True)
        ]
        rows["episode"] = rows["success"].map({True: "succeeded", False: "failed"})
        _, optimizer_state = train_policy(model, tokenizer, tables.steps, advantages, config, round_,
                                                   optimizer_state, reference_policy=folder)  # fmt: skip
        success = evaluate_policy(engine, tokenizer, config, round_)[1].success_rate
        print(
            f"round {round_}: train success {tables.episodes['success'].mean():.2f}, held-out after {success:.2f}"
        )
        table = rows.groupby(["episode", "turn"])[["model_reward", "advantage"]].agg(["mean", "size"])
        for (episode, turn), row in table.iterrows():
            print(f"  {episode:>9} episode, {turn:>8} turn: {int(row[('model_reward', 'size')]):5d} steps, "
                  f"model reward {row[('model_reward', 'mean')]:+.3f}, advantage {row[('advantage', 'mean')]:+.2f}")  # fmt: skip


def _within_group_and_turn(advantages, steps):
    """SPA's advantages replaced by ĉ_t standardised over the episodes of its group at the same turn."""
    joined = advantages.drop(columns="advantage").merge(
        steps[["episode_id", "step_idx", "model_reward"]], on=["episode_id", "step_idx"]
    )
    by_turn = joined.groupby(["group_id", "step_idx"])["model_reward"]
    centred = joined["model_reward"] - by_turn.transform("mean")
    joined["advantage"] = (centred / (by_turn.transform("std", ddof=0) + 1e-6)).where(
        centred.abs() > 1e-9, 0.0
    )
    return joined.drop(columns="model_reward")[list(advantages.columns)]


if __name__ == "__main__":
    main()
