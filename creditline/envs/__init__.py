"""Environments: the protocol (`base`), the built-ins, and finding one by name (`registry`)."""

from __future__ import annotations

from creditline.envs.base import REQUIRED_MEMBERS, Environment, Observation, Transition
from creditline.envs.registry import (
    BUILTIN_ENVIRONMENTS,
    UnknownEnvironment,
    environment_factory,
    environment_target,
    registered_environments,
)


def make_env(name: str, **params) -> Environment:
    """Build the environment `name` stands for (a registered name or an import path) with `params`;
    unknown names, bad parameters and objects that are not environments fail with a clear message."""
    try:
        factory = environment_factory(name)
    except UnknownEnvironment as exc:
        raise UnknownEnvironment(f"environment {name!r} {exc}") from exc
    try:
        env = factory(**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for environment {name!r}: {exc}") from exc
    missing = [member for member in REQUIRED_MEMBERS if not hasattr(env, member)]
    if missing:
        raise ValueError(
            f"environment {name!r}: the factory returned a {type(env).__name__} without {', '.join(missing)} "
            "(see creditline.envs.base.Environment)"
        )
    return env


VOCABULARY_ORDER = ("arithmetic", "maze")
"""The built-ins whose words come first, in this order; later built-ins add only new words at the end, so
adding one never renumbers the tiny policy's tokenizer (nor changes the default checkpoint's hash)."""


def builtin_vocabulary() -> list[str]:
    """The union of every built-in environment's words, in a stable order (plugins never change it: it
    is the built-in tiny policy's vocabulary, and so part of the default experiment's checkpoint hash)."""
    words: list[str] = []
    rest = sorted(set(BUILTIN_ENVIRONMENTS) - set(VOCABULARY_ORDER))
    for name in (*VOCABULARY_ORDER, *rest):
        for word in BUILTIN_ENVIRONMENTS[name].vocabulary():
            if word not in words:
                words.append(word)
    return words


__all__ = [
    "BUILTIN_ENVIRONMENTS",
    "Environment",
    "Observation",
    "Transition",
    "UnknownEnvironment",
    "builtin_vocabulary",
    "environment_factory",
    "environment_target",
    "make_env",
    "registered_environments",
]
