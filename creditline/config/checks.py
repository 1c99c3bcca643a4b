"""Checking an experiment configuration before anything is registered.

An experiment's name is registered for good the first time it runs, so a config that would fail (or
hang) in round 1 must fail here instead: every field is checked, every problem is collected, and they
are reported together, one line each, naming the file, the dotted field, the value and what is allowed:

    grpo.toml: rollouts.group_size = 0: must be an integer in 1..1024

Each field's own rule is its type annotation (`creditline.config`, `creditline.config.stage_settings`),
checked by pydantic and put into words by `creditline.config.schema`. The checks here are the ones a
field's type cannot say.

The checks that relate fields or look outside the config are the functions below (`RELATIONS`
names their fields): an estimator's parameters are resolved and tried on a four-step probe table,
minibatches are compared with the episodes of a round, the sizes of a round are held to `LIMITS`, and
the initial policy's folder is looked for only when a new config is loaded (`files=True`), never when a
registered one is read back (the folder may be gone by then, or the reader may run elsewhere).

A config is code: `env.name` is an import path (or a plugin's name), and its factory is called with
`env.params`; `rubric` may be one too. So the checks run in two stages. First every value and every
relation that reads values only; nothing the config names is imported. Then, only if nothing was wrong and
the caller asks for it (`code=True`: a config being loaded, never one constructed or read back),
`code_problems` imports the environment's module and builds it once, to try its parameters, and loads the
rubric, to see that it is one. A refused config has run none of its code.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from creditline.config.param_kinds import is_number, kind_mismatch, whole_number
from creditline.config.schema import (  # noqa: F401 (ConfigError: callers import it from here too)
    ConfigError,
    Problem,
    key_text,
    show,
    valid_values,
    validate,
    values,
)
from creditline.config.stage_settings import CHAT_FORMATS
from creditline.envs import UnknownEnvironment, environment_factory, make_env
from creditline.policy import BUILTIN_CHAT_POLICY, BUILTIN_POLICIES, BUILTIN_POLICY

SELECT_KEYS = ("include", "exclude", "skip")
"""The keys of verifiers' v1 `SelectConfig` a config may set (`[verifiers] select`); creditline sets
`shuffle`, `seed` and `limit`."""
RELATIONS = (
    "initial_policy",
    "rubric",
    "env.name",
    "env.params",
    "advantages.params",
    "train.minibatches",
    "rollouts.prompt_format",
    "warm_start.episodes",
)
"""Fields whose check needs other fields or the file system (see the functions at the end)."""


def check_config(
    cls: type, data: Mapping[Any, Any], *, files: bool = False, code: bool = False
) -> tuple[Any, list[Problem]]:
    """(the config `cls` built from `data`, or None; every problem) of a whole experiment config given as a
    dict: each field against its type, then the relations between the fields that passed. `code`: once
    every value is valid, also import and build the environment it names (the module doc)."""
    built, problems = validate(cls, data)
    valid = values(built) if built is not None else valid_values(cls, data, problems)
    problems += relation_problems(cls, valid, files=files)
    if code and not problems:
        problems += code_problems(cls, valid)
    return (None if problems else built), problems


# --- relations and the outside world -----------------------------------------------------------------


def relation_problems(cls: type, config: Mapping[str, Any], *, files: bool) -> list[Problem]:
    """The checks of RELATIONS that import nothing the config names, each run only when the fields it
    reads passed their own checks."""
    env, adv = config.get("env", {}), config.get("advantages", {})
    rollouts, train = config.get("rollouts", {}), config.get("train", {})
    problems: list[Problem] = []
    if "initial_policy" in config:
        chat = rollouts.get("prompt_format") if rollouts.get("prompt_format") in CHAT_FORMATS else None
        problems += initial_policy_problems(config["initial_policy"], files=files, chat=chat)
        # the machine's vLLM, not the config: checked only when a config is loaded
        if files and rollouts.get("engine") == "vllm":
            from creditline.engines.vllm_platform import vllm_problems

            problems += vllm_problems(config["initial_policy"], rollouts)
    if "estimator" in adv and "params" in adv:
        note = inherited_note(
            cls, "advantages.estimator", "advantages.params", adv["estimator"], adv["params"]
        )
        problems += estimator_problems(adv["estimator"], adv["params"], note)
    problems += verifiers_problems(config.get("verifiers", {}), "verifiers", files=files)
    problems += verifiers_problems(config.get("eval", {}).get("verifiers", {}), "eval.verifiers", files=files)
    problems += branching_problems(
        config.get("branching", {}),
        adv.get("estimator"),
        config.get("verifiers", {}),
        adv.get("sample_filter"),
    )
    problems += size_problems(rollouts, env.get("params", {}))
    if {"tasks_per_round", "group_size"} <= rollouts.keys() and "minibatches" in train:
        episodes = rollouts["tasks_per_round"] * rollouts["group_size"]
        if train["minibatches"] > episodes:
            problems.append(
                Problem(
                    "train.minibatches",
                    train["minibatches"],
                    f"must be at most rollouts.tasks_per_round × rollouts.group_size = {episodes}, "
                    "the episodes of a round (a minibatch needs at least one)",
                )
            )
    return problems


def code_problems(cls: type, config: Mapping[str, Any]) -> list[Problem]:
    """The checks that run the config's code (the rubric's, then the environment's). Called only on a
    config whose values are all valid (`check_config`)."""
    return rubric_problems(config["rubric"]) + env_code_problems(cls, config)


def rubric_problems(name: str) -> list[Problem]:
    """`rubric`: import its module (a plugin's, or an import path's) and check that it is, or its factory
    returns, a rubric. The registry is imported by name, as `registered` does (and for its reason)."""
    registry = importlib.import_module("creditline.credit.rubric_registry")
    try:
        registry.load_rubric(name)
    except registry.UnknownRubric as exc:
        return [Problem("rubric", name, str(exc))]
    return []


def env_code_problems(cls: type, config: Mapping[str, Any]) -> list[Problem]:
    """Import the environment's module, build the environment once with `env.params` (its factory is the
    judge of them), and ask it what the config's features need."""
    env, adv = config["env"], config["advantages"]
    try:
        environment_factory(env["name"])
    except UnknownEnvironment as exc:  # the module's import failed, or it has no such factory
        return [Problem("env.name", env["name"], str(exc))]
    note = inherited_note(cls, "env.name", "env.params", env["name"], env["params"])
    built, problems = env_problems(env["name"], env["params"], note)
    if built is None:
        return problems
    problems += steps_problems(built.max_steps, config["rollouts"], config["eval"], env["params"])
    warm = config["warm_start"]["episodes"] > 0
    problems += env_feature_problems(built, env["name"], config["initial_policy"], warm)
    return problems + gold_answer_problems(
        adv["estimator"], built, env["name"], config["rollouts"], config["verifiers"]
    )


# --- limits: sizes this program cannot hold, refused before anything is registered ------------------

MAX_EPISODES_PER_ROUND = 262_144
"""rollouts.tasks_per_round × rollouts.group_size. A round samples every episode in one engine batch and
keeps all of them in its steps table: 2**18 is 32 times a large published recipe (DAPO: 512 prompts × 16)."""
MAX_ENV_STEPS = 10_000
"""An environment's `max_steps` (turns per episode). Agent benchmarks stop at tens to hundreds of turns;
`env.params.max_steps = 1e8` is a typo, not an episode, and every step is a row of the steps table."""
MAX_STEP_ROWS = 16_777_216
"""Episodes × max_steps of a round (or of an evaluation): the rows of a steps table at its longest. Each
row holds a step's token ids and log-probabilities, at least ~1 KB in memory, so 2**24 rows is ~16 GB:
more than that does not fit the host memory of a GPU machine beside the model."""


def size_problems(rollouts: Mapping[str, Any], env_params: Any) -> list[Problem]:
    """The limits above that read values only (before the environment is imported)."""
    problems = []
    if {"tasks_per_round", "group_size"} <= rollouts.keys():
        episodes = rollouts["tasks_per_round"] * rollouts["group_size"]
        if episodes > MAX_EPISODES_PER_ROUND:
            problems.append(
                Problem(
                    "rollouts.tasks_per_round",
                    rollouts["tasks_per_round"],
                    f"× rollouts.group_size ({rollouts['group_size']}) = {episodes:,} episodes per "
                    f"round: at most {MAX_EPISODES_PER_ROUND:,} (a round holds all of them in "
                    "memory at once)",
                )
            )
    given = env_params.get("max_steps") if isinstance(env_params, Mapping) else None
    if is_number(given) and not given <= MAX_ENV_STEPS:
        problems.append(
            Problem(
                "env.params.max_steps",
                given,
                f"must be at most {MAX_ENV_STEPS:,} "
                "(steps per episode; each is a row of the round's steps table)",
            )
        )
    return problems


def steps_problems(
    max_steps: Any, rollouts: Mapping[str, Any], eval_: Mapping[str, Any], env_params: Mapping[Any, Any]
) -> list[Problem]:
    """The built environment's own `max_steps` (its default, when env.params gives none) held to the
    limits."""
    if not is_number(max_steps) or not max_steps <= MAX_ENV_STEPS:
        return [
            Problem(
                "env.params",
                env_params,
                f"build an environment whose max_steps is {show(max_steps)}: "
                f"it must be a number of steps, at most {MAX_ENV_STEPS:,}",
            )
        ]
    problems = []
    for path, episodes in (
        ("rollouts.tasks_per_round", rollouts["tasks_per_round"] * rollouts["group_size"]),
        ("eval.num_tasks", eval_["num_tasks"]),
    ):
        rows = episodes * max_steps
        if rows > MAX_STEP_ROWS:
            value = rollouts["tasks_per_round"] if path.startswith("rollouts") else eval_["num_tasks"]
            problems.append(
                Problem(
                    path,
                    value,
                    f"{episodes:,} episodes × max_steps {max_steps:,} = {rows:,.0f} "
                    f"steps: at most {MAX_STEP_ROWS:,} rows in one steps table (~1 KB each in "
                    "memory)",
                )
            )
    return problems


def branching_problems(
    branching: Mapping[str, Any],
    estimator: str | None,
    verifiers: Mapping[str, Any],
    sample_filter: str | None,
) -> list[Problem]:
    """Branching needs an estimator that reads the continuations' links (a continuation is not a fresh
    episode of its task), rollouts that creditline plays (a verifiers environment cannot be restarted), and no
    sample filter (PROF would weigh a continuation as one more episode of its group, and could drop its
    source)."""
    points = branching.get("points", "none")
    if points == "none":
        return []
    problems = []
    advantages = importlib.import_module("creditline.credit.advantages")
    if estimator is not None and "branch_of_episode" not in advantages.input_columns(estimator):
        readers = [
            name for name in advantages.available() if "branch_of_episode" in advantages.input_columns(name)
        ]
        problems.append(
            Problem(
                "branching.points",
                points,
                f"needs an estimator that reads branches ({', '.join(readers)}); "
                f'"{estimator}" would take each continuation for a fresh episode of its task',
            )
        )
    if verifiers.get("env_id"):
        problems.append(
            Problem(
                "branching.points",
                points,
                "cannot branch rollouts a verifiers environment plays "
                "(verifiers.env_id): creditline cannot restart its episodes",
            )
        )
    if sample_filter not in (None, "none"):
        problems.append(
            Problem(
                "branching.points",
                points,
                f'cannot be combined with sample_filter = "{sample_filter}": '
                "the filter would count a continuation as an episode of its group and could drop "
                "the episode it branched from",
            )
        )
    return problems


def gold_answer_problems(
    estimator: str,
    env: Any,
    env_name: str,
    rollouts: Mapping[str, Any],
    verifiers: Mapping[str, Any],
) -> list[Problem]:
    """An estimator that reads the policy's belief in a gold answer (IGPO) needs tasks that have one, and
    the torch engine to score it; imported rollouts carry no such column."""
    advantages = importlib.import_module("creditline.credit.advantages")
    if "gold_logprob" not in advantages.input_columns(estimator):
        return []
    problems = []
    if not callable(getattr(env, "gold_answer", None)):
        problems.append(
            Problem(
                "advantages.estimator",
                estimator,
                f"needs tasks with a gold answer: environment "
                f'"{env_name}" has no gold_answer() (the built-ins with one: lookup, arithmetic)',
            )
        )
    if rollouts.get("engine", "torch") != "torch":
        problems.append(
            Problem(
                "advantages.estimator",
                estimator,
                'scores the gold answer with the policy in torch: rollouts.engine must be "torch"',
            )
        )
    if verifiers.get("env_id"):
        problems.append(
            Problem(
                "advantages.estimator",
                estimator,
                "cannot score rollouts a verifiers environment "
                "plays (verifiers.env_id): they carry no gold-answer log-probabilities",
            )
        )
    return problems


def verifiers_problems(verifiers: Mapping[str, Any], section: str, *, files: bool) -> list[Problem]:
    """A verifiers environment (`section`: "verifiers" or "eval.verifiers") needs an interpreter (one that
    exists, when a file is loaded); its `select` holds only the `SelectConfig` keys a config may set, and
    only for a v1 environment."""
    problems = []
    select = verifiers.get("select") or {}
    if select and verifiers.get("api") == "classic":
        problems.append(
            Problem(
                f"{section}.select",
                select,
                'is for api "v1" only: a classic environment\'s '
                "splits are its dataset (rollouts) and eval_dataset (the evaluation)",
            )
        )
    elif unknown := [key for key in select if key not in SELECT_KEYS]:
        problems.append(
            Problem(
                f"{section}.select",
                select,
                f"unknown key{'s' * (len(unknown) > 1)} "
                f"{', '.join(map(key_text, unknown))}; known: {', '.join(SELECT_KEYS)} "
                "(creditline sets shuffle, seed and limit)",
            )
        )
    else:
        problems += select_value_problems(select, f"{section}.select")
    if not verifiers.get("env_id") or "python" not in verifiers:
        return problems
    python = verifiers["python"]
    if not python:
        problems.append(
            Problem(
                f"{section}.python",
                python,
                f"is needed with {section}.env_id: the interpreter "
                "of a venv with verifiers installed, e.g. .venv-verifiers-0.4/bin/python",
            )
        )
    elif files and not os.access(Path(python).expanduser(), os.X_OK):
        problems.append(Problem(f"{section}.python", python, "is not an executable file"))
    return problems


def select_value_problems(select: Mapping[str, Any], path: str) -> list[Problem]:
    """`skip` a whole number ≥ 0; `include` and `exclude` tables of `TaskMatchConfig` lists (`idx`: whole
    numbers or "start:stop:step" strings; `ids`, `keys`, `names`: strings)."""
    problems = []
    if "skip" in select and (whole_number(select["skip"]) is None or select["skip"] < 0):
        problems.append(Problem(f"{path}.skip", select["skip"], "must be a whole number ≥ 0"))
    for key in ("include", "exclude"):
        match = select.get(key, {})
        fine = (
            isinstance(match, Mapping)
            and set(match) <= {"idx", "ids", "keys", "names"}
            and all(
                isinstance(items, list) and all(_task_match(name, v) for v in items)
                for name, items in match.items()
            )
        )
        if not fine:
            problems.append(
                Problem(
                    f"{path}.{key}",
                    match,
                    "must be a table of lists: idx (positions ≥ 0 or "
                    '"start:stop:step" slices), ids, keys, names (strings)',
                )
            )
    return problems


_IDX = re.compile(r"\s*(\d+|\d*:\d*(:\d*)?)\s*(,\s*(\d+|\d*:\d*(:\d*)?)\s*)*")


def _task_match(name: str, value: Any) -> bool:
    """A `TaskMatchConfig` list item: an `idx` is a position ≥ 0 or "start:stop:step" slices
    (comma-separated); `ids`, `keys` and `names` are strings."""
    if name != "idx" or isinstance(value, str):
        return isinstance(value, str) and (name != "idx" or _IDX.fullmatch(value) is not None)
    number = whole_number(value)
    return number is not None and number >= 0


def initial_policy_problems(value: str, *, files: bool, chat: str | None = None) -> list[Problem]:
    """Problems of `initial_policy` (and of `rollouts.prompt_format` when it is `chat`, a chat format: the
    policy's tokenizer must have a chat template)."""
    if value == BUILTIN_POLICY and chat:
        why = (
            "the built-in tiny policy has no chat template: "
            'use "plain" or "auto", or initial_policy "builtin:chat"'
        )
        return [Problem("rollouts.prompt_format", chat, why)]
    if value in BUILTIN_POLICIES or not files:
        return []
    folder = Path(value).expanduser()
    if (folder / "config.json").is_file():
        return tokenizer_problems(folder, value, chat)
    why = "the folder has no config.json" if folder.is_dir() else "no such folder"
    choices = ", ".join(f'"{name}"' for name in BUILTIN_POLICIES)
    return [Problem("initial_policy", value, f"must be {choices} or a HF checkpoint folder ({why})")]


def tokenizer_problems(folder: Path, value: str, chat: str | None) -> list[Problem]:
    """Why the checkpoint's tokenizer cannot serve the policy: none loads, it has no EOS to stop a
    completion at, or (`chat`) it has no chat template. The tokenizer is loaded once."""
    from creditline.policy.models import load_tokenizer
    from creditline.rollout.conversation import has_chat_template

    try:
        tokenizer = load_tokenizer(folder)
    except (OSError, ValueError, TypeError) as exc:
        why = f"its tokenizer cannot be loaded ({str(exc).splitlines()[0][:200]})"
        return [Problem("initial_policy", value, why)]
    problems = []
    if tokenizer.eos_token_id is None:
        why = (
            "its tokenizer has no EOS token, so a completion could never stop: "
            "set eos_token in tokenizer_config.json"
        )
        problems.append(Problem("initial_policy", value, why))
    if chat and not has_chat_template(tokenizer):
        why = (
            f"the tokenizer of {value} has no chat template: "
            'add one to its tokenizer_config.json, or use "plain"'
        )
        problems.append(Problem("rollouts.prompt_format", chat, why))
    return problems


def field_default(cls: type, path: str) -> Any:
    """The default of a dotted field, e.g. "env.params" of ExperimentConfig (without building `cls`)."""
    first, *rest = path.split(".")
    declared = next(f for f in fields(cls) if f.name == first)
    if declared.default is not MISSING:
        value = declared.default
    else:
        assert callable(declared.default_factory), f"{path}: {first} has no default"
        value = declared.default_factory()
    for name in rest:
        value = getattr(value, name)
    return value


def inherited_note(cls: type, name_path: str, params_path: str, name: str, params: Mapping[Any, Any]) -> str:
    """A hint when another name than the default keeps the default parameters (written for the default)."""
    default_name = field_default(cls, name_path)
    if name == default_name or params != field_default(cls, params_path):
        return ""
    return f' ({params_path} defaults to parameters of "{default_name}": set {params_path} for "{name}")'


def parameter_problems(
    path: str, params: Mapping[Any, Any], defaults: Mapping[str, Any], owner: str, note: str = ""
) -> list[Problem]:
    """Unknown parameter names (one problem), then each value of another type than its (non-None) default."""
    unknown = [key for key in params if key not in defaults]
    problems = []
    if unknown:
        names = ", ".join(map(key_text, unknown))
        allowed = (
            f"unknown parameter{'s' * (len(unknown) > 1)} {names} of {owner}; "
            f"known: {', '.join(sorted(defaults))}"
        )
        problems.append(Problem(path, params, allowed + note))
    for key, value in params.items():
        if (kind := kind_mismatch(value, defaults.get(key))) is not None:
            problems.append(
                Problem(
                    f"{path}.{key_text(key)}",
                    value,
                    f"must be {kind}, like the default {show(defaults[key])}",
                )
            )
    return problems


def env_problems(name: str, params: Mapping[Any, Any], note: str = "") -> tuple[Any, list[Problem]]:
    """(the environment, built once; []) or (None, why not): `env.params` checked against the
    constructor's signature, then by building it. The factory is someone else's code, so whatever it
    raises (or a `sys.exit` in it) is its refusal of the parameters, one line."""
    try:
        signature = inspect.signature(environment_factory(name))
    except (TypeError, ValueError):  # a factory without one (a C type): building it is the check
        signature = None
    if signature is None or any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        problems = []
    else:
        defaults = {
            p.name: None if p.default is p.empty else p.default for p in signature.parameters.values()
        }
        problems = parameter_problems("env.params", params, defaults, f'environment "{name}"', note)
    if problems:
        return None, problems
    try:
        return make_env(name, **params), []
    except (TypeError, ValueError, ArithmeticError) as exc:
        failure = " ".join(str(exc).split())
    except SystemExit as exc:
        failure = f"called sys.exit({exc.code!r})"
    except Exception as exc:
        failure = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return None, [Problem("env.params", params, f'rejected by environment "{name}": {failure}')]


def env_feature_problems(env: Any, name: str, policy: str, warm_start: bool) -> list[Problem]:
    """The optional environment members (`creditline.envs.base.Environment`) that the config's features
    need: `vocabulary` for the built-in tiny policy, `format_example` for a warm start and for the
    built-in chat policy's tokenizer corpus."""
    problems = []
    if policy == BUILTIN_POLICY and not hasattr(env, "vocabulary"):
        problems.append(
            Problem(
                "initial_policy",
                policy,
                f'environment "{name}" has no vocabulary() listing its '
                "words, which the built-in tiny policy's word-level tokenizer needs: add one, or "
                'use "builtin:chat" or a model folder',
            )
        )
    needs = [
        what
        for what, wanted in (("a warm start", warm_start), ('"builtin:chat"', policy == BUILTIN_CHAT_POLICY))
        if wanted
    ]
    if needs and not hasattr(env, "format_example"):
        field_, value = ("warm_start.episodes", "> 0") if warm_start else ("initial_policy", policy)
        problems.append(
            Problem(
                field_,
                value,
                f'environment "{name}" has no format_example(rng) drawing a random '
                f"well-formed action, which {' and '.join(needs)} needs",
            )
        )
    return problems


_PROBE_STEPS = {
    "group_id": ["g", "g", "g", "g"],
    "episode_id": ["a", "a", "b", "b"],
    "step_idx": [0, 1, 0, 1],
    "anchor_key": ["s0", "s1", "s0", "s2"],
    "step_reward": [0.0, 1.0, 0.0, 0.0],
    "episode_reward": [1.0, 1.0, 0.0, 0.0],
    "gold_logprob": [-1.0, -0.5, -1.0, -1.5],
    "model_reward": [0.1, 0.2, -0.1, 0.0],
}
"""One group of two two-step episodes sharing their first state: enough for every estimator's code path
(with the columns an estimator reads besides the required ones: IGPO's gold-answer log-probabilities, a
step-reward model's values)."""


def estimator_problems(estimator: str, params: Mapping[Any, Any], note: str = "") -> list[Problem]:
    """`advantages.params`: names and types against the estimator's defaults, then resolved and tried once."""
    advantages = importlib.import_module("creditline.credit.advantages")
    defaults = {
        **advantages.registry.resolve(estimator, {})[0].defaults,
        "conventions": None,
    }  # conventions: resolve checks it
    problems = parameter_problems("advantages.params", params, defaults, f'estimator "{estimator}"', note)
    if problems:
        return problems
    try:
        failure = _estimator_failure(estimator, json.dumps(params, sort_keys=True, allow_nan=False))
    except (TypeError, ValueError):  # not plain JSON (NaN, an object): tried without the cache
        failure = _failure(lambda: _try_estimator(estimator, params))
    if failure:
        return [Problem("advantages.params", params, f'rejected by estimator "{estimator}": {failure}')]
    return []


@functools.lru_cache(maxsize=256)
def _estimator_failure(estimator: str, params_json: str) -> str | None:
    """Cached: every config construction checks its estimator, and estimators are pure functions."""
    return _failure(lambda: _try_estimator(estimator, json.loads(params_json)))


def _try_estimator(estimator: str, params: Mapping[str, Any]) -> None:
    import pandas as pd  # imported by the estimators anyway; not by every reader of a config

    advantages = importlib.import_module("creditline.credit.advantages")
    advantages.params_hash(estimator, params)
    # Numeric warnings (an overflow from gamma = 1e300) are the estimator's to judge, not the config's.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        advantages.compute(estimator, pd.DataFrame(_PROBE_STEPS), **params)


def _failure(attempt: Callable[[], Any]) -> str | None:
    """The one-line message of the TypeError or ValueError (or ArithmeticError) `attempt` raises, else
    None."""
    try:
        attempt()
    except (TypeError, ValueError, ArithmeticError) as exc:
        return " ".join(str(exc).split())
    return None
