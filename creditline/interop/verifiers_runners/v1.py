"""Run a verifiers ≥ 0.4 environment (the v1 API) against an endpoint; write `traces.jsonl`.

Runs with a verifiers venv's interpreter (see `__init__.py` for the command line). `--env-args` is the
`env` table of verifiers' `EvalConfig` (`{"taskset": {"id": ...}, "agent": {...}}`); `--env-id`, when not
empty, is the taskset id. N tasks are drawn with `--seed` (`select`, narrowed first by `--select`'s
`include` / `exclude` / `skip`: a taskset has no splits, so `--split` is not read), each played G times,
one episode at a time. The client is verifiers' training client (`TrainClientConfig`): it renders prompts
with the served policy's own tokenizer and chat template (`--policy`) and calls the endpoint's token route
(/inference/v1/generate), so every message node carries token ids and log-probs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from runner_args import arguments  # beside this script, on sys.path[0] when it runs

API_KEY_VAR = "CREDITLINE_API_KEY"


def main() -> None:
    args = arguments()
    sys.path[:0] = args.path
    from renderers import DefaultRendererConfig
    from verifiers.v1 import SamplingConfig, TrainClientConfig
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    os.environ.setdefault(API_KEY_VAR, "EMPTY")
    env = json.loads(args.env_args)
    if args.env_id:
        env.setdefault("taskset", {})["id"] = args.env_id
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as scratch:
        config = EvalConfig(
            env=env,
            model=args.model,
            client=TrainClientConfig(
                base_url=args.base_url,
                api_key_var=API_KEY_VAR,
                renderer=DefaultRendererConfig(tool_parser="qwen3"),
                renderer_model_name=str(Path(args.policy).resolve()),
            ),
            sampling=SamplingConfig(temperature=args.temperature, max_tokens=args.max_tokens),
            select={
                **json.loads(args.select),
                "shuffle": True,
                "seed": args.seed,
                "limit": args.num_examples,
            },
            num_rollouts=args.rollouts_per_example,
            max_concurrent=1,
            rich=None,
            push=False,
            output_dir=Path(scratch),
            run={"name": "creditline"},
        )
        episodes = asyncio.run(run_eval(config))
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(Path(scratch) / config.run.dir, out, ignore=shutil.ignore_patterns("logs"))
    print(f"{args.env_id or 'env'}: {len(episodes)} episodes -> {out}", flush=True)


if __name__ == "__main__":
    main()
