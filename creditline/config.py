"""The experiment configuration: small frozen dataclasses, one per concern.

An experiment is named and its whole configuration is registered in the lineage store the first
time it runs; a round reads it back from there, so a Dagster run needs nothing but its partition
key. A TOML file (`creditline run --config FILE`) overrides any field of the defaults:

    name = "maze-grpo"
    [advantages]
    estimator = "grpo"
    params = { norm_by_std = true }
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from creditline.envs import Environment, make_env
from creditline.trainer import TrainConfig

EXPERIMENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class EnvSettings:
    name: str = "maze"
    """A registered environment (`creditline.envs.ENVIRONMENTS`)."""
    params: dict[str, Any] = field(
        default_factory=lambda: {"size": 5, "max_steps": 16, "invalid_penalty": 0.1, "progress_reward": 0.1,
                                 "view": "relative"}
    )  # fmt: skip

    def build(self) -> Environment:
        """A fresh environment instance (rollouts make one per episode)."""
        return make_env(self.name, **self.params)


@dataclass(frozen=True)
class RolloutSettings:
    tasks_per_round: int = 64
    """Training tasks drawn per round; each is played `group_size` times."""
    group_size: int = 8
    """G: samples per task, the group that advantages compare within."""
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 1
    """Completion length limit; the built-in maze actions are one token."""
    engine: str = "torch"
    """"torch" (any machine) or "vllm" (CUDA GPU, `creditline[vllm]`)."""
    device: str = "cpu"


@dataclass(frozen=True)
class AdvantageSettings:
    estimator: str = "gigpo"
    """A registered estimator (`creditline.advantages.available()`)."""
    params: dict[str, Any] = field(
        default_factory=lambda: {"mode": "mean_std_norm", "gamma": 0.95, "step_advantage_w": 1.0}
    )


@dataclass(frozen=True)
class EvalSettings:
    num_tasks: int = 100
    """Held-out tasks, each played once greedily."""


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "maze-gigpo"
    seed: int = 0
    """Seeds the initial policy, the training task draw, sampling and minibatch order."""
    rounds: int = 20
    """The most rounds this experiment runs (the sensor stops there; `creditline run --rounds` may ask fewer)."""
    initial_policy: str = "builtin:tiny"
    """"builtin:tiny" (a random tiny Llama from `seed`) or the path of a local HF checkpoint folder."""
    rubric: str = "env"
    """The registered rubric used for training (`creditline.rubrics.RUBRICS`)."""
    env: EnvSettings = field(default_factory=EnvSettings)
    rollouts: RolloutSettings = field(default_factory=RolloutSettings)
    advantages: AdvantageSettings = field(default_factory=AdvantageSettings)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(learning_rate=2e-3, epochs=2, minibatches=2)
    )
    eval: EvalSettings = field(default_factory=EvalSettings)

    def __post_init__(self):
        if not EXPERIMENT_NAME.match(self.name):
            raise ValueError(f"experiment name {self.name!r} must match {EXPERIMENT_NAME.pattern}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def from_dict(data: dict[str, Any], base: Any = None) -> Any:
    """Overlay `data` on `base` (default: `ExperimentConfig()`), recursively; unknown keys fail."""
    base = ExperimentConfig() if base is None else base
    known = {f.name: f for f in fields(base)}
    updates = {}
    for key, value in data.items():
        if key not in known:
            raise ValueError(f"unknown config key {key!r} in {type(base).__name__}; known: {sorted(known)}")
        current = getattr(base, key)
        updates[key] = (
            from_dict(value, current) if is_dataclass(current) and isinstance(value, dict) else value
        )
    return replace(base, **updates)


def load_config(path: str | Path | None = None, **overrides: Any) -> ExperimentConfig:
    data = tomllib.loads(Path(path).read_text()) if path else {}
    data.update({k: v for k, v in overrides.items() if v is not None})
    return from_dict(data)
