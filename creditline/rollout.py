"""Run a batch of episodes: every active episode takes its turn in one engine call.

For each turn, the prompts of all episodes still running are tokenised and generated together
(one batched call, the engine's KV cache inside it), each completion is decoded and applied to its
own environment. The output is the data contract's two long tables:

- `episodes`: one row per episode (num_steps, success, env_return, stop_reason);
- `steps`: one row per model call, with the token ids, the sampling log-probs, the anchor key of
  the state the action was taken in and the environment's reward.

Ids come from (experiment, round, task, sample, step) and sampling seeds from (seed, round, turn),
so the same checkpoint, tasks and seed give the same tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pandas as pd

from creditline import ids
from creditline.engines.base import Engine, SamplingParams
from creditline.envs.base import Environment, Observation


@dataclass(frozen=True)
class RolloutTables:
    episodes: pd.DataFrame
    steps: pd.DataFrame


@dataclass
class _Episode:
    env: Environment
    episode_id: str
    group_id: str
    task_id: int
    sample_idx: int
    observation: Observation
    env_return: float = 0.0
    num_steps: int = 0
    success: bool = False
    stop_reason: str = ""


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Plain-text prompt → ids, with BOS first when the tokenizer has one."""
    ids_ = tokenizer.encode(text, add_special_tokens=False)
    return [tokenizer.bos_token_id, *ids_] if tokenizer.bos_token_id is not None else list(ids_)


def decode_action(tokenizer, completion_ids: Sequence[int]) -> str:
    return tokenizer.decode(list(completion_ids), skip_special_tokens=True).strip()


def run_episodes(
    engine: Engine,
    tokenizer,
    env_factory: Callable[[], Environment],
    experiment: str,
    round_: int,
    task_ids: Sequence[int],
    group_size: int,
    sampling: SamplingParams,
) -> RolloutTables:
    """Play `group_size` episodes of every task in `task_ids` to the end, batched per turn."""
    episodes = []
    for task in task_ids:
        for sample in range(group_size):
            env = env_factory()
            episodes.append(
                _Episode(
                    env=env,
                    episode_id=ids.episode_id(experiment, round_, task, sample),
                    group_id=ids.group_id(experiment, round_, task),
                    task_id=int(task),
                    sample_idx=sample,
                    observation=env.reset(task, ids.derive_seed(sampling.seed, round_, task, sample)),
                )
            )
    step_rows: list[dict] = []
    active = list(episodes)
    turn = 0
    while active:
        prompts = [encode_prompt(tokenizer, ep.observation.text) for ep in active]
        turn_sampling = replace(sampling, seed=ids.derive_seed(sampling.seed, round_, turn))
        completions = engine.generate(prompts, turn_sampling)
        still_active = []
        for ep, prompt, completion in zip(active, prompts, completions, strict=True):
            action = decode_action(tokenizer, completion.token_ids)
            transition = ep.env.step(action)
            step_rows.append(
                {
                    "round": round_,
                    "episode_id": ep.episode_id,
                    "group_id": ep.group_id,
                    "task_id": ep.task_id,
                    "sample_idx": ep.sample_idx,
                    "step_idx": ep.num_steps,
                    "observation": ep.observation.text,
                    "action": action,
                    "anchor_key": ids.anchor_key(ep.observation.anchor),
                    "prompt_ids": prompt,
                    "completion_ids": completion.token_ids,
                    "completion_logprobs": completion.logprobs,
                    "step_reward": transition.reward,
                    "valid_action": transition.valid_action,
                    "done": transition.done,
                    "truncated": transition.truncated,
                }
            )
            ep.num_steps += 1
            ep.env_return += transition.reward
            ep.observation = transition.observation
            if transition.done or transition.truncated:
                ep.success = transition.success
                ep.stop_reason = (
                    "success" if transition.success else ("done" if transition.done else "step_limit")
                )
            else:
                still_active.append(ep)
        active = still_active
        turn += 1
    episode_rows = [
        {
            "round": round_,
            "episode_id": ep.episode_id,
            "group_id": ep.group_id,
            "task_id": ep.task_id,
            "sample_idx": ep.sample_idx,
            "num_steps": ep.num_steps,
            "success": ep.success,
            "env_return": ep.env_return,
            "stop_reason": ep.stop_reason,
        }
        for ep in episodes
    ]
    steps = (
        pd.DataFrame(step_rows)
        .sort_values(["task_id", "sample_idx", "step_idx"], kind="stable")
        .reset_index(drop=True)
    )
    return RolloutTables(episodes=pd.DataFrame(episode_rows), steps=steps)
