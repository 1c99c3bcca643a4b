"""The test sums as a loadable verifiers 0.3.1 environment: `vf.load_environment("creditline-arith", case=...)`.

What `[verifiers] env_id = "creditline-arith"` runs when a round takes its rollouts from verifiers, and
`[eval.verifiers]` when it is the held-out evaluation (tests/e2e/test_verifiers_rollout_source.py; the folder
is on the runner's path through `paths`).
Same tasks and rubrics as run_case.py, without its per-rollout seeds: the runner sends one request at a time
and `creditline serve` seeds them in arrival order.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import verifiers as vf  # noqa: E402
from run_case import answer_chars, close, correct, dataset, used_add  # noqa: E402
from tasks import QA_EVAL, QA_SYSTEM, TOOL_EVAL, TOOL_SYSTEM, add, qa_question, tool_question  # noqa: E402


def load_environment(case: str = "tool_calls", held_out: int = 0) -> vf.Environment:
    """`held_out` > 0: the first `held_out` sums are the eval dataset and the rest the training dataset (the
    evaluation's split and the rollouts'); 0: every sum is in the eval dataset, which rollouts fall back to."""
    pairs, question, system = (QA_EVAL, qa_question, QA_SYSTEM) if case == "single_turn" else \
        (TOOL_EVAL, tool_question, TOOL_SYSTEM)  # fmt: skip
    splits = {"eval_dataset": dataset(pairs[:held_out] if held_out else pairs, question, system)}
    if held_out:
        splits["dataset"] = dataset(pairs[held_out:], question, system)
    if case == "single_turn":
        rubric = vf.Rubric(funcs=[correct, close], weights=[1.0, 0.5])
        rubric.add_metric(answer_chars)
        return vf.SingleTurnEnv(**splits, rubric=rubric)
    rubric = vf.Rubric(funcs=[correct, used_add], weights=[1.0, 0.25])
    rubric.add_metric(answer_chars)
    return vf.ToolEnv(**splits, tools=[add], max_turns=3, rubric=rubric)
