"""The config schema: each field's rule is its type annotation, and a broken rule is one line naming it.

Both files creditline reads, an experiment's config (`creditline.config`) and a deployment
(`creditline.config.deployment`), are frozen dataclasses whose annotations say what each field takes:

    group_size: Annotated[Int, Field(ge=1, le=1024)] = 8
    engine: Literal["torch", "vllm"] = "torch"
    device: Annotated[str, Matches(DEVICE, '"cpu", "cuda", "cuda:N" or "mps"')] = "cpu"

pydantic checks a whole table against them at once (`validate`); each of its errors becomes one `Problem`
naming the dotted field, the value as written and what the field allows, worded from the same annotation
rather than in pydantic's words, so every problem of a file is reported together, one line each:

    grpo.toml: rollouts.group_size = 0: must be an integer in 1..1024

The types here are stricter than pydantic's defaults, so that a value means what it was written as: an `Int`
takes a whole number (8, or 8.0, which becomes 8) and never a boolean or a string; a `Number` takes ints too
and keeps them as written (a config registered with `temperature = 1` keeps its hash); a `Flag` is true or
false only; a `Strings` list holds non-empty strings. Rules pydantic has no word for (`Matches`, `OneOf`,
`Resolves`) raise a ValueError whose text is what is allowed.

Constructing a dataclass checks nothing (pydantic builds it from a checked table, and
`creditline.config.ExperimentConfig` checks itself); checks that relate fields are functions over the
checked values (`creditline.config.checks`).
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
import types
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, is_dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import annotated_types
from pydantic import BeforeValidator, ConfigDict, Strict, TypeAdapter, ValidationError, WrapValidator
from pydantic.fields import FieldInfo
from pydantic_core import core_schema

from creditline.config.param_kinds import is_bool, whole_number
from creditline.errors import CreditlineError

T = TypeVar("T")
TABLE = ConfigDict(extra="forbid")
"""Every config dataclass's pydantic config (`with_config(TABLE)`): a key it does not declare is a problem."""


class ConfigError(CreditlineError, ValueError):
    """Everything wrong with a configuration: `problems` holds one line each, `str()` joins them."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Problem:
    path: str
    """The dotted field, e.g. "rollouts.group_size"."""
    value: Any
    allowed: str
    """What the field accepts, e.g. "must be an integer in 1..1024"."""

    def line(self, source: str | None = None) -> str:
        where = f"{source}: " if source else ""
        return f"{where}{self.path} = {show(self.value)}: {self.allowed}"


# --- the field types ---------------------------------------------------------------------------------


def _whole(value: Any) -> Any:
    number = whole_number(value)
    return value if number is None else number


def _as_written(value: Any, handler: Callable[[Any], Any]) -> Any:
    """A whole number stays an int (hashed as written); anything else is pydantic's strict float."""
    number = whole_number(value) if not isinstance(value, float) else None
    checked = handler(value if number is None else float(number))
    return checked if number is None else number


def _python_bool(value: Any) -> Any:
    return bool(value) if is_bool(value) else value


def _list_as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


Int = Annotated[int, BeforeValidator(_whole), Strict()]
"""A whole number: 8 or 8.0 (which becomes 8); not a boolean, a fraction or a string."""
Number = Annotated[float, Strict(), WrapValidator(_as_written)]
"""A real number; an int stays an int. Bound it with `Field(gt=..., le=...)` (NaN is outside any bound)."""
Flag = Annotated[bool, BeforeValidator(_python_bool), Strict()]
"""true or false, nothing that merely reads as one."""
Text = Annotated[str, Strict()]
"""Any string, the empty one included."""
NonEmptyText = Annotated[str, Strict(), annotated_types.MinLen(1)]
Strings = Annotated[tuple[NonEmptyText, ...], BeforeValidator(_list_as_tuple), Strict()]
"""A list of non-empty strings, kept as a tuple; bound its length with `Field(max_length=...)`."""
Table = dict[str, Any]
"""A table of parameters, checked by whoever takes them (`creditline.config.checks`)."""


class PlainRule:
    """A rule pydantic has no word for, checked once the value has its type: `allowed(value)` says what is
    allowed, or None if `value` is. Its words are also what a value of the wrong type is told."""

    def allowed(self, value: Any) -> str | None:
        raise NotImplementedError

    def check(self, value: Any) -> Any:
        if (why := self.allowed(value)) is not None:
            raise ValueError(why)
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))


@dataclass(frozen=True)
class Matches(PlainRule):
    """str: a full match of `regex`; `words` say what that is."""

    regex: re.Pattern[str]
    words: str

    def allowed(self, value: Any) -> str | None:
        fine = isinstance(value, str) and self.regex.fullmatch(value) is not None
        return None if fine else f"must be {self.words}"


@dataclass(frozen=True)
class AllMatch(PlainRule):
    """A list of strings, each a full match of `regex`; `words` say what the list is."""

    regex: re.Pattern[str]
    words: str

    def allowed(self, value: Any) -> str | None:
        fine = isinstance(value, tuple) and all(isinstance(v, str) and self.regex.fullmatch(v) for v in value)
        return None if fine else f"must be {self.words}"


@dataclass(frozen=True)
class OneOf(PlainRule):
    """str: one of `names`, or of the names a registry function returns when a value is checked (so that
    the registry's module is imported then, not when the config is: `registered`)."""

    names: Collection[str] | Callable[[], Collection[str]]

    def allowed(self, value: Any) -> str | None:
        names = self.names() if callable(self.names) else self.names
        return None if isinstance(value, str) and value in names else one_of(names)


@dataclass(frozen=True)
class Resolves(PlainRule):
    """str: a non-empty string that `resolve(value)` accepts (it must import nothing); its ValueError says
    why not."""

    resolve: Callable[[str], Any]

    def allowed(self, value: Any) -> str | None:
        if not isinstance(value, str) or not value:
            return "must be a non-empty string"
        try:
            self.resolve(value)
        except ValueError as exc:
            return str(exc)
        return None


def registered(module: str, name: str) -> Callable[[], Collection[str]]:
    """The registry `module.name` (a collection, or a function returning one), looked up when a value is
    checked. A check needs the registry's names, not the rubrics' or estimators' code: importing them here
    would put that code into the import closure of every asset that reads a config
    (`assets/code_version.py`), so editing a rubric would mark the rollouts stale."""

    def lookup() -> Collection[str]:
        import importlib

        found = getattr(importlib.import_module(module), name)
        return found() if callable(found) else found

    return lookup


def resolver(module: str, name: str) -> Callable[[str], Any]:
    """The function `module.name`, imported when a value is checked, for `Resolves` (as `registered`, and
    for the same reason)."""

    def resolve(value: str) -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)(value)

    return resolve


def one_of(names: Collection[str]) -> str:
    return "must be one of " + ", ".join(map(json.dumps, sorted(names)))


# --- what a field allows, in words -------------------------------------------------------------------


def allowed_by(hint: Any) -> str:
    """What a field of type `hint` allows, e.g. "must be an integer in 1..1024", from its annotation."""
    base, rules = _unwrapped(hint)
    if _is_union(base):
        (base, rules), *_ = (_unwrapped(arg) for arg in get_args(base) if arg is not type(None))
    if plain := next((rule for rule in rules if isinstance(rule, PlainRule)), None):
        return plain.allowed(None) or "must be valid"  # every rule refuses None
    bounds = {name: getattr(rule, name) for rule in rules for kind, name in _BOUNDS if isinstance(rule, kind)}
    if isinstance(base, type) and is_dataclass(base):
        return "must be a table with keys " + ", ".join(hints(base))
    if get_origin(base) is Literal:
        return one_of(get_args(base))
    if base is bool:
        return "must be true or false"
    if base is int:
        low = bounds["ge"] if "ge" in bounds else bounds.get("gt", -math.inf) + 1
        high = bounds["le"] if "le" in bounds else bounds.get("lt", math.inf) - 1
        return f"must be an integer in {low}..{high}" if high < math.inf else f"must be an integer ≥ {low}"
    if base is float:
        low = f"[{_number(bounds['ge'])}" if "ge" in bounds else f"({_number(bounds.get('gt', -math.inf))}"
        high = f"{_number(bounds['le'])}]" if "le" in bounds else f"{_number(bounds.get('lt', math.inf))})"
        return f"must be a number in {low}, {high}"
    if base is str:
        return "must be a non-empty string" if bounds.get("min_length") else "must be a string"
    if get_origin(base) is tuple:
        return f"must be a list of {bounds.get('min_length', 0)}..{bounds['max_length']} non-empty strings"
    if get_origin(base) is dict:
        return "must be a table of parameters"
    raise TypeError(f"no words for a field of type {hint!r}")


def _unwrapped(hint: Any) -> tuple[Any, list[Any]]:
    """(the type inside `Annotated`, its rules: annotated-types constraints and validators, pydantic's
    `Field(...)` taken apart)."""
    if get_origin(hint) is not Annotated:
        return hint, []
    base, *metadata = get_args(hint)
    rules: list[Any] = []
    for item in metadata:
        rules += item.metadata if isinstance(item, FieldInfo) else [item]
    return base, rules


_BOUNDS = (
    (annotated_types.Ge, "ge"),
    (annotated_types.Gt, "gt"),
    (annotated_types.Le, "le"),
    (annotated_types.Lt, "lt"),
    (annotated_types.MinLen, "min_length"),
    (annotated_types.MaxLen, "max_length"),
)
"""The annotated-types constraints (what `Field(ge=1, le=1024, max_length=16)` stands for), each with the
name of its value."""


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


# --- a table against a dataclass ---------------------------------------------------------------------


_ADAPTERS: dict[type, TypeAdapter] = {}


def _adapter(cls: type[T]) -> TypeAdapter[T]:
    """pydantic's validator of `cls`, built when a config is first checked (not when it is imported)."""
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


_VALIDATING: ContextVar[bool] = ContextVar("validating", default=False)


def validating() -> bool:
    """True while pydantic builds a config from a table it checked (a `__post_init__` need not check it
    again)."""
    return _VALIDATING.get()


@contextmanager
def _building() -> Iterator[None]:
    token = _VALIDATING.set(True)
    try:
        yield
    finally:
        _VALIDATING.reset(token)


def validate(cls: type[T], data: Any) -> tuple[T | None, list[Problem]]:
    """(the dataclass `cls` built from the table `data`; []) or (None, a Problem for each field that breaks
    its rule, in the order of the fields, then each unknown key)."""
    try:
        with _building():
            return _adapter(cls).validate_python(data), []
    except ValidationError as error:
        return None, problems_of(cls, data, error)


def problems_of(cls: type, data: Any, error: ValidationError) -> list[Problem]:
    """One Problem per field pydantic refused (the first of its errors there): the value as `data` holds
    it, and what the field allows in words (`allowed_by`), or the ValueError of a `PlainRule`."""
    problems: dict[str, Problem] = {}
    for detail in error.errors(include_url=False):
        path, value, hint, depth = _field_at(cls, data, detail["loc"])
        if path in problems:
            continue
        if hint is None:
            known = hints(_owner(cls, detail["loc"][:depth]))
            allowed = unknown_key(str(detail["loc"][depth]), sorted(known))
        elif detail["type"] == "value_error" and len(detail["loc"]) == depth + 1:
            allowed = str(detail["ctx"]["error"])
        else:
            allowed = allowed_by(hint)
        problems[path] = Problem(path, value, allowed)
    return list(problems.values())


def _field_at(cls: type, data: Any, loc: tuple[Any, ...]) -> tuple[str, Any, Any, int]:
    """(dotted path, value in `data`, type hint or None if the key is unknown, index of the field in `loc`)
    of the declared field an error location `loc` falls in (an error inside a list or a table of
    parameters is the field's)."""
    owner: Any = cls
    value, names = data, []
    for depth, key in enumerate(loc):
        names.append(key_text(key))
        value = value.get(key) if isinstance(value, Mapping) else None
        hint = hints(owner).get(key) if isinstance(key, str) else None
        if hint is None or not is_dataclass(hint) or depth == len(loc) - 1:
            return ".".join(names), value, hint, depth
        owner = hint
    return "(table)", data, cls, -1  # `data` itself is no table


def _owner(cls: type, loc: tuple[Any, ...]) -> type:
    for key in loc:
        cls = hints(cls)[key]
    return cls


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """{field: its type, `Annotated` rules included} of a config dataclass: the fields a table may set (not
    those with `init=False`)."""
    found = get_type_hints(cls, include_extras=True)
    return {f.name: found[f.name] for f in fields(cls) if f.init}


@functools.cache
def sections(cls: type) -> dict[str, type]:
    """{field name: dataclass} for the fields of `cls` that are themselves config dataclasses."""
    return {name: hint for name, hint in hints(cls).items() if isinstance(hint, type) and is_dataclass(hint)}


def valid_values(cls: type, data: Any, problems: Sequence[Problem]) -> dict[str, Any]:
    """The fields of `data` that passed, as pydantic normalised them (8.0 is 8), nested like `data`, the
    refused ones left out: what the relations between fields may read when some field is wrong."""
    if not isinstance(data, Mapping):
        return {}
    refused = {problem.path for problem in problems}
    kept = _without(data, refused, "")
    built, _ = validate(cls, kept)
    return values(built, kept) if built is not None else {}


def _without(data: Mapping[Any, Any], refused: set[str], prefix: str) -> dict[Any, Any]:
    kept = {}
    for key, value in data.items():
        path = f"{prefix}{key_text(key)}"
        if path in refused:
            continue
        kept[key] = _without(value, refused, f"{path}.") if isinstance(value, Mapping) else value
    return kept


def values(built: Any, shape: Mapping[Any, Any] | None = None) -> dict[str, Any]:
    """The fields of the config dataclass `built` (those `shape` has, if given) as a dict, sections as dicts
    of theirs; unlike `dataclasses.asdict`, nothing is copied and a tuple stays a tuple."""
    found = {}
    for name in (f.name for f in fields(built) if shape is None or f.name in shape):
        value = getattr(built, name)
        found[name] = values(value, None if shape is None else shape[name]) if is_dataclass(value) else value
    return found


# --- words ------------------------------------------------------------------------------------------


def unknown_key(key: str, known: Sequence[str]) -> str:
    guess = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    hint = f" (did you mean {guess[0]}?)" if guess else ""
    return f"unknown key{hint}; known keys: {', '.join(known)}"


def show(value: Any, limit: int = 100) -> str:
    """`value` as it would be written in TOML, on one line of at most `limit` characters."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, float):
        text = repr(value) if math.isfinite(value) else str(value)
    elif isinstance(value, int):
        text = str(value) if value.bit_length() < 1000 else f"an integer of {value.bit_length()} bits"
    elif isinstance(value, Mapping):
        text = (
            "{ " + ", ".join(f"{key_text(k)} = {show(v, limit)}" for k, v in value.items()) + " }"
            if value
            else "{}"
        )
    elif isinstance(value, list | tuple):
        text = "[" + ", ".join(show(v, limit) for v in value) + "]"
    elif value is None:
        text = "null"
    else:
        text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key_text(key: Any) -> str:
    """A key as TOML writes it in a dotted path: bare if it can be, else quoted."""
    return (
        key if isinstance(key, str) and _BARE_KEY.fullmatch(key) else json.dumps(str(key), ensure_ascii=False)
    )
