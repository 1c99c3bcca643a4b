"""A round's rollouts in the two shapes prime-rl reads: training samples, and saved rollout folders.

`prime-rl` — prime-rl trains from `TrainingSample` (`src/prime_rl/transports/rollouts/types.py`), a
`msgspec.Struct` declared `array_like=True`: on the wire one sample is a positional JSON array, in the
order of `TRAINING_SAMPLE_FIELDS`. One sample per chain of turns, as prime-rl's orchestrator builds them
(best-effort interleaving: turns merge while each prompt extends the previous prompt + completion exactly,
a new sample starts where one does not; `creditline.rollout.turn_packing`, the rule our own trainer uses).
With T the sample's length, prompt + completions + the environment's tokens between them:

    token_ids     (T,) int     the prompt, then each completion and the reply tokens after it
    mask          (T,) bool    true on sampled (completion) tokens only
    logprobs      (T,) float   sampling logprobs on sampled tokens, 0.0 elsewhere
    temperatures  (T,) float   the temperature the round was sampled at (recorded per row), on every token
    env_name      str          the experiment's environment
    ref_logprobs … ref_kl_weights   null (positions 6-12 of the struct; none of them is ours to give)
    advantages    (T,) float   the round's per-token advantages on sampled tokens, 0.0 elsewhere

Optional fields before `advantages` are written as `null` because an array-like struct is positional.
A sample has no room for provenance (experiment, round, episode): the CLI names them when it writes.

`prime-rl-rollouts` — prime-rl saves rollouts as verifiers v1 episodes, one `Episode` record per line, in
`step_<N>/train/{all,effective}/traces.jsonl` (`monitors/file.py`). Here N is the round, the records are
the round's imported `traces.jsonl` with our advantages on the sampled nodes (`verifiers_v1.fill_advantages`),
`all` every episode and `effective` the episodes that carry a training signal: at least one nonzero
per-token advantage (an episode whose advantages are all zero, e.g. one of a group with one reward, does
not move the policy; prime-rl's zero-advantage filter drops the same ones).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from creditline.interop.verifiers_v1 import fill_advantages
from creditline.rollout.turn_packing import merge_turns

TRAINING_SAMPLE_FIELDS = (
    "token_ids",
    "mask",
    "logprobs",
    "temperatures",
    "env_name",
    "ref_logprobs",
    "mm_kwargs",
    "routed_experts",
    "mm_token_type_ids",
    "rl_weights",
    "ce_weights",
    "ref_kl_weights",
    "advantages",
)
"""prime-rl's `TrainingSample` fields in their positional (array_like) order."""


def prime_rl_samples(rows: pd.DataFrame, temperature: float, env_name: str) -> Iterator[list]:
    """One positional `TrainingSample` per chain of turns of `rows` (steps with per-token advantages, in
    play order), by episode id, then chain."""
    for sample in merge_turns(rows).to_dict("records"):
        prompt = [int(t) for t in sample["prompt_ids"]]
        rest = [int(t) for t in sample["completion_ids"]]
        zeros = [0.0] * len(prompt)
        values = {
            "token_ids": prompt + rest,
            "mask": [False] * len(prompt) + [bool(m) for m in sample["sampled_mask"]],
            "logprobs": zeros + [float(x) for x in sample["completion_logprobs"]],
            "temperatures": [float(temperature)] * (len(prompt) + len(rest)),
            "env_name": env_name,
            "advantages": zeros + [float(x) for x in sample["completion_advantages"]],
        }
        yield [values.get(field) for field in TRAINING_SAMPLE_FIELDS]


def rollout_files(round_: int, rows: pd.DataFrame, traces: Path) -> dict[str, list[str]]:
    """Relative path → lines of prime-rl's saved-rollout layout for one round (see the module doc).
    `rows` carry `source_ref` ("<line>:<node>") and `completion_advantages`; `traces` is the round's staged
    `traces.jsonl`."""
    per_step = dict(zip(rows["source_ref"], rows["completion_advantages"], strict=True))
    lines = fill_advantages(traces, per_step)
    signal = {ref.split(":")[0] for ref, values in per_step.items() if any(float(v) != 0.0 for v in values)}
    numbered = _line_numbers(traces)
    effective = [line for n, line in zip(numbered, lines, strict=True) if str(n) in signal]
    folder = f"step_{round_}/train"
    return {f"{folder}/all/traces.jsonl": lines, f"{folder}/effective/traces.jsonl": effective}


def _line_numbers(path: Path) -> list[int]:
    """The 1-based numbers of the non-blank lines of `path` (what `source_ref` counts)."""
    with open(path, encoding="utf-8") as fh:
        return [n for n, text in enumerate(fh, start=1) if text.strip()]
