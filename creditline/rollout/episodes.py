"""Run a batch of episodes: every active episode takes its turn in one engine call.

For each turn, the prompts of all episodes still running are generated together (one batched call, the
engine's KV cache inside it), each completion is decoded and applied to its own environment. Prompts
come in one of three formats (`PROMPT_FORMATS`):

- `chat`: the episode is a conversation rendered by the tokenizer's chat template (the environment's
  `instructions` as the system message, each observation a user message, each completion an assistant
  message). Its token ids only grow: turn t+1's prompt is turn t's prompt + the sampled completion ids +
  the environment's reply (`creditline.rollout.conversation`), so what is trained on is what was sampled.
- `chat-last`: each turn is a fresh two-message conversation, the `instructions` and the current
  observation, rendered by the same template: the chat format without the history (the observation carries
  the state, as the built-in environments' do), so prompts stay short and nothing is re-tokenised.
- `plain`: each turn's prompt is the current observation's text alone (BOS first), for policies without
  a chat template such as the built-in word-level one.

Completions end at the EOS, at a stop string (`SamplingParams.stop`; the environment's action text ends
with it) or at `max_new_tokens` (`finish_reason` "length" on the step row: the turn was cut). An episode whose
next prompt would not fit the model's context ends there, truncated (`stop_reason` "context_limit"), instead
of failing the batch.

The output is the data contract's two long tables:

- `episodes`: one row per episode (num_steps, success, env_return, stop_reason);
- `steps`: one row per model call, with the token ids, the sampling log-probs, the anchor key of
  the state the action was taken in and the environment's reward.

Ids come from (experiment, round, task, sample, step) and sampling seeds from (seed, round, turn),
so the same checkpoint, tasks and seed give the same tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

import pandas as pd

from creditline import ids, progress
from creditline.config.stage_settings import CHAT_FORMATS, PROMPT_FORMATS
from creditline.engines.base import Engine, SamplingParams
from creditline.engines.stop_strings import cut_after_stop
from creditline.envs.base import Environment, Observation, SnapshotEnvironment
from creditline.rollout.conversation import Conversation, has_chat_template, require_chat_template


@dataclass(frozen=True)
class RolloutTables:
    episodes: pd.DataFrame
    steps: pd.DataFrame


@dataclass
class LiveEpisode:
    env: Environment
    episode_id: str
    group_id: str
    task_id: int
    sample_idx: int
    observation: Observation
    prompt_ids: list[int]
    conversation: Conversation | None
    history: bool
    """The conversation grows turn by turn ("chat"); else each turn starts a fresh one ("chat-last")."""
    branch_of: tuple[str, int] | None = None
    """A branch's (source episode_id, step_idx): it restarted from that step's state
    (`creditline.rollout.branching`)."""
    env_return: float = 0.0
    num_steps: int = 0
    success: bool = False
    stop_reason: str = ""

    def branch_link(self) -> dict:
        """The `branch_of_episode`/`branch_of_step` columns of a branch's rows; none for the round's own."""
        if self.branch_of is None:
            return {}
        return {"branch_of_episode": self.branch_of[0], "branch_of_step": self.branch_of[1]}


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Plain-text prompt → ids, with BOS first when the tokenizer has one."""
    ids_ = tokenizer.encode(text, add_special_tokens=False)
    return [tokenizer.bos_token_id, *ids_] if tokenizer.bos_token_id is not None else list(ids_)


def decode_action(tokenizer, completion_ids: Sequence[int], stop: Sequence[str] = ()) -> str:
    """The action text the environment gets: the completion without special tokens, cut after its first
    stop string (the rest of that token's text is dropped), stripped."""
    text = tokenizer.decode(list(completion_ids), skip_special_tokens=True)
    return cut_after_stop(text, stop).strip()


def resolve_prompt_format(tokenizer, prompt_format: str) -> str:
    """ "chat", "chat-last" or "plain" for `tokenizer`; a chat format from a tokenizer without a template is
    refused."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt format {prompt_format!r}; choose one of {PROMPT_FORMATS}")
    if prompt_format == "auto":
        return "chat" if has_chat_template(tokenizer) else "plain"
    if prompt_format in CHAT_FORMATS:
        require_chat_template(tokenizer)
    return prompt_format


def run_episodes(
    engine: Engine,
    tokenizer,
    env_factory: Callable[[], Environment],
    experiment: str,
    round_: int,
    task_ids: Sequence[int],
    group_size: int,
    sampling: SamplingParams,
    prompt_format: str = "auto",
    snapshots: dict[tuple[str, int], object] | None = None,
) -> RolloutTables:
    """Play `group_size` episodes of every task in `task_ids` to the end, batched per turn.

    `snapshots`, when given, is filled with `env.snapshot()` of every episode before each of its steps but the
    first (never a branch point), keyed by (episode_id, step_idx): the states branching restarts from
    (`creditline.rollout.branching`).
    """
    prompt_format = resolve_prompt_format(tokenizer, prompt_format)
    episodes = []
    for task in task_ids:
        for sample in range(group_size):
            env = env_factory()
            observation = env.reset(task, reset_seed(sampling.seed, round_, task, sample))
            episodes.append(
                start_episode(
                    env,
                    observation,
                    tokenizer,
                    prompt_format,
                    episode_id=ids.episode_id(experiment, round_, task, sample),
                    group_id=ids.group_id(experiment, round_, task),
                    task_id=int(task),
                    sample_idx=sample,
                )
            )
    return play(engine, tokenizer, episodes, round_, sampling, (), snapshots)


def reset_seed(seed: int, round_: int, task: int, sample: int) -> int:
    """The seed episode (task, sample) of a round is reset with (branching replays it with the same)."""
    return ids.derive_seed(seed, round_, task, sample)


def start_episode(
    env: Environment,
    observation: Observation,
    tokenizer,
    prompt_format: str,
    **identity,
) -> LiveEpisode:
    """An episode about to take its first turn from `observation` (`prompt_format` already resolved);
    `identity`: episode_id, group_id, task_id, sample_idx (and a branch's branch_of_*)."""
    conversation = (
        Conversation(tokenizer, observation.text, getattr(env, "instructions", None))
        if prompt_format in CHAT_FORMATS
        else None
    )
    return LiveEpisode(
        env=env,
        observation=observation,
        prompt_ids=conversation.prompt_ids if conversation else encode_prompt(tokenizer, observation.text),
        conversation=conversation,
        history=prompt_format == "chat",
        **identity,
    )


def play(
    engine: Engine,
    tokenizer,
    episodes: list[LiveEpisode],
    round_: int,
    sampling: SamplingParams,
    seed_key: tuple = (),
    snapshots: dict[tuple[str, int], object] | None = None,
) -> RolloutTables:
    """Play `episodes` to the end, every active one taking its turn in one engine call per turn.

    Turn t samples with the seed derive_seed(sampling.seed, round_, *seed_key, t): the round's own
    episodes use no key, branches ("branch",), so the two never share a turn's random stream.
    """
    context = getattr(engine, "context_length", None)
    step_rows: list[dict] = []
    active = list(episodes)
    turn = 0
    while active:
        turn_sampling = replace(sampling, seed=ids.derive_seed(sampling.seed, round_, *seed_key, turn))
        completions = engine.generate([ep.prompt_ids for ep in active], turn_sampling)
        still_active = []
        for ep, completion in zip(active, completions, strict=True):
            if snapshots is not None and ep.num_steps > 0:  # step 0 is never a branch point
                # `snapshots` is given only for an environment that can take them (`branching.can_snapshot`)
                snapshots[(ep.episode_id, ep.num_steps)] = cast(SnapshotEnvironment, ep.env).snapshot()
            prompt = ep.prompt_ids
            action = decode_action(tokenizer, completion.token_ids, sampling.stop)
            transition = ep.env.step(action)
            ended = transition.done or transition.truncated
            out_of_context = False
            if not ended:
                ep.prompt_ids = next_prompt(ep, tokenizer, completion, transition.observation)
                out_of_context = (
                    context is not None and len(ep.prompt_ids) + sampling.max_new_tokens > context
                )
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
                    "truncated": transition.truncated or out_of_context,
                    "finish_reason": completion.finish_reason,
                    "temperature": sampling.temperature,
                    "top_p": sampling.top_p,
                    **ep.branch_link(),
                }
            )
            ep.num_steps += 1
            ep.env_return += transition.reward
            ep.observation = transition.observation
            if ended or out_of_context:
                ep.success = transition.success
                ep.stop_reason = (
                    "success"
                    if transition.success
                    else "done"
                    if transition.done
                    else "step_limit"
                    if transition.truncated
                    else "context_limit"
                )
            else:
                still_active.append(ep)
        active = still_active
        turn += 1
        progress.update(len(episodes) - len(active), len(episodes), "episodes")
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
            **ep.branch_link(),
        }
        for ep in episodes
    ]
    steps = pd.DataFrame(step_rows)
    if len(steps):
        steps = steps.sort_values(["task_id", "sample_idx", "step_idx"], kind="stable").reset_index(drop=True)
    return RolloutTables(episodes=pd.DataFrame(episode_rows), steps=steps)


def next_prompt(ep: LiveEpisode, tokenizer, completion, observation: Observation) -> list[int]:
    """The prompt of the episode's next turn: the conversation grown by this turn (chat), a fresh one
    holding the next observation (chat-last), or the next observation alone (plain)."""
    if ep.conversation is None:
        return encode_prompt(tokenizer, observation.text)
    if not ep.history:
        ep.conversation = Conversation(tokenizer, observation.text, getattr(ep.env, "instructions", None))
        return ep.conversation.prompt_ids
    return ep.conversation.add_turn(
        completion.token_ids, completion.finish_reason == "stop", observation.text
    )
