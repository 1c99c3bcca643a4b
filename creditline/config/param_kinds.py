"""Parameter values of their default's kind: one rule for configs, the command line and the Python API.

Environments and advantage estimators declare their parameters by their defaults (`gamma: float = 0.95`).
A value stands where a default does when it is of the same kind: true/false for a bool, a whole number
(not a bool, not a float) for an int, a finite number for a float, a string for a string. A default of
None accepts anything. `config_checks` reports a mismatch as a config problem; the estimator registry
refuses it in `resolve`, so `creditline advantages --param` and `compute(...)` obey the same rule.
"""

from __future__ import annotations

import math
import sys
from numbers import Integral, Real
from typing import Any, TypeGuard


def is_bool(value: Any) -> bool:
    """A Python or numpy bool. numpy is not imported for it: a numpy bool exists only once numpy is (and
    every config check runs this, `creditline --help` included)."""
    numpy = sys.modules.get("numpy")
    return isinstance(value, bool) or (numpy is not None and isinstance(value, numpy.bool_))


def whole_number(value: Any) -> int | None:
    """`value` as an int if it is a whole number (not a bool), else None."""
    if is_bool(value):
        return None
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def is_number(value: Any) -> TypeGuard[float]:
    """A real number (an int, a float, numpy's), not a bool (a float to the type checker, which takes an int
    for one)."""
    return isinstance(value, Real) and not is_bool(value)


def kind_mismatch(value: Any, default: Any) -> str | None:
    """What a value must be to stand where `default` does ("an integer", ...), or None if `value` may."""
    if isinstance(default, bool):
        ok, kind = is_bool(value), "true or false"
    elif isinstance(default, int):
        ok, kind = isinstance(value, Integral) and whole_number(value) is not None, "an integer"
    elif isinstance(default, float):
        ok, kind = is_number(value) and math.isfinite(value), "a finite number"
    elif isinstance(default, str):
        ok, kind = isinstance(value, str), "a string"
    else:
        return None
    return None if ok else kind
