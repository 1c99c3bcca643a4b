"""Run one test-data case with verifiers 0.4.0's v1 API (`run_eval(EvalConfig)`, what `vf-eval` calls).

    .venv-verifiers-0.4/bin/python scripts/verifiers/v04/run_case.py CASE --base-url URL --model NAME \
        --policy FOLDER --out DIR

CASE: single_turn (taskset creditline_vf_single_turn, 6 tasks x 4 rollouts), tool_calls
(creditline_vf_tool_calls, 5 tasks x 3 rollouts, `add` tool, at most 3 model calls), step_rewards (the
tool taskset whose task writes per-node `advantages` at scoring time; see creditline_vf_step_rewards.py).

Model client: `TrainClientConfig` (verifiers' training client: renders the chat with the policy's own
tokenizer + chat template through `renderers.DefaultRenderer` with the hermes `qwen3` tool parser, and
calls the endpoint's vLLM route /inference/v1/generate, so nodes carry token ids and logprobs). Harness:
`InProcessChatHarness` (creditline_vf_common.py). Runtime: subprocess (nothing is launched in it).
Temperature 1.0; episodes run one at a time (max_concurrent 1), so the server's per-request fallback seeds
(`creditline serve --seed`) make a rerun on a fresh server repeat the samples: the train client sends the
eval's sampling config, not per-request seeds, and one `seed` there would give every rollout of a group the
same sample.

The run folder verifiers writes (`traces.jsonl`, `configs/eval.json`) is copied to DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from renderers import DefaultRendererConfig  # noqa: E402
from verifiers.v1 import SamplingConfig, TrainClientConfig  # noqa: E402
from verifiers.v1.cli.eval.runner import run_eval  # noqa: E402
from verifiers.v1.configs.cli.eval import EvalConfig  # noqa: E402

CASES = {
    "single_turn": ("creditline_vf_single_turn", 4),
    "tool_calls": ("creditline_vf_tool_calls", 3),
    "step_rewards": ("creditline_vf_step_rewards", 3),
}
API_KEY_VAR = "CREDITLINE_API_KEY"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--base-url", required=True, help="the endpoint's /v1 URL")
    parser.add_argument("--model", required=True)
    parser.add_argument("--policy", required=True, help="the served checkpoint folder (tokenizer + template)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-tokens", type=int, default=40)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault(API_KEY_VAR, "EMPTY")

    taskset, rollouts = CASES[args.case]
    with tempfile.TemporaryDirectory() as scratch:
        config = EvalConfig(
            env={"taskset": {"id": taskset}, "agent": {"runtime": {"type": "subprocess"}}},
            model=args.model,
            client=TrainClientConfig(
                base_url=args.base_url, api_key_var=API_KEY_VAR,
                renderer=DefaultRendererConfig(tool_parser="qwen3"),
                renderer_model_name=str(Path(args.policy).resolve()),
            ),
            sampling=SamplingConfig(temperature=1.0, max_tokens=args.max_tokens),
            num_rollouts=rollouts,
            max_concurrent=1,
            rich=None,
            push=False,
            output_dir=Path(scratch),
            run={"name": f"creditline-{args.case.replace('_', '-')}"},
        )  # fmt: skip
        episodes = asyncio.run(run_eval(config))
        run_dir = Path(scratch) / config.run.dir
        if args.out.exists():
            shutil.rmtree(args.out)
        shutil.copytree(run_dir, args.out, ignore=shutil.ignore_patterns("logs"))
    errors = sum(1 for e in episodes for t in e.traces if t.errors)
    print(f"{args.case}: {len(episodes)} episodes, {errors} with errors -> {args.out}")


if __name__ == "__main__":
    main()
