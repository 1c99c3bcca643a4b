"""Estimator registry: ``@register(name)`` on pure functions, ``compute`` dispatches by name.

An estimator is ``fn(table: StepTable, conv: Conventions, *, <params with defaults>) -> (S,)``
over the sorted :class:`~.table.StepTable`; ``compute`` validates the input, resolves the
parameters and the conventions, calls it and scatters the result back to the input row order.
Every estimator also accepts ``conventions`` ("creditline" | "verl" | a Conventions instance).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .conventions import CREDITLINE, PRESETS, Conventions
from .table import REQUIRED_COLUMNS, StepTable, build_step_table

EstimatorFn = Callable[..., np.ndarray]
ReferenceConventions = Conventions | Callable[[Mapping[str, Any]], Conventions]


@dataclass(frozen=True)
class Estimator:
    name: str
    fn: EstimatorFn
    defaults: Mapping[str, Any]  # keyword-only parameters of fn and their defaults
    verl: ReferenceConventions  # the conventions of the public reference code


_REGISTRY: dict[str, Estimator] = {}


def register(name: str, *, verl: ReferenceConventions) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register ``fn(table, conv, *, **params)``; ``verl`` = its reference conventions (or a
    function of the resolved params returning them)."""

    def decorate(fn: EstimatorFn) -> EstimatorFn:
        if name in _REGISTRY:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        defaults = {}
        for p in list(inspect.signature(fn).parameters.values())[2:]:
            if p.kind is not inspect.Parameter.KEYWORD_ONLY or p.default is inspect.Parameter.empty:
                raise TypeError(f"{fn.__name__}: parameter {p.name!r} must be keyword-only with a default")
            defaults[p.name] = p.default
        _REGISTRY[name] = Estimator(name, fn, defaults, verl)
        return fn

    return decorate


def available() -> dict[str, dict[str, Any]]:
    """{estimator name: {parameter: default}} for every registered estimator (incl. conventions)."""
    return {name: {**est.defaults, "conventions": "creditline"} for name, est in sorted(_REGISTRY.items())}


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
    full = {**est.defaults, **{k: v for k, v in params.items() if k != "conventions"}}
    conv = params.get("conventions", "creditline")
    if isinstance(conv, Conventions):
        return est, full, conv
    if conv == "creditline":
        return est, full, CREDITLINE
    if conv == "verl":
        return est, full, est.verl(full) if callable(est.verl) else est.verl
    raise ValueError(f"unknown conventions {conv!r}; valid: {list(PRESETS)} or a Conventions instance")


def compute(estimator: str, steps: Any, **params: Any) -> np.ndarray:
    """Advantages (S,) float64 aligned with the rows of ``steps`` (DataFrame or pyarrow Table)."""
    est, full, conv = resolve(estimator, params)
    table = build_step_table(steps, REQUIRED_COLUMNS)
    return scatter(table, est.fn(table, conv, **full))


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
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
