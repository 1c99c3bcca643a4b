"""Built-in environments and the name → constructor registry."""

from __future__ import annotations

from collections.abc import Callable

from creditline.envs.arithmetic import ArithmeticEnv
from creditline.envs.base import Environment, Observation, Transition
from creditline.envs.maze import MazeEnv

ENVIRONMENTS: dict[str, Callable[..., Environment]] = {"maze": MazeEnv, "arithmetic": ArithmeticEnv}


def make_env(name: str, **params) -> Environment:
    """Build a registered environment; unknown names and parameters fail with the valid choices."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {name!r}; registered: {sorted(ENVIRONMENTS)}")
    try:
        return ENVIRONMENTS[name](**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for environment {name!r}: {exc}") from exc


def builtin_vocabulary() -> list[str]:
    """The union of every built-in environment's words, in a stable order."""
    words: list[str] = []
    for name in sorted(ENVIRONMENTS):
        for word in ENVIRONMENTS[name].vocabulary():
            if word not in words:
                words.append(word)
    return words


__all__ = ["ENVIRONMENTS", "Environment", "Observation", "Transition", "make_env", "builtin_vocabulary"]
