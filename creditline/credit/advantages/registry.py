"""Estimator registry: ``@register(name, references=...)`` on pure functions, ``compute`` dispatches.

An estimator is ``fn(table: StepTable, conv: Conventions, *, <params with defaults>) -> (S,)``
over the sorted :class:`~.table.StepTable`; ``compute`` validates the input, resolves the
parameters and the conventions, calls it and scatters the result back to the input row order.

Every estimator also accepts ``conventions``: ``"creditline"`` (the project default), the name
of one of *its* reference presets, or a :class:`Conventions` instance. A preset is named after
the code it reproduces (``conventions.PRESETS``: ``"verl"``, ``"verl-agent"``, ``"igpo-fork"``,
``"matchtir"``) and each estimator registers only those it has a reference for, so
``conventions="verl"`` for GiGPO (which exists only in verl-agent) fails instead of silently
meaning something else. ``presets(name)`` and ``available()`` list them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from creditline.config.param_kinds import kind_mismatch
from creditline.ids import canonical_hash

from .conventions import CREDITLINE, PRESETS, Conventions
from .table import REQUIRED_COLUMNS, StepTable, build_step_table, with_extra_columns

EstimatorFn = Callable[..., np.ndarray]
ReferenceConventions = Conventions | Callable[[Mapping[str, Any]], Conventions]
"""A preset's conventions, or a function of the resolved params returning them (it may raise
ValueError when the preset does not reproduce those params, e.g. turn_group's variant)."""


@dataclass(frozen=True)
class Estimator:
    name: str
    fn: EstimatorFn
    defaults: Mapping[str, Any]  # keyword-only parameters of fn and their defaults
    references: Mapping[str, ReferenceConventions]  # preset name -> the reference code's conventions
    columns: tuple[str, ...] = ()  # input columns it reads besides REQUIRED_COLUMNS (StepTable.extra)
    anchors: bool = False  # reads the anchor codes (StepTable.anchor): anchor_key is factorised for it only


_REGISTRY: dict[str, Estimator] = {}


def register(
    name: str,
    *,
    references: Mapping[str, ReferenceConventions] | None = None,
    columns: tuple[str, ...] = (),
    anchors: bool = False,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register ``fn(table, conv, *, **params)``. ``references``: preset name (a key of
    ``conventions.PRESETS`` other than "creditline") -> the conventions of the code it
    reproduces, or a function of the resolved params returning them. None: creditline only.
    ``columns``: input columns the estimator reads besides the required ones, handed to it in
    ``table.extra`` when the input has them (the estimator says what it needs when one is missing).
    ``anchors``: it reads ``table.anchor`` (the anchor states' codes); for the others the column is only
    required to be there, and its S strings are not hashed."""
    refs = dict(references or {})
    bad = sorted(set(refs) - (set(PRESETS) - {"creditline"}))
    if bad:
        raise ValueError(
            f"{name!r}: unknown reference preset(s) {bad}; presets are named after the code they "
            f"reproduce: {[p for p in PRESETS if p != 'creditline']} (add new ones to conventions.PRESETS)"
        )
    for preset, conv in refs.items():
        if not (isinstance(conv, Conventions) or callable(conv)):
            raise TypeError(
                f"{name!r}: references[{preset!r}] must be Conventions or a callable, got {conv!r}"
            )

    def decorate(fn: EstimatorFn) -> EstimatorFn:
        if name in _REGISTRY:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        defaults = {}
        for p in list(inspect.signature(fn).parameters.values())[2:]:
            if p.kind is not inspect.Parameter.KEYWORD_ONLY or p.default is inspect.Parameter.empty:
                raise TypeError(f"{fn.__name__}: parameter {p.name!r} must be keyword-only with a default")
            defaults[p.name] = p.default
        _REGISTRY[name] = Estimator(name, fn, defaults, MappingProxyType(refs), tuple(columns), anchors)
        return fn

    return decorate


def presets(estimator: str) -> tuple[str, ...]:
    """The preset names ``conventions=`` accepts for this estimator: "creditline" first."""
    return ("creditline", *_lookup(estimator).references)


def available() -> dict[str, dict[str, Any]]:
    """{estimator: {"params": {parameter: default, incl. "conventions"}, "presets": [names]}}."""
    return {
        name: {"params": {**est.defaults, "conventions": "creditline"}, "presets": list(presets(name))}
        for name, est in sorted(_REGISTRY.items())
    }


def _lookup(estimator: str) -> Estimator:
    if estimator not in _REGISTRY:
        raise ValueError(f"unknown advantage estimator {estimator!r}; valid: {sorted(_REGISTRY)}")
    return _REGISTRY[estimator]


def resolve(estimator: str, params: Mapping[str, Any]) -> tuple[Estimator, dict[str, Any], Conventions]:
    """(estimator, params with defaults filled, Conventions); unknown names raise ValueError."""
    est = _lookup(estimator)
    unknown = sorted(set(params) - set(est.defaults) - {"conventions"})
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for estimator {estimator!r}; "
            f"valid: {sorted(est.defaults) + ['conventions']}"
        )
    for name, value in params.items():
        if name != "conventions" and (kind := kind_mismatch(value, est.defaults[name])) is not None:
            raise ValueError(
                f"parameter {name!r} of estimator {estimator!r} must be {kind}, "
                f"like its default {est.defaults[name]!r}; got {value!r}"
            )
    full = {**est.defaults, **{k: v for k, v in params.items() if k != "conventions"}}
    conv = params.get("conventions", "creditline")
    if isinstance(conv, Conventions):
        return est, full, conv
    return est, full, _preset(est, conv, full)


def _preset(est: Estimator, preset: Any, full: Mapping[str, Any]) -> Conventions:
    """The Conventions of a preset name for this estimator; ValueError names the valid ones."""
    valid = ", ".join(presets(est.name)) + " (or a Conventions instance)"
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"unknown conventions {preset!r} for estimator {est.name!r}; valid: {valid}")
    if preset == "creditline":
        return CREDITLINE
    if preset not in est.references:
        only = f" (it exists only in {next(iter(est.references))})" if len(est.references) == 1 else ""
        raise ValueError(f"estimator {est.name!r} has no {preset!r} reference{only}; valid: {valid}")
    ref = est.references[preset]
    return ref if isinstance(ref, Conventions) else ref(full)


def compute(estimator: str, steps: Any, **params: Any) -> np.ndarray:
    """Advantages (S,) float64 aligned with the rows of ``steps`` (DataFrame or pyarrow Table)."""
    est, full, conv = resolve(estimator, params)
    table = build_step_table(steps, REQUIRED_COLUMNS, code_anchors=est.anchors)
    if est.columns:
        table = with_extra_columns(table, steps, est.columns)
    return scatter(table, est.fn(table, conv, **full))


def input_columns(estimator: str) -> tuple[str, ...]:
    """The columns ``estimator`` reads besides ``REQUIRED_COLUMNS`` (the round passes them through)."""
    return _lookup(estimator).columns


def scatter(table: StepTable, sorted_values: np.ndarray) -> np.ndarray:
    """Values in sorted-table order (S,) -> input row order (S,)."""
    out = np.empty(table.n_rows, dtype=np.float64)
    out[table.order] = sorted_values
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def params_hash(estimator: str, params: Mapping[str, Any] | None = None) -> str:
    """16-hex sha256 of the estimator name and its fully-resolved params (defaults filled,
    conventions expanded to their fields), JSON with sorted keys."""
    _, full, conv = resolve(estimator, dict(params or {}))
    payload = {"estimator": estimator, "params": _jsonable(full), "conventions": _jsonable(conv.as_dict())}
    return canonical_hash(payload, ensure_ascii=True, allow_nan=False)
