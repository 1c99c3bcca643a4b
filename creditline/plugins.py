"""Code a config names from outside creditline: an installed package's entry point, or an import path.

Environments (`creditline.envs.registry`, `env.name`) and rubrics (`creditline.credit.rubric_registry`,
`rubric`) are found the same way, with the same errors: a name registered in an entry-point group, or an
import path `package.module:attribute` (a dotted module, a colon, a possibly dotted attribute).

Naming is not importing: `entry_point_targets` reads the installed packages' metadata only, so a config's
values can be checked before any of its code runs; `load_attribute` imports. Whatever an import does
instead of returning (an ImportError, any other exception, even `sys.exit`) becomes one line of the
caller's error class, saying which module and what happened, never an exit: it is someone else's code,
run inside creditline. Two installed packages registering one name are refused (naming both), never
resolved by install order.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Collection
from importlib.metadata import entry_points
from typing import Any

IMPORT_PATH = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
"""`package.module:attribute` (the attribute may be dotted: `module:Class.create`)."""


def entry_point_targets(group: str, kind: str, error: type[ValueError]) -> dict[str, str]:
    """{name: "module:attr"} of every entry point in `group`; `error` when two packages register one
    name differently (`kind` names what they register, e.g. "environment")."""
    found: dict[str, str] = {}
    owners: dict[str, str] = {}
    for point in entry_points(group=group):
        owner = point.dist.name if point.dist is not None else "?"
        if point.name in found and found[point.name] != point.value:
            raise error(
                f"{kind} {point.name!r} is registered twice: "
                f"by {owners[point.name]} ({found[point.name]}) and by {owner} ({point.value}); "
                "uninstall one, or name the one you mean by import path"
            )
        found[point.name], owners[point.name] = point.value, owner
    return found


def near_name(name: str, names: Collection[str]) -> str:
    """' (did you mean "x"?)' when one of `names` is close to `name` (a typo), else ""."""
    guess = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
    return f' (did you mean "{guess[0]}"?)' if guess else ""


def load_attribute(path: str, registered_as: str, error: type[ValueError]) -> Any:
    """The object at the import path `path` ("module:attr"); `error` saying why not. `registered_as`
    (e.g. " (registered as m:f)") follows the path in every message."""
    module_name, _, attribute = path.partition(":")
    target = _import(module_name, registered_as, error)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise error(f"{path}{registered_as}: no attribute {part!r}")
        target = getattr(target, part)
    return target


def _import(module_name: str, registered_as: str, error: type[ValueError]) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"cannot import module {module_name!r}{registered_as}: {exc}") from exc
    except SystemExit as exc:
        raise error(f"importing {module_name}{registered_as} called sys.exit({exc.code!r})") from None
    except Exception as exc:
        raise error(f"importing {module_name}{registered_as} raised {first_line(exc)}") from exc


def first_line(exc: BaseException) -> str:
    """`Type: the first line of its message`, for one-line errors."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
