"""Run a verifiers ≤ 0.3.x environment (the classic API) against an endpoint; write `results.jsonl`.

Runs with a verifiers venv's interpreter (see `__init__.py` for the command line). The environment is
`vf.load_environment(ENV_ID, **ENV_ARGS)` (an installed environment package, or a module on `--path`). N
examples of the `--split` (`split_dataset`) are drawn with `--seed`, each played G times (a group shares
`example_id`); every model call asks for its own seed, derived from (seed, example, rollout, turn), so the
same policy gives the same rollouts again whatever order the calls arrive in. The client is verifiers' token
client (`openai_chat_completions_token`: the first turn through /v1/chat/completions, later turns with the
prompt as token ids), and `state_columns=["trajectory", "sampling_args"]` keeps each model call's tokens.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import sys
import zlib
from pathlib import Path

from runner_args import arguments  # beside this script, on sys.path[0] when it runs

API_KEY_VAR = "CREDITLINE_API_KEY"
ROLLOUT_KEY = "creditline_rollout"
"""Added to each input's `info`: which of its group's rollouts it is (for its seeds)."""


def seed_every_call(env, seed: int) -> None:
    """Give each model call its own seed, from (seed, example, rollout, turn).

    verifiers plays a group's rollouts concurrently, so the order in which their calls reach the endpoint
    varies; with a seed of their own, a call's completion does not depend on that order."""
    original = env.get_model_response

    async def seeded(state, prompt, client=None, model=None, tool_defs=None, sampling_args=None):
        args = dict(sampling_args or state["sampling_args"] or {})
        key = f"{seed}:{state['example_id']}:{state['info'][ROLLOUT_KEY]}:{len(state['trajectory'])}"
        args["seed"] = zlib.crc32(key.encode()) & 0x7FFFFFFF
        return await original(state, prompt, client, model, tool_defs, args)

    env.get_model_response = seeded


def split_dataset(env, split: str):
    """The examples of `split`. "eval": the eval dataset (verifiers falls back to the training one); "train":
    the training dataset, else the eval one (an environment made for evaluation only). Lazy ones are built."""
    if split == "eval":
        return env.get_eval_dataset()
    has_train = env.build_dataset() is not None if hasattr(env, "build_dataset") else env.dataset is not None
    return env.get_dataset() if has_train else env.get_eval_dataset()


async def main() -> None:
    args = arguments()
    sys.path[:0] = args.path
    import verifiers as vf
    from verifiers.types import ClientConfig

    os.environ.setdefault(API_KEY_VAR, "EMPTY")
    env = vf.load_environment(args.env_id, **json.loads(args.env_args))
    dataset = split_dataset(env, args.split)
    chosen = sorted(
        random.Random(args.seed).sample(range(len(dataset)), min(args.num_examples, len(dataset)))
    )
    inputs = []
    for i in chosen:
        for k in range(args.rollouts_per_example):
            row = dict(dataset[i])
            info = (
                json.loads(row["info"]) if isinstance(row.get("info"), str) else dict(row.get("info") or {})
            )
            inputs.append({**row, "info": {**info, ROLLOUT_KEY: k}})
    seed_every_call(env, args.seed)
    client = ClientConfig(
        client_type="openai_chat_completions_token",
        api_base_url=args.base_url,
        api_key_var=API_KEY_VAR,
        max_retries=0,
        timeout=600.0,
    )
    sampling = {
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "logprobs": True,
        "extra_body": {"return_token_ids": True},
    }
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    result = await env.generate(
        inputs,
        client=client,
        model=args.model,
        sampling_args=sampling,
        max_concurrent=1,
        results_path=out,
        save_results=True,
        state_columns=["trajectory", "sampling_args"],
    )
    print(f"{args.env_id}: {len(result['outputs'])} rollouts of {len(chosen)} examples -> {out}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
