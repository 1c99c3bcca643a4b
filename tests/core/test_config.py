"""The experiment config: every field checked, every problem reported at once, one line each."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import is_dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creditline.config import (
    ExperimentConfig,
    RolloutSettings,
    from_dict,
    load_config,
    registration,
)
from creditline.config.checks import ConfigError
from creditline.config.schema import allowed_by, hints
from creditline.credit.advantages import available

ROOT = Path(__file__).resolve().parents[2]

# `ExperimentConfig().to_dict()` of this release: the default experiment's registered config (and so its
# hash) must not change unnoticed.
DEFAULT_SNAPSHOT = json.loads("""
{"advantages": {"estimator": "gigpo", "filter_remove": 4,
                "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}, "sample_filter": "none"},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "branching": {"continuations": 2, "every": 2, "per_episode": 2, "points": "none", "token_budget": 0},
 "eval": {"num_tasks": 100, "verifiers": {"api": "classic", "env_args": {}, "env_id": "", "paths": [], "python": "",
                                          "select": {}}},
 "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "dtype": "auto", "enforce_eager": false, "engine": "torch", "gpu_memory_utilization": 0.5,
              "group_size": 8, "max_new_tokens": 1, "prompt_format": "auto", "stop": [], "tasks_per_round": 64,
              "temperature": 1.0, "tensor_parallel_size": 1, "top_p": 1.0},
 "reward_model": {"beta": 0.05, "epochs": 1, "learning_rate": 0.0003, "max_grad_norm": 1.0,
                  "micro_batch_tokens": 16384, "minibatches": 4},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"bf16": true, "clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "gradient_checkpointing": false,
           "kl_coef": 0.0, "learning_rate": 0.002, "logprob_chunk_tokens": 512, "max_grad_norm": 1.0,
           "micro_batch_tokens": 16384, "minibatches": 2, "tis_cap": 0.0, "weight_decay": 0.0},
 "verifiers": {"api": "classic", "env_args": {}, "env_id": "", "paths": [], "python": "", "select": {}},
 "warm_start": {"batch_rows": 8, "episodes": 0, "epochs": 3, "learning_rate": 0.003}}
""")
DEFAULT_HASH = "18780ce9029efdd6"
"""`creditline.store.files.config_hash` of the snapshot (sha256 of its canonical JSON, 16 hex)."""

# The default as the eighth release registered it (hash 133f7402b82338fb): no verifiers evaluation
# (`eval.verifiers`), no v1 task selection (`verifiers.select`).
RELEASE_8_SNAPSHOT = json.loads("""
{"advantages": {"estimator": "gigpo", "filter_remove": 4,
                "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}, "sample_filter": "none"},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "branching": {"continuations": 2, "every": 2, "per_episode": 2, "points": "none", "token_budget": 0},
 "eval": {"num_tasks": 100}, "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "dtype": "auto", "enforce_eager": false, "engine": "torch", "gpu_memory_utilization": 0.5,
              "group_size": 8, "max_new_tokens": 1, "prompt_format": "auto", "stop": [], "tasks_per_round": 64,
              "temperature": 1.0, "tensor_parallel_size": 1, "top_p": 1.0},
 "reward_model": {"beta": 0.05, "epochs": 1, "learning_rate": 0.0003, "max_grad_norm": 1.0,
                  "micro_batch_tokens": 16384, "minibatches": 4},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"bf16": true, "clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "gradient_checkpointing": false,
           "kl_coef": 0.0, "learning_rate": 0.002, "logprob_chunk_tokens": 512, "max_grad_norm": 1.0,
           "micro_batch_tokens": 16384, "minibatches": 2, "tis_cap": 0.0, "weight_decay": 0.0},
 "verifiers": {"api": "classic", "env_args": {}, "env_id": "", "paths": [], "python": ""},
 "warm_start": {"batch_rows": 8, "episodes": 0, "epochs": 3, "learning_rate": 0.003}}
""")

# The default as the seventh release registered it (hash 2c7a734251dcaedc): no vLLM dtype.
RELEASE_7_SNAPSHOT = json.loads("""
{"advantages": {"estimator": "gigpo", "filter_remove": 4,
                "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}, "sample_filter": "none"},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "branching": {"continuations": 2, "every": 2, "per_episode": 2, "points": "none", "token_budget": 0},
 "eval": {"num_tasks": 100}, "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "enforce_eager": false, "engine": "torch", "gpu_memory_utilization": 0.5,
              "group_size": 8, "max_new_tokens": 1, "prompt_format": "auto", "stop": [], "tasks_per_round": 64,
              "temperature": 1.0, "tensor_parallel_size": 1, "top_p": 1.0},
 "reward_model": {"beta": 0.05, "epochs": 1, "learning_rate": 0.0003, "max_grad_norm": 1.0,
                  "micro_batch_tokens": 16384, "minibatches": 4},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"bf16": true, "clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "gradient_checkpointing": false,
           "kl_coef": 0.0, "learning_rate": 0.002, "logprob_chunk_tokens": 512, "max_grad_norm": 1.0,
           "micro_batch_tokens": 16384, "minibatches": 2, "tis_cap": 0.0, "weight_decay": 0.0},
 "verifiers": {"api": "classic", "env_args": {}, "env_id": "", "paths": [], "python": ""},
 "warm_start": {"batch_rows": 8, "episodes": 0, "epochs": 3, "learning_rate": 0.003}}
""")

# The default as the sixth release registered it (hash 04070c0a53888956): no step-reward model.
RELEASE_6_SNAPSHOT = (
    json.loads("""
{"advantages": {"estimator": "gigpo", "filter_remove": 4,
                "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}, "sample_filter": "none"},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "branching": {"continuations": 2, "every": 2, "per_episode": 2, "points": "none", "token_budget": 0},
 "eval": {"num_tasks": 100}, "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "enforce_eager": false, "engine": "torch", "gpu_memory_utilization": 0.5,
              "group_size": 8, "max_new_tokens": 1, "prompt_format": "auto", "stop": [], "tasks_per_round": 64,
              "temperature": 1.0, "tensor_parallel_size": 1, "top_p": 1.0},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"bf16": true, "clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "gradient_checkpointing": false,
           "kl_coef": 0.0, "learning_rate": 0.002, "logprob_chunk_tokens": 512, "max_grad_norm": 1.0,
           "micro_batch_tokens": 16384, "minibatches": 2, "tis_cap": 0.0, "weight_decay": 0.0},
 "verifiers": {"api": "classic", "env_args": {}, "env_id": "", "paths": [], "python": ""},
 "warm_start": {"batch_rows": 8, "episodes": 0, "epochs": 3, "learning_rate": 0.003}}
""")
)  # The default as the fifth release registered it (hash e07df9c916a6bdde): no branching, no sample filter.
RELEASE_5_SNAPSHOT = json.loads("""
{"advantages": {"estimator": "gigpo", "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "eval": {"num_tasks": 100}, "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "enforce_eager": false, "engine": "torch", "gpu_memory_utilization": 0.5,
              "group_size": 8, "max_new_tokens": 1, "prompt_format": "auto", "stop": [], "tasks_per_round": 64,
              "temperature": 1.0, "tensor_parallel_size": 1, "top_p": 1.0},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"bf16": true, "clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "gradient_checkpointing": false,
           "kl_coef": 0.0, "learning_rate": 0.002, "logprob_chunk_tokens": 512, "max_grad_norm": 1.0,
           "micro_batch_tokens": 16384, "minibatches": 2, "tis_cap": 0.0, "weight_decay": 0.0},
 "verifiers": {"api": "classic", "env_args": {}, "env_id": "", "paths": [], "python": ""},
 "warm_start": {"batch_rows": 8, "episodes": 0, "epochs": 3, "learning_rate": 0.003}}
""")
# The default as the fourth release registered it (hash b4f30b35fa84b2c1): no verifiers rollout source.
RELEASE_4_SNAPSHOT = json.loads("""
{"advantages": {"estimator": "gigpo", "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "eval": {"num_tasks": 100}, "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "enforce_eager": false, "engine": "torch", "gpu_memory_utilization": 0.5,
              "group_size": 8, "max_new_tokens": 1, "prompt_format": "auto", "stop": [], "tasks_per_round": 64,
              "temperature": 1.0, "tensor_parallel_size": 1, "top_p": 1.0},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"bf16": true, "clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "gradient_checkpointing": false,
           "kl_coef": 0.0, "learning_rate": 0.002, "logprob_chunk_tokens": 512, "max_grad_norm": 1.0,
           "micro_batch_tokens": 16384, "minibatches": 2, "tis_cap": 0.0, "weight_decay": 0.0},
 "warm_start": {"batch_rows": 8, "episodes": 0, "epochs": 3, "learning_rate": 0.003}}
""")

# The default as the third release registered it (hash 5a6cbf45c37fcc4d): no stop strings.
RELEASE_3_SNAPSHOT = json.loads("""
{"advantages": {"estimator": "gigpo", "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "eval": {"num_tasks": 100}, "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "enforce_eager": false, "engine": "torch", "gpu_memory_utilization": 0.5,
              "group_size": 8, "max_new_tokens": 1, "prompt_format": "auto", "tasks_per_round": 64,
              "temperature": 1.0, "tensor_parallel_size": 1, "top_p": 1.0},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"bf16": true, "clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "gradient_checkpointing": false,
           "kl_coef": 0.0, "learning_rate": 0.002, "logprob_chunk_tokens": 512, "max_grad_norm": 1.0,
           "micro_batch_tokens": 16384, "minibatches": 2, "tis_cap": 0.0, "weight_decay": 0.0},
 "warm_start": {"batch_rows": 8, "episodes": 0, "epochs": 3, "learning_rate": 0.003}}
""")

# The default as the second release registered it (hash c7c6b80ef303edb2): no prompt format, no warm start.
RELEASE_2_SNAPSHOT = json.loads("""
{"advantages": {"estimator": "gigpo", "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "eval": {"num_tasks": 100}, "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "enforce_eager": false, "engine": "torch", "gpu_memory_utilization": 0.5,
              "group_size": 8, "max_new_tokens": 1, "tasks_per_round": 64, "temperature": 1.0,
              "tensor_parallel_size": 1, "top_p": 1.0},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"bf16": true, "clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "gradient_checkpointing": false,
           "kl_coef": 0.0, "learning_rate": 0.002, "logprob_chunk_tokens": 512, "max_grad_norm": 1.0,
           "micro_batch_tokens": 16384, "minibatches": 2, "tis_cap": 0.0, "weight_decay": 0.0}}
""")

# The default as the first release registered it (hash 8b6182564aaae965): `train.temperature` and
# `train.seed` were fields then (and silently overwritten), the trainer's scaling options did not exist.
RELEASE_1_SNAPSHOT = json.loads("""
{"advantages": {"estimator": "gigpo", "params": {"gamma": 0.95, "mode": "mean_std_norm", "step_advantage_w": 1.0}},
 "env": {"name": "maze", "params": {"invalid_penalty": 0.1, "max_steps": 16, "progress_reward": 0.1, "size": 5,
                                    "view": "relative"}},
 "eval": {"num_tasks": 100}, "initial_policy": "builtin:tiny", "name": "maze-gigpo",
 "rollouts": {"device": "cpu", "engine": "torch", "group_size": 8, "max_new_tokens": 1, "tasks_per_round": 64,
              "temperature": 1.0, "top_p": 1.0},
 "rounds": 20, "rubric": "env", "seed": 0,
 "train": {"clip_eps": 0.2, "entropy_coef": 0.0, "epochs": 2, "learning_rate": 0.002, "max_grad_norm": 1.0,
           "minibatches": 2, "seed": 0, "temperature": 1.0, "weight_decay": 0.0}}
""")


def canonical(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def one_of(names) -> str:
    return "must be one of " + ", ".join(f'"{n}"' for n in sorted(names))


def problems_of(tmp_path: Path, text: str, **overrides) -> list[str]:
    path = tmp_path / "grpo.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, **overrides)
    return [line.replace(str(tmp_path) + "/", "") for line in caught.value.problems]


def test_the_default_config_is_unchanged_and_valid():
    config = ExperimentConfig()
    assert canonical(config.to_dict()) == canonical(DEFAULT_SNAPSHOT)  # types too: 1 and 1.0 differ here
    assert hashlib.sha256(canonical(config.to_dict()).encode()).hexdigest()[:16] == DEFAULT_HASH
    assert load_config() == config == from_dict({}) == from_dict(config.to_dict())
    assert hashlib.sha256(canonical(RELEASE_8_SNAPSHOT).encode()).hexdigest()[:16] == "133f7402b82338fb"


@pytest.mark.parametrize(
    "earlier",
    [
        RELEASE_8_SNAPSHOT,
        RELEASE_7_SNAPSHOT,
        RELEASE_1_SNAPSHOT,
        RELEASE_2_SNAPSHOT,
        RELEASE_3_SNAPSHOT,
        RELEASE_4_SNAPSHOT,
        RELEASE_5_SNAPSHOT,
        RELEASE_6_SNAPSHOT,
    ],
    ids=[f"release-{n}" for n in (8, 7, 1, 2, 3, 4, 5, 6)],
)
def test_a_config_registered_by_an_earlier_release_reads_back_and_keeps_its_registration(earlier):
    assert from_dict(earlier) == ExperimentConfig()
    assert registration(ExperimentConfig(), earlier) is earlier  # same hash as before
    changed = ExperimentConfig(train=replace(ExperimentConfig().train, kl_coef=0.05))
    assert registration(changed, earlier) == changed.to_dict()  # a real change is a new config


def test_retired_train_fields_are_refused_in_a_file_with_the_reason(tmp_path):
    assert problems_of(tmp_path, "[train]\ntemperature = 0.7\nseed = 3\n") == [
        "grpo.toml: train.temperature = 0.7: is no longer a setting: the trainer uses [rollouts] temperature, "
        "the one the rollouts were sampled with",
        "grpo.toml: train.seed = 3: is no longer a setting: the minibatch order is seeded from the experiment's "
        "seed and the round",
    ]


def test_the_test_experiment_file_loads():
    config = load_config(ROOT / "tests" / "tiny_experiment.toml", name="tiny")
    assert (config.name, config.rounds, config.rollouts.group_size, config.train.minibatches) == (
        "tiny",
        2,
        4,
        2,
    )


BAD_CASES = {
    "group_size 0": ("[rollouts]\ngroup_size = 0", "rollouts.group_size = 0: must be an integer in 1..1024"),
    "group_size bool": (
        "[rollouts]\ngroup_size = true",
        "rollouts.group_size = true: must be an integer in 1..1024",
    ),
    "group_size fraction": (
        "[rollouts]\ngroup_size = 2.5",
        "rollouts.group_size = 2.5: must be an integer in 1..1024",
    ),
    "group_size string": (
        '[rollouts]\ngroup_size = "8"',
        'rollouts.group_size = "8": must be an integer in 1..1024',
    ),
    "string learning rate": (
        '[train]\nlearning_rate = "fast"',
        'train.learning_rate = "fast": must be a number in (0, 1]',
    ),
    "zero learning rate": (
        "[train]\nlearning_rate = 0",
        "train.learning_rate = 0: must be a number in (0, 1]",
    ),
    "negative rounds": ("rounds = -3", "rounds = -3: must be an integer in 1..10000"),
    "seed too big": ("seed = 2147483648", "seed = 2147483648: must be an integer in 0..2147483647"),
    "huge max_new_tokens": (
        "[rollouts]\nmax_new_tokens = 1e8",
        "rollouts.max_new_tokens = 100000000.0: must be an integer in 1..32768",
    ),
    "zero temperature": (
        "[rollouts]\ntemperature = 0",
        "rollouts.temperature = 0: must be a number in (0, 10]",
    ),
    "nan top_p": ("[rollouts]\ntop_p = nan", "rollouts.top_p = nan: must be a number in (0, 1]"),
    "engine": ('[rollouts]\nengine = "jax"', 'rollouts.engine = "jax": must be one of "torch", "vllm"'),
    "device": (
        '[rollouts]\ndevice = "gpu"',
        'rollouts.device = "gpu": must be "cpu", "cuda", "cuda:N" or "mps"',
    ),
    "zero epochs": ("[train]\nepochs = 0", "train.epochs = 0: must be an integer in 1..1000"),
    "clip range": ("[train]\nclip_eps = 1.5", "train.clip_eps = 1.5: must be a number in (0, 1]"),
    "eval tasks": ("[eval]\nnum_tasks = 0", "eval.num_tasks = 0: must be an integer in 1..100000"),
    "experiment name": (
        'name = "Maze GRPO"',
        "name = \"Maze GRPO\": must be 1 to 64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
    ),
    "environment": (
        '[env]\nname = "grid"',
        'env.name = "grid": is neither a registered environment (arithmetic, countdown, credit_dial, lookup, maze) nor an import path "package.module:factory"',
    ),
    "rubric": (
        'rubric = "envv"',
        'rubric = "envv": is neither a registered rubric (countdown-solved, env, env-efficient) nor an import path '
        '"package.module:rubric" (did you mean "env"?)',
    ),
    "rubric by import path that is no rubric": (
        'rubric = "argparse:Namespace"',
        'rubric = "argparse:Namespace": argparse:Namespace() returned a Namespace: expected a Rubric or a '
        "RubricGroup (creditline.credit.rubrics)",
    ),
    "estimator": ('[advantages]\nestimator = "ppo"', f'advantages.estimator = "ppo": {one_of(available())}'),
    "unknown key": (
        "[rollouts]\ngrup_size = 4",
        "rollouts.grup_size = 4: unknown key (did you mean group_size?); known keys: device, dtype, enforce_eager, "
        "engine, gpu_memory_utilization, group_size, max_new_tokens, prompt_format, stop, tasks_per_round, temperature, "
        "tensor_parallel_size, top_p",
    ),
    "unknown section": (
        "[rollout]\ngroup_size = 4",
        "rollout = { group_size = 4 }: unknown key (did you mean rollouts?); known keys: advantages, branching, env, eval, "
        "initial_policy, name, reward_model, rollouts, rounds, rubric, seed, train, verifiers, warm_start",
    ),
    "section not a table": (
        "eval = 5",
        "eval = 5: must be a table with keys num_tasks, verifiers",
    ),
    "params not a table": ('[env]\nparams = "big"', 'env.params = "big": must be a table of parameters'),
    "environment rejects params": (
        "[env]\nparams = { size = 1 }",
        'env.params = { size = 1 }: rejected by environment "maze": maze size must be at least 2, got 1',
    ),
    "unknown environment param": (
        "[env]\nparams = { sise = 4 }",
        'env.params = { sise = 4 }: unknown parameter sise of environment "maze"; known: invalid_penalty, '
        "max_steps, progress_reward, show_last_action, size, view",
    ),
    "environment param type": (
        '[env]\nparams = { size = "5" }',
        'env.params.size = "5": must be an integer, like the default 5',
    ),
    "default params of another environment": (
        '[env]\nname = "arithmetic"',
        'env.params = { size = 5, max_steps = 16, invalid_penalty = 0.1, progress_reward = 0.1, view = "relative" }: '
        'unknown parameters size, max_steps, invalid_penalty, progress_reward, view of environment "arithmetic"; '
        'known: max_operand (env.params defaults to parameters of "maze": set env.params for "arithmetic")',
    ),
    "unknown estimator param": (
        "[advantages]\nparams = { gama = 0.9 }",
        'advantages.params = { gama = 0.9 }: unknown parameter gama of estimator "gigpo"; known: conventions, '
        "enable_similarity, gamma, mode, similarity_thresh, step_advantage_w",
    ),
    "estimator param type": (
        "[advantages]\nparams = { gamma = true }",
        "advantages.params.gamma = true: must be a finite number, like the default 0.95",
    ),
    "minibatches above the episodes": (
        "[rollouts]\ntasks_per_round = 2\ngroup_size = 3\n[train]\nminibatches = 7",
        "train.minibatches = 7: must be at most rollouts.tasks_per_round × rollouts.group_size = 6, "
        "the episodes of a round (a minibatch needs at least one)",
    ),
    "verifiers evaluation without an interpreter": (
        '[eval.verifiers]\nenv_id = "my-env"',
        'eval.verifiers.python = "": is needed with eval.verifiers.env_id: the interpreter of a venv with verifiers '
        "installed, e.g. .venv-verifiers-0.4/bin/python",
    ),
    "verifiers evaluation's missing interpreter": (
        '[eval.verifiers]\nenv_id = "my-env"\npython = "no/such/python"',
        'eval.verifiers.python = "no/such/python": is not an executable file',
    ),
    "task selection of a classic environment": (
        '[eval.verifiers]\nselect = { include = { idx = ["0:2"] } }',
        'eval.verifiers.select = { include = { idx = ["0:2"] } }: is for api "v1" only: a classic environment\'s '
        "splits are its dataset (rollouts) and eval_dataset (the evaluation)",
    ),
    "task selection creditline makes": (
        '[verifiers]\napi = "v1"\nselect = { limit = 3, shuffle = false }',
        "verifiers.select = { limit = 3, shuffle = false }: unknown keys limit, shuffle; known: include, exclude, "
        "skip (creditline sets shuffle, seed and limit)",
    ),
    "task selection by a negative position": (
        '[eval.verifiers]\napi = "v1"\nselect = { include = { idx = [-1] } }',
        "eval.verifiers.select.include = { idx = [-1] }: must be a table of lists: idx (positions ≥ 0 or "
        '"start:stop:step" slices), ids, keys, names (strings)',
    ),
    "missing initial policy": (
        'initial_policy = "no/such/folder"',
        'initial_policy = "no/such/folder": must be "builtin:tiny", "builtin:chat" or a HF checkpoint folder (no such folder)',
    ),
}


@pytest.mark.parametrize("text, expected", BAD_CASES.values(), ids=BAD_CASES.keys())
def test_each_bad_field_gives_exactly_one_line(tmp_path, text, expected):
    assert problems_of(tmp_path, text) == [f"grpo.toml: {expected}"]


def test_an_estimator_rejecting_its_params_is_one_line_naming_the_params(tmp_path):
    (line,) = problems_of(tmp_path, '[advantages]\nparams = { mode = "typo" }')
    assert line.startswith(
        'grpo.toml: advantages.params = { mode = "typo" }: rejected by estimator "gigpo": '
    )
    assert "typo" in line.split(": rejected by", 1)[1]


def test_a_folder_without_config_json_is_not_a_policy(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (line,) = problems_of(tmp_path, f'initial_policy = "{tmp_path / "ckpt"}"')
    assert line.endswith(
        'must be "builtin:tiny", "builtin:chat" or a HF checkpoint folder (the folder has no config.json)'
    )
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    (line,) = problems_of(tmp_path, f'initial_policy = "{tmp_path / "ckpt"}"')
    assert "its tokenizer cannot be loaded (" in line


def test_a_checkpoint_whose_tokenizer_has_no_eos_is_refused(tmp_path, tiny_policy_dir):
    import shutil

    folder = shutil.copytree(tiny_policy_dir, tmp_path / "ckpt")
    config = tmp_path / "grpo.toml"
    config.write_text(f'initial_policy = "{folder}"')
    assert load_config(config).initial_policy == str(folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "eos_token": None}))
    (line,) = problems_of(tmp_path, f'initial_policy = "{folder}"')
    assert line.endswith("its tokenizer has no EOS token, so a completion could never stop: set eos_token in "
                         "tokenizer_config.json")  # fmt: skip


def test_a_registered_config_reads_back_though_its_policy_folder_is_gone(tmp_path):
    stored = {**ExperimentConfig().to_dict(), "initial_policy": str(tmp_path / "deleted")}
    assert from_dict(stored).initial_policy == str(tmp_path / "deleted")


def test_every_problem_is_reported_together(tmp_path):
    text = """
name = "Bad Name"
rounds = 0
[rollouts]
group_size = 0
temperature = "hot"
engine = "jax"
[train]
learning_rate = -1
[advantages]
estimator = "ppo"
[eval]
num_tasks = 1e9
bogus = 1
"""
    lines = problems_of(tmp_path, text)
    fields_named = [line.split(" = ", 1)[0].removeprefix("grpo.toml: ") for line in lines]
    assert fields_named == [
        "name", "rounds", "rollouts.group_size", "rollouts.temperature", "rollouts.engine",
        "advantages.estimator", "train.learning_rate", "eval.num_tasks", "eval.bogus",
    ]  # fmt: skip
    assert all(line.startswith("grpo.toml: ") and "\n" not in line for line in lines)


def test_the_error_is_a_value_error_whose_text_is_its_lines(tmp_path):
    (tmp_path / "x.toml").write_text("rounds = 0\nseed = -1\n")
    with pytest.raises(ValueError) as caught:
        load_config(tmp_path / "x.toml")
    error = caught.value
    assert isinstance(error, ConfigError) and str(error) == "\n".join(error.problems)
    assert len(error.problems) == 2


def test_a_toml_syntax_error_names_the_line_and_column(tmp_path):
    lines = problems_of(tmp_path, 'name = "x"\n[rollouts]\ngroup_size = = 4\n')
    assert lines == ["grpo.toml: line 3, column 14: invalid TOML (invalid value): group_size = = 4"]
    lines = problems_of(tmp_path, 'name = "x')
    assert lines == ['grpo.toml: line 1, column 10: invalid TOML (unterminated string): name = "x']


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "nope.toml")
    assert caught.value.problems == [f"{tmp_path / 'nope.toml'}: no such config file"]


def test_an_override_s_problem_does_not_blame_the_file(tmp_path):
    lines = problems_of(tmp_path, "rounds = 0", name="BAD")
    assert lines == [
        "name = \"BAD\": must be 1 to 64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
        "grpo.toml: rounds = 0: must be an integer in 1..10000",
    ]


def test_whole_floats_become_ints_and_ints_are_numbers(tmp_path):
    (tmp_path / "ok.toml").write_text("[rollouts]\ngroup_size = 4.0\ntemperature = 1\n")
    config = load_config(tmp_path / "ok.toml")
    assert config.rollouts.group_size == 4 and type(config.rollouts.group_size) is int
    assert config.rollouts.temperature == 1
    assert from_dict({"rollouts": {"group_size": 1}}).rollouts.group_size == 1  # legal; advantages are then 0


def test_a_config_that_exists_is_valid():
    with pytest.raises(ConfigError, match=r"^rollouts.group_size = 0: must be an integer in 1..1024$"):
        replace(ExperimentConfig(), rollouts=RolloutSettings(group_size=0))
    with pytest.raises(ConfigError, match=r"^\(config\) = \[1, 2\]: must be a table of fields$"):
        from_dict([1, 2])  # type: ignore[arg-type]


def _leaf_fields(cls, prefix=""):
    for name, hint in hints(cls).items():
        if is_dataclass(hint):
            yield from _leaf_fields(hint, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", hint


def test_every_field_declares_its_rule_in_its_annotation():
    """No bare type: every field says what it allows (a bounded number, choices, a pattern, ...), in words
    an error can quote."""
    for path, hint in _leaf_fields(ExperimentConfig):
        assert hint not in (int, float, str, bool), f"{path}: a bare {hint.__name__} has no rule"
        words = allowed_by(hint)
        assert words.startswith("must be ") and "≥" not in words, (path, words)  # numbers bounded both ways


# --- property: a mutated config is either rejected with a ConfigError or valid ------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
OUT_OF_RANGE = st.sampled_from([0, -1, -(2**31), 2**31, 10**9, 1e8, 0.5, -0.0, 1.0001, float("inf"), ""])


def _paths(data: dict, prefix: str = ""):
    for key, value in data.items():
        yield f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _paths(value, f"{prefix}{key}.")


PATHS = sorted(_paths(DEFAULT_SNAPSHOT))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=JSON_VALUES | OUT_OF_RANGE)
def test_one_mutated_field_is_a_config_error_or_a_valid_config(path, value):
    data = copy.deepcopy(DEFAULT_SNAPSHOT)
    *outer, last = path.split(".")
    target = data
    for name in outer:
        target = target[name]
    target[last] = value
    try:
        config = from_dict(data)
    except ConfigError as error:
        assert error.problems and all(line and "\n" not in line for line in error.problems)
        assert any(line.startswith(path.split(".")[0]) for line in error.problems)
    else:
        assert from_dict(config.to_dict()) == config


def test_chat_prompts_need_a_policy_with_a_chat_template(tmp_path):
    (line,) = problems_of(tmp_path, '[rollouts]\nprompt_format = "chat"\n')
    assert line.startswith(
        'grpo.toml: rollouts.prompt_format = "chat": the built-in tiny policy has no chat template'
    )
    folder = tmp_path / "base-model"
    from creditline.policy.models import build_tiny_policy

    build_tiny_policy(folder)
    (line,) = problems_of(tmp_path, f'initial_policy = "{folder}"\n[rollouts]\nprompt_format = "chat"\n')
    assert "rollouts.prompt_format" in line and "has no chat template" in line
    chat = tmp_path / "chat.toml"
    chat.write_text(
        'initial_policy = "builtin:chat"\n[rollouts]\nprompt_format = "chat"\nmax_new_tokens = 4\n'
    )
    assert load_config(chat).initial_policy == "builtin:chat"


def test_the_chat_example_loads():
    config = load_config(ROOT / "examples" / "chat-maze.toml")
    assert (config.initial_policy, config.rollouts.prompt_format) == ("builtin:chat", "plain")
    assert config.warm_start.episodes == 0 and config.rollouts.max_new_tokens > 1
