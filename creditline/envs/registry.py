"""Finding an environment by name: a registered plugin, or an import path.

An experiment's `env.name` is either

- a name registered in the `creditline.environments` entry-point group. creditline registers its
  built-ins (`maze`, `arithmetic`, `lookup`) there in its own `pyproject.toml`; a package registers its
  environments the same way, and installing it (`pip install`) is all it takes:

      [project.entry-points."creditline.environments"]
      countdown = "mypkg.envs:make_countdown"

- or an import path `package.module:factory` (a dotted module, a colon, an attribute), for an environment
  that is importable but not registered.

Either way the target is a factory: called with `env.params` as keyword arguments, it returns a fresh
environment (`creditline.envs.base.Environment`); a class is a factory. Rollouts call it once per episode.

Two installed packages registering one name is refused (naming both), never resolved by install order.
When creditline runs from a source tree without being installed, its entry points are missing; the
built-ins are then found in `BUILTIN_ENVIRONMENTS` directly.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from importlib.metadata import entry_points

from creditline.envs.arithmetic import ArithmeticEnv
from creditline.envs.base import Environment
from creditline.envs.lookup import LookupEnv
from creditline.envs.maze import MazeEnv

ENTRY_POINT_GROUP = "creditline.environments"

BUILTIN_ENVIRONMENTS: dict[str, Callable[..., Environment]] = {
    "maze": MazeEnv,
    "arithmetic": ArithmeticEnv,
    "lookup": LookupEnv,
}
"""creditline's own environments (also registered as entry points in pyproject.toml)."""

IMPORT_PATH = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
"""`package.module:factory` (the attribute may be dotted: `module:Class.create`)."""


class UnknownEnvironment(ValueError):
    """`env.name` names no registered environment and no importable factory; the message says why,
    without repeating the name (callers put it in front: `env.name = "grid": ...`)."""


def registered_environments() -> dict[str, str]:
    """{name: "module:attr"} of every registered environment, built-ins included."""
    found: dict[str, str] = {}
    owners: dict[str, str] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        owner = point.dist.name if point.dist is not None else "?"
        if point.name in found and found[point.name] != point.value:
            raise UnknownEnvironment(
                f"environment {point.name!r} is registered twice: by {owners[point.name]} ({found[point.name]}) "
                f"and by {owner} ({point.value}); uninstall one, or name the one you mean by import path"
            )
        found[point.name], owners[point.name] = point.value, owner
    for name, factory in BUILTIN_ENVIRONMENTS.items():
        found.setdefault(name, f"{factory.__module__}:{factory.__qualname__}")
    return dict(sorted(found.items()))


@functools.cache
def environment_factory(name: str) -> Callable[..., Environment]:
    """The factory `name` stands for (see the module doc); a clear `UnknownEnvironment` otherwise.
    Resolved once per process and name: rollouts build an environment per episode, and listing entry
    points reads every installed package's metadata (a failed lookup is not kept, so it is retried)."""
    if name in BUILTIN_ENVIRONMENTS:
        return BUILTIN_ENVIRONMENTS[name]
    registered = registered_environments()
    if name in registered:
        return _load(registered[name], f" (registered as {registered[name]})")
    if IMPORT_PATH.fullmatch(name):
        return _load(name)
    raise UnknownEnvironment(
        f"is neither a registered environment ({', '.join(registered)}) "
        'nor an import path "package.module:factory"'
    )


def _load(path: str, registered_as: str = "") -> Callable[..., Environment]:
    module_name, _, attribute = path.partition(":")
    try:
        target = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownEnvironment(f"cannot import module {module_name!r}{registered_as}: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UnknownEnvironment(f"{path}{registered_as}: no attribute {part!r}")
        target = getattr(target, part)
    if not callable(target):
        raise UnknownEnvironment(
            f"{path}{registered_as} is not callable: expected a factory returning an environment"
        )
    return target
