"""The runner command lines of a round's verifiers rollouts and of its verifiers evaluation: one path, two runs."""

from __future__ import annotations

import json
from pathlib import Path

from creditline.config import from_dict
from creditline.ids import derive_seed
from creditline.interop.verifiers_runners import RUNNERS
from creditline.interop.verifiers_source import evaluation_run, rollout_run, runner_command

ENV = {"api": "v1", "python": "/venv/bin/python", "env_id": "my-tasks", "env_args": {"agent": {}}}
CONFIG = from_dict({
    "name": "vf", "rollouts": {"tasks_per_round": 4, "group_size": 3, "temperature": 0.7, "max_new_tokens": 40},
    "eval": {"num_tasks": 5, "verifiers": {**ENV, "select": {"include": {"idx": ["0:10"]}}}},
    "verifiers": {**ENV, "select": {"exclude": {"idx": ["0:10"]}}},
})  # fmt: skip


def options(command: list[str]) -> dict[str, str]:
    assert command[:2] == ["/venv/bin/python", str(RUNNERS["v1"])]
    return dict(zip(command[2::2], command[3::2], strict=True))


def test_the_evaluation_is_greedy_once_per_example_on_the_eval_split_with_the_same_seed_every_round():
    rounds = [
        options(runner_command(evaluation_run(CONFIG, r), "/ckpt", "http://h/v1", Path("/out")))
        for r in (0, 1, 7)
    ]
    first = rounds[0]
    assert (first["--split"], first["--num-examples"], first["--rollouts-per-example"]) == ("eval", "5", "1")
    assert float(first["--temperature"]) == 0.0 and first["--max-tokens"] == "40"
    assert json.loads(first["--select"]) == {"include": {"idx": ["0:10"]}}
    assert [r["--model"] for r in rounds] == ["vf/round-0", "vf/round-1", "vf/round-7"]
    assert {r["--seed"] for r in rounds} == {str(derive_seed("vf", "eval"))}  # the same examples every round


def test_a_round_s_rollouts_sample_its_training_split_with_a_seed_per_round():
    rounds = [
        options(runner_command(rollout_run(CONFIG, r), "/ckpt", "http://h/v1", Path("/out"))) for r in (1, 2)
    ]
    assert [(r["--split"], r["--num-examples"], r["--rollouts-per-example"], r["--temperature"]) for r in rounds] \
        == [("train", "4", "3", "0.7")] * 2  # fmt: skip
    assert json.loads(rounds[0]["--select"]) == {"exclude": {"idx": ["0:10"]}}
    assert [r["--model"] for r in rounds] == ["vf/round-0", "vf/round-1"]
    assert [r["--seed"] for r in rounds] == [str(derive_seed("vf", r, "verifiers")) for r in (1, 2)]
