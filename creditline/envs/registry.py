"""Finding an environment by name: a registered plugin, or an import path.

An experiment's `env.name` is either

- a name registered in the `creditline.environments` entry-point group. creditline registers its
  built-ins (`maze`, `arithmetic`, `lookup`, `credit_dial`) there in its own `pyproject.toml`; a package
  registers its environments the same way, and installing it (`pip install`) is all it takes:

      [project.entry-points."creditline.environments"]
      countdown = "mypkg.envs:make_countdown"

- or an import path `package.module:factory` (a dotted module, a colon, an attribute), for an environment
  that is importable but not registered.

Either way the target is a factory: called with `env.params` as keyword arguments, it returns a fresh
environment (`creditline.envs.base.Environment`); a class is a factory. Rollouts call it once per episode.

Naming is not importing: `environment_target` says what a name stands for ("module:attr") from the
entry points' metadata alone, so a config's other values can be checked before any of its code runs;
`environment_factory` imports it. An import that fails in any way is an `UnknownEnvironment` saying which
module and what happened, never an exit (`creditline.plugins`, shared with rubrics).

Two installed packages registering one name is refused (naming both), never resolved by install order.
When creditline runs from a source tree without being installed, its entry points are missing; the
built-ins are then found in `BUILTIN_ENVIRONMENTS` directly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from creditline.envs.arithmetic import ArithmeticEnv
from creditline.envs.base import Environment
from creditline.envs.credit_dial import CreditDialEnv
from creditline.envs.lookup import LookupEnv
from creditline.envs.maze import MazeEnv
from creditline.plugins import IMPORT_PATH, entry_point_targets, load_attribute, near_name

ENTRY_POINT_GROUP = "creditline.environments"

BUILTIN_ENVIRONMENTS: dict[str, type[Environment]] = {
    "maze": MazeEnv,
    "arithmetic": ArithmeticEnv,
    "lookup": LookupEnv,
    "credit_dial": CreditDialEnv,
}
"""creditline's own environments (also registered as entry points in pyproject.toml)."""


class UnknownEnvironment(ValueError):
    """`env.name` names no registered environment and no importable factory; the message says why,
    without repeating the name (callers put it in front: `env.name = "grid": ...`)."""


def registered_environments() -> dict[str, str]:
    """{name: "module:attr"} of every registered environment, built-ins included."""
    found = entry_point_targets(ENTRY_POINT_GROUP, "environment", UnknownEnvironment)
    for name, factory in BUILTIN_ENVIRONMENTS.items():
        found.setdefault(name, f"{factory.__module__}:{factory.__qualname__}")
    return dict(sorted(found.items()))


def environment_target(name: str) -> str:
    """The "module:attr" that `name` stands for (see the module doc), without importing anything: a
    registered name is looked up in the entry points' metadata, an import path is only parsed. A clear
    `UnknownEnvironment` when it is neither."""
    if name in BUILTIN_ENVIRONMENTS:
        factory = BUILTIN_ENVIRONMENTS[name]
        return f"{factory.__module__}:{factory.__qualname__}"
    registered = registered_environments()
    if name in registered:
        return registered[name]
    if IMPORT_PATH.fullmatch(name):
        return name
    raise UnknownEnvironment(
        f"is neither a registered environment ({', '.join(registered)}) "
        f'nor an import path "package.module:factory"{near_name(name, registered)}'
    )


@functools.cache
def environment_factory(name: str) -> Callable[..., Environment]:
    """The factory `name` stands for (see the module doc); a clear `UnknownEnvironment` otherwise.
    Resolved once per process and name: rollouts build an environment per episode, and listing entry
    points reads every installed package's metadata (a failed lookup is not kept, so it is retried)."""
    if name in BUILTIN_ENVIRONMENTS:
        return BUILTIN_ENVIRONMENTS[name]
    target = environment_target(name)
    return _load(target, f" (registered as {target})" if target != name else "")


def _load(path: str, registered_as: str = "") -> Callable[..., Environment]:
    target = load_attribute(path, registered_as, UnknownEnvironment)
    if not callable(target):
        raise UnknownEnvironment(
            f"{path}{registered_as} is not callable: expected a factory returning an environment"
        )
    return target
