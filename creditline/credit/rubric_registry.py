"""Finding a rubric by name: a built-in, a registered plugin, or an import path.

An experiment's `rubric` (and `creditline rescore --rubric`) is either

- a built-in: `env` or `env-efficient` (`creditline.credit.rubrics.RUBRICS`);
- a name registered in the `creditline.rubrics` entry-point group (as environments register in
  `creditline.environments`); installing the package that registers it is all it takes:

      [project.entry-points."creditline.rubrics"]
      distance = "mypkg.rubrics:distance_rubric"

- or an import path `package.module:attribute`, for a rubric that is importable but not registered.

Either way the target is a `Rubric` or `RubricGroup` (`creditline.credit.rubrics`), or a factory called
with no arguments that returns one. Naming is not importing: `rubric_target` says what a name stands for
from the entry points' metadata alone (the config's value check); `load_rubric` imports and builds it
(the config's code check, and every stage that scores). Failures are one `UnknownRubric` line each, worded
as the environments' are (`creditline.plugins`).

A rubric's version hashes its definition, not its name, so re-scoring by version (`rubric_by_version`)
looks through every rubric that can be loaded now: the built-ins, every registered plugin, and the names
or import paths the caller knows the version by (the lineage store records the one each version was first
loaded by).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from creditline.credit.rubrics import RUBRICS, Rubric, RubricGroup
from creditline.plugins import IMPORT_PATH, entry_point_targets, first_line, load_attribute, near_name

ENTRY_POINT_GROUP = "creditline.rubrics"
BUILTIN = "built-in"
"""What `registered_rubrics` gives as a built-in's target (built-ins are not entry points)."""


class UnknownRubric(ValueError):
    """`rubric` names no built-in, no registered plugin and no importable rubric; the message says why,
    without repeating the name (callers put it in front: `rubric = "envv": ...`)."""


def registered_rubrics() -> dict[str, str]:
    """{name: "module:attr", or "built-in"} of every rubric that has a name; a plugin may not take a
    built-in's name."""
    found = entry_point_targets(ENTRY_POINT_GROUP, "rubric", UnknownRubric)
    if clash := sorted(found.keys() & RUBRICS.keys()):
        raise UnknownRubric(
            f"rubric {clash[0]!r} is built in, and registered again as {found[clash[0]]}; "
            "register the plugin's rubric under another name"
        )
    return dict(sorted({**found, **dict.fromkeys(RUBRICS, BUILTIN)}.items()))


def rubric_target(name: str) -> str:
    """What `name` stands for ("built-in", or the "module:attr" to load), importing nothing: a registered
    name is looked up in the entry points' metadata, an import path is only parsed."""
    if name in RUBRICS:
        return BUILTIN
    registered = registered_rubrics()
    if name in registered:
        return registered[name]
    if IMPORT_PATH.fullmatch(name):
        return name
    raise UnknownRubric(
        f"is neither a registered rubric ({', '.join(registered)}) "
        f'nor an import path "package.module:rubric"{near_name(name, registered)}'
    )


def load_rubric(name: str) -> Rubric | RubricGroup:
    """The rubric `name` stands for (see the module doc); `UnknownRubric` saying why not."""
    return RUBRICS[name] if name in RUBRICS else _load_plugin(name)


@functools.cache
def _load_plugin(name: str) -> Rubric | RubricGroup:
    """A plugin's rubric or one by import path, built once per process and name (a failure is not kept,
    so it is retried)."""
    target = rubric_target(name)
    registered_as = f" (registered as {target})" if target != name else ""
    found = load_attribute(target, registered_as, UnknownRubric)
    if isinstance(found, Rubric | RubricGroup):
        return found
    if not callable(found):
        raise UnknownRubric(
            f"{target}{registered_as} is a {type(found).__name__}: expected a Rubric, a RubricGroup "
            "or a factory returning one (creditline.credit.rubrics)"
        )
    try:
        built = found()
    except SystemExit as exc:
        raise UnknownRubric(f"{target}(){registered_as} called sys.exit({exc.code!r})") from None
    except Exception as exc:
        raise UnknownRubric(f"{target}(){registered_as} raised {first_line(exc)}") from exc
    if not isinstance(built, Rubric | RubricGroup):
        raise UnknownRubric(
            f"{target}(){registered_as} returned a {type(built).__name__}: expected a Rubric or a "
            "RubricGroup (creditline.credit.rubrics)"
        )
    return built


def get_rubric(name: str) -> Rubric | RubricGroup:
    """`load_rubric`, its error naming the rubric (for messages outside a config check)."""
    try:
        return load_rubric(name)
    except UnknownRubric as exc:
        raise UnknownRubric(f"rubric {name!r} {exc}") from exc


def rubric_by_version(version: str, sources: Iterable[str] = ()) -> tuple[str, Rubric | RubricGroup]:
    """(the name or import path it loads by, the rubric) whose version is `version`, looked for among
    the built-ins, the registered plugins and `sources`; a ValueError for a version defined nowhere now.
    A plugin that fails to load is passed over here: it may not be the one asked for."""
    defined: dict[str, str] = {}
    for name in dict.fromkeys([*RUBRICS, *registered_rubrics(), *sources]):
        try:
            rubric = load_rubric(name)
        except UnknownRubric:
            continue
        if rubric.version == version:
            return name, rubric
        defined[rubric.version] = name
    raise ValueError(
        f"rubric version {version} was scored before but is no longer defined in code "
        "(creditline/credit/rubrics.py, a registered plugin, or the import path it was recorded with); "
        f"its stored partitions stay readable (defined now: {', '.join(defined)})"
    )


def loadable_rubrics() -> dict[str, Rubric | RubricGroup]:
    """{name: rubric} of the built-ins and every registered plugin that loads (the re-score partitions'
    versions in code); one that fails is left out, for its own config check to report."""
    found: dict[str, Rubric | RubricGroup] = {}
    for name in registered_rubrics():
        try:
            found[name] = load_rubric(name)
        except UnknownRubric:
            continue
    return found
