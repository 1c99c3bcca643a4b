"""The experiment configuration: small frozen dataclasses, one per concern.

An experiment is named and its whole configuration is registered in the lineage store the first
time it runs; a round reads it back from there, so a Dagster run needs nothing but its partition
key. A TOML file (`creditline run --config FILE`) overrides any field of the defaults:

    name = "maze-grpo"
    [advantages]
    estimator = "grpo"
    params = { norm_by_std = true }

Because a registered name can never be reused, nothing is registered unchecked: each field's annotation
is its rule (a range, choices or a pattern, checked by pydantic: `creditline.config.schema`), `load_config`
and `from_dict` report every problem of a config at once as a `ConfigError`, and constructing an
`ExperimentConfig` checks its values too, so a config that exists is valid.

A config is code (`env.name` names a module and a factory, `rubric` may too): only `load_config` and
`from_dict`, once every value is valid, import the environment and build it once to try `env.params`, and
load the rubric. Constructing a config runs
none of it, and neither does `read_registered`, which reads a registered config back: it was tried when
it was registered, and reading it (to compare, report or export) must not run it again.

Configs outlive releases. A field added later takes its default when an older registered config is read
back, and a retired field (`RETIRED_FIELDS`) is dropped there but refused, with the reason, in a file.
`registration` keeps an experiment's registered config (and its hash) when the new release reads it back
as the same config, so upgrading creditline does not turn a running experiment into a "changed config".
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, with_config

from creditline.config.checks import check_config
from creditline.config.schema import (
    TABLE,
    ConfigError,
    Flag,
    Int,
    Matches,
    NonEmptyText,
    Number,
    OneOf,
    Problem,
    Resolves,
    Strings,
    Table,
    registered,
    resolver,
    sections,
    validating,
)
from creditline.config.stage_settings import (
    BranchSettings,
    PromptFormat,
    RewardModelSettings,
    SampleFilter,
    TrainConfig,
    WarmStartSettings,
)
from creditline.engines.base import SamplingParams
from creditline.envs import Environment, environment_target, make_env
from creditline.policy import BUILTIN_POLICY

EXPERIMENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
NAME_WORDS = "1 to 64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
ExperimentName = Annotated[str, Matches(EXPERIMENT_NAME, NAME_WORDS)]
Engine = Literal["torch", "vllm"]
"""The kinds `creditline.engines.make_engine` builds."""
ENGINES: tuple[str, ...] = get_args(Engine)
VllmDtype = Literal["auto", "float32", "bfloat16", "float16"]
VLLM_DTYPES: tuple[str, ...] = get_args(VllmDtype)
Device = Annotated[str, Matches(re.compile(r"cpu|mps|cuda(:[0-9]+)?"), '"cpu", "cuda", "cuda:N" or "mps"')]
MAX_ROUNDS = 10_000
"""The most rounds an experiment can have (`creditline rescore --rounds` is held to it too)."""
TensorParallelSize = Annotated[Int, Field(ge=1, le=64)]
"""vLLM: GPUs one engine spans. The experiment's `rollouts.tensor_parallel_size`, which a deployment's
`[generation] tensor_parallel_size` overrides on its machines (`creditline.config.deployment`)."""


@with_config(TABLE)
@dataclass(frozen=True)
class EnvSettings:
    name: Annotated[str, Resolves(environment_target)] = "maze"
    """A registered environment (a `creditline.environments` entry point: the built-ins `maze` and
    `arithmetic`, or an installed package's) or an import path `package.module:factory`
    (`creditline.envs.registry`). Code: it is imported (and called) only once the config's values are
    valid."""
    params: Table = field(
        default_factory=lambda: {
            "size": 5,
            "max_steps": 16,
            "invalid_penalty": 0.1,
            "progress_reward": 0.1,
            "view": "relative",
        }
    )
    """Keyword arguments of the environment's constructor; checked by building it once."""

    def build(self) -> Environment:
        """A fresh environment instance (rollouts make one per episode)."""
        return make_env(self.name, **self.params)


@with_config(TABLE)
@dataclass(frozen=True)
class RolloutSettings:
    tasks_per_round: Annotated[Int, Field(ge=1, le=100_000)] = 64
    """Training tasks drawn per round; each is played `group_size` times."""
    group_size: Annotated[Int, Field(ge=1, le=1024)] = 8
    """G: samples per task, the group that advantages compare within (G = 1 is legal, but every
    group-relative advantage is then 0)."""
    temperature: Annotated[Number, Field(gt=0, le=10)] = 1.0
    top_p: Annotated[Number, Field(gt=0, le=1)] = 1.0
    max_new_tokens: Annotated[Int, Field(ge=1, le=32_768)] = 1
    """Completion length limit (a longer completion is cut and recorded as `finish_reason` "length");
    the built-in tiny policy's actions are one token."""
    stop: Annotated[Strings, Field(max_length=16)] = ()
    """Strings that end a completion besides the EOS (e.g. `["</answer>"]`); the token that completes one
    is kept, and the action text ends with it (vLLM's `stop` with `include_stop_str_in_output`)."""
    prompt_format: PromptFormat = "auto"
    """"chat": a conversation rendered by the tokenizer's chat template, its token ids kept turn to turn;
    "chat-last": the template over the instructions and the current observation only, fresh each turn;
    "plain": the observation's text alone each turn; "auto": chat when the tokenizer has a template."""
    engine: Engine = "torch"
    """"torch" (any machine) or "vllm" (`creditline[vllm]` on a CUDA GPU, or vLLM's x86 CPU build)."""
    device: Device = "cpu"
    gpu_memory_utilization: Annotated[Number, Field(gt=0, le=1)] = 0.5
    """vLLM: fraction of the GPU's memory for weights and KV cache (training gets it back between
    rollouts)."""
    tensor_parallel_size: TensorParallelSize = 1
    """vLLM: GPUs one engine spans (a deployment may override it: `TensorParallelSize`)."""
    enforce_eager: Flag = False
    """vLLM: true skips CUDA graphs (faster start, slower decoding); a CPU always runs eagerly."""
    dtype: VllmDtype = "auto"
    """vLLM: the weights' dtype while generating; "auto" is the checkpoint's own on a GPU, float32 on a CPU
    (where bfloat16 is refused: vLLM's CPU kernels for it died here)."""

    def sampling(self, seed: int) -> SamplingParams:
        """How the round's training completions are sampled."""
        return SamplingParams(self.temperature, self.top_p, self.max_new_tokens, seed, tuple(self.stop))

    def vllm_settings(self, tensor_parallel_size: int | None = None):
        """The vLLM engine's settings; `tensor_parallel_size`: a deployment's, where it sets one (a property
        of its machines), instead of this experiment's."""
        from creditline.engines.vllm_engine import VLLMSettings

        return VLLMSettings(
            self.device,
            self.gpu_memory_utilization,
            tensor_parallel_size or self.tensor_parallel_size,
            self.enforce_eager,
            self.dtype,
        )


@with_config(TABLE)
@dataclass(frozen=True)
class AdvantageSettings:
    estimator: Annotated[str, OneOf(registered("creditline.credit.advantages", "available"))] = "gigpo"
    """A registered estimator (`creditline.credit.advantages.available()`)."""
    params: Table = field(
        default_factory=lambda: {"mode": "mean_std_norm", "gamma": 0.95, "step_advantage_w": 1.0}
    )
    """The estimator's keyword parameters; checked by resolving them and computing a probe table."""
    sample_filter: SampleFilter = "none"
    """Episodes left out of the update before advantages are computed: "none", or "prof" (PROF's process
    consistency filter, `creditline.credit.sample_filter`)."""
    filter_remove: Annotated[Int, Field(ge=1, le=1024)] = 4
    """"prof": episodes dropped per group (PROF's recipe: 4 of 8)."""


VerifiersApi = Literal["classic", "v1"]
"""The verifiers APIs a round can take its rollouts from (`creditline.interop.verifiers_runners`)."""
VERIFIERS_APIS: tuple[str, ...] = get_args(VerifiersApi)
OPTIONAL_NAME = re.compile(r"|[A-Za-z0-9_.:/@-]{1,200}")
OptionalName = Annotated[str, Matches(OPTIONAL_NAME, "empty, or a name of letters, digits and _ . : / @ -")]


@with_config(TABLE)
@dataclass(frozen=True)
class VerifiersSettings:
    """A verifiers environment, run in its own venv against a checkpoint served on 127.0.0.1
    (`creditline.interop.verifiers_source`): as `[verifiers]`, the source of a round's rollouts; as
    `[eval.verifiers]`, the held-out evaluation."""

    env_id: OptionalName = ""
    """Empty: off (the default; creditline's engine plays `env`). Otherwise `vf.load_environment(env_id)` (api
    "classic") or a v1 taskset id (api "v1"). `[verifiers]`: it plays the round's rollouts against the parent
    checkpoint, `rollouts.tasks_per_round` examples of its training split, `group_size` each, at
    `rollouts.temperature`. `[eval.verifiers]`: it plays the evaluation against each round's checkpoint (and
    the initial policy), `eval.num_tasks` examples of its eval split, once each, greedily. Both: at most
    `rollouts.max_new_tokens` tokens per model call."""
    api: VerifiersApi = "classic"
    """"classic" (verifiers ≤ 0.3.x: results.jsonl) or "v1" (verifiers ≥ 0.4: traces.jsonl)."""
    python: Annotated[str, Matches(re.compile(r".*"), "a path")] = ""
    """The interpreter of a venv with verifiers and the environment installed (e.g.
    ".venv-verifiers-0.4/bin/python"); it runs `creditline/interop/verifiers_runners/<api>.py`."""
    env_args: Table = field(default_factory=dict)
    """classic: keyword arguments of `load_environment`; v1: the `env` table of verifiers' EvalConfig
    (e.g. `{agent = {runtime = {type = "subprocess"}}}`)."""
    paths: Annotated[Strings, Field(max_length=16)] = ()
    """Folders put first on the runner's `sys.path`: environment modules that are not installed."""
    select: Table = field(default_factory=dict)
    """v1 only: which of the taskset's tasks may be drawn, as keys `include`, `exclude` (each a table of `idx`
    ranges like `["0:100"]`, `ids`, `keys` or `names`) and `skip` of verifiers' `SelectConfig`; creditline
    sets `shuffle`, `seed` and `limit`. A v1 taskset has no eval split of its own: hold tasks out of training
    with `exclude` here and evaluate on them with `include` in `[eval.verifiers]`. (A classic environment's
    splits are its `dataset`, for rollouts, and `eval_dataset`, for the evaluation; each falls back to the
    other.)"""


@with_config(TABLE)
@dataclass(frozen=True)
class EvalSettings:
    num_tasks: Annotated[Int, Field(ge=1, le=100_000)] = 100
    """Held-out tasks, each played once greedily (with `verifiers`: at most this many examples of the
    environment's eval split, the same ones every round)."""
    verifiers: VerifiersSettings = field(default_factory=VerifiersSettings)
    """The held-out evaluation as a verifiers environment; off by default (`env_id` empty: creditline's `env`
    on held-out task ids). Its own table, apart from `[verifiers]`, so that a round may train on one
    environment and be evaluated on another; to evaluate on the training environment's eval split, repeat
    its `api`, `python`, `env_id`, `env_args` and `paths` here. The policy is served as for `[verifiers]`
    rollouts (`rollouts.engine`); success is a reward > 0, the return is the environment's reward."""


@with_config(TABLE)
@dataclass(frozen=True)
class ExperimentConfig:
    name: ExperimentName = "maze-gigpo"
    seed: Annotated[Int, Field(ge=0, le=2_147_483_647)] = 0
    """Seeds the initial policy, the training task draw, sampling and minibatch order."""
    rounds: Annotated[Int, Field(ge=1, le=MAX_ROUNDS)] = 20
    """The most rounds this experiment runs (the sensor stops there; `creditline run --rounds` may ask
    fewer)."""
    initial_policy: NonEmptyText = BUILTIN_POLICY
    """"builtin:tiny" (a random tiny word-level Llama from `seed`), "builtin:chat" (a random small Qwen2
    chat model whose BPE tokenizer is trained on the environment's text) or the path of a local HF
    checkpoint folder (one with a config.json; looked for when a config is loaded)."""
    rubric: Annotated[str, Resolves(resolver("creditline.credit.rubric_registry", "rubric_target"))] = "env"
    """The rubric used for training: a built-in (`env`, `env-efficient`), a registered plugin's (a
    `creditline.rubrics` entry point) or an import path `package.module:rubric` to a Rubric, a RubricGroup
    or a factory returning one (`creditline.credit.rubric_registry`). Code: it is imported only once the
    config's values are valid."""
    env: EnvSettings = field(default_factory=EnvSettings)
    rollouts: RolloutSettings = field(default_factory=RolloutSettings)
    advantages: AdvantageSettings = field(default_factory=AdvantageSettings)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(learning_rate=2e-3, epochs=2, minibatches=2)
    )
    eval: EvalSettings = field(default_factory=EvalSettings)
    warm_start: WarmStartSettings = field(default_factory=WarmStartSettings)
    """A supervised pass on random well-formed actions before round 1 (`creditline.train.warm_start`); off by
    default."""
    verifiers: VerifiersSettings = field(default_factory=VerifiersSettings)
    """Rollouts from a verifiers environment instead of creditline's engine; off by default."""
    branching: BranchSettings = field(default_factory=BranchSettings)
    """Continuations restarted from chosen steps of the round's episodes (`creditline.rollout.branching`); off
    by default."""
    reward_model: RewardModelSettings = field(default_factory=RewardModelSettings)
    """The step-reward model trained each round for the estimators that read one (`prime`, `spa`;
    `creditline.credit.reward_model`); unused otherwise."""

    def __post_init__(self):
        if validating():  # built by pydantic from a table being checked: `_validated` reports its problems
            return
        _, problems = check_config(ExperimentConfig, self.to_dict())
        if problems:
            raise ConfigError([p.line() for p in problems])

    def to_dict(self) -> dict[str, Any]:
        """The config as it is registered and hashed: JSON-shaped (a tuple field becomes a list)."""
        return asdict(
            self, dict_factory=lambda items: {k: list(v) if isinstance(v, tuple) else v for k, v in items}
        )


RETIRED_FIELDS: dict[tuple[str, str], str] = {
    (
        "train",
        "temperature",
    ): "the trainer uses [rollouts] temperature, the one the rollouts were sampled with",
    ("train", "seed"): "the minibatch order is seeded from the experiment's seed and the round",
}
"""(section, field) → why it is no longer a setting. Such fields were silently overwritten before."""


def from_dict(data: Mapping[str, Any], base: ExperimentConfig | None = None) -> ExperimentConfig:
    """Overlay `data` on `base` (default: `ExperimentConfig()`), recursively; every problem raises
    one `ConfigError`. The environment `env.name` names is imported and built once, after every value
    passed (use `read_registered` for a config that was registered already)."""
    return _validated(_without_retired(data), base or ExperimentConfig(), code=True)


def read_registered(data: Mapping[str, Any]) -> ExperimentConfig:
    """A registered config read back (`ExperimentConfig().to_dict()` shaped, of this release or an
    earlier one: retired fields are dropped), its values checked but none of its code run: its
    environment was imported and built when it was registered; rounds build it when they play it."""
    return _validated(_without_retired(data), ExperimentConfig())


def registration(config: ExperimentConfig, registered: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """What to register for `config`: the already registered dict if it reads back as `config` (an
    earlier release wrote it, with fewer or retired fields), else `config.to_dict()`."""
    if registered is not None and read_registered(registered) == config:
        return registered
    return config.to_dict()


def _without_retired(data: Any) -> Any:
    if not isinstance(data, Mapping):
        return data
    kept = dict(data)
    for section, name in RETIRED_FIELDS:
        if isinstance(kept.get(section), Mapping) and name in kept[section]:
            kept[section] = {k: v for k, v in kept[section].items() if k != name}
    return kept


def _retired_problems(data: Mapping[str, Any]) -> list[Problem]:
    return [
        Problem(f"{section}.{name}", data[section][name], f"is no longer a setting: {why}")
        for (section, name), why in RETIRED_FIELDS.items()
        if isinstance(data.get(section), Mapping) and name in data[section]
    ]


def load_config(path: str | Path | None = None, **overrides: Any) -> ExperimentConfig:
    """The defaults overlaid with the TOML file at `path`, then with `overrides` (None values are
    ignored), checked; every problem raises one `ConfigError` whose lines name the file (problems
    of an override's field name no file)."""
    data = read_toml(Path(path)) if path else {}
    if retired := _retired_problems(data):
        raise ConfigError([problem.line(str(path)) for problem in retired])
    given = {key: value for key, value in overrides.items() if value is not None}
    merged = overlay(ExperimentConfig, data, given)
    return _validated(
        merged, ExperimentConfig(), str(path) if path else None, set(given), files=True, code=True
    )


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; a missing, unreadable or malformed file raises a one-line `ConfigError`."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such config file"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the config file ({exc.strerror})"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text (byte {exc.start})"]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: {describe_toml_error(exc, text)}"]) from None


_TOML_AT = re.compile(
    r"(?P<msg>.*) \(at (line (?P<line>\d+), column (?P<column>\d+)|end of document)\)", re.DOTALL
)


def describe_toml_error(exc: tomllib.TOMLDecodeError, text: str) -> str:
    """`line L, column C: invalid TOML (what): <the line>`; Python < 3.14 has the position only in the
    message."""
    source_lines = text.splitlines() or [""]
    match = _TOML_AT.fullmatch(str(exc))
    if hasattr(exc, "lineno") and hasattr(exc, "colno") and hasattr(exc, "msg"):  # all three, or none
        line, column, what = exc.lineno, exc.colno, exc.msg
    elif match and match["line"]:
        line, column, what = int(match["line"]), int(match["column"]), match["msg"]
    elif match:  # at the end of the document
        line, column, what = len(source_lines), len(source_lines[-1]) + 1, match["msg"]
    else:
        return f"invalid TOML ({exc})"
    what = what[:1].lower() + what[1:]
    quoted = source_lines[line - 1].strip() if 0 < line <= len(source_lines) else ""
    return f"line {line}, column {column}: invalid TOML ({what})" + (f": {quoted}" if quoted else "")


def overlay(cls: type, base: Mapping[str, Any], data: Mapping[Any, Any]) -> dict[Any, Any]:
    """`base` with `data`'s keys set; a table under a section field (a dataclass) merges into it, any
    other value (`params` tables included) replaces the base value. Unknown keys are kept, to be reported."""
    merged = dict(base)
    for key, value in data.items():
        section = sections(cls).get(key)
        if section and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = overlay(section, merged[key], value)
        else:
            merged[key] = value
    return merged


def _validated(
    data: Any,
    base: ExperimentConfig,
    source: str | None = None,
    overridden: set[str] | None = None,
    *,
    files: bool = False,
    code: bool = False,
) -> ExperimentConfig:
    if not isinstance(data, Mapping):
        raise ConfigError([Problem("(config)", data, "must be a table of fields").line(source)])
    merged = overlay(ExperimentConfig, base.to_dict(), data)
    built, problems = check_config(ExperimentConfig, merged, files=files, code=code)
    if built is None:
        overridden = overridden or set()
        raise ConfigError([p.line(None if p.path.split(".")[0] in overridden else source) for p in problems])
    return built
