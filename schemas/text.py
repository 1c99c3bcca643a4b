"""`Text`: the schemas' string column, pandera's own `str` type with a vectorised pass in front.

pandera's `str` (`pandas_engine.NpString`) coerces a column by converting every value to `str` again and
checks it by calling a Python function per value (`isinstance(x, str)`). A column that is already all strings
(what every stage writes) is recognised by pandas' C-level `infer_dtype` and passes unchanged: a round's six
tables of the default experiment validate in 58 ms instead of 89 (docs/benchmarks.md). Any other column takes
pandera's own coercion and check, so what is refused, and the failure cases shown, are pandera's
(`tests/test_schema_text.py` compares the two on hypothesis' columns).
"""

from __future__ import annotations

import pandas as pd
from pandera import dtypes
from pandera.engines import pandas_engine


def all_strings(values: object) -> bool:
    """True when `values` is an object Series whose non-null values are all `str` (or that has none)."""
    return (
        isinstance(values, pd.Series)
        and values.dtype == object
        and pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty")
    )


@pandas_engine.Engine.register_dtype
@dtypes.immutable
class Text(pandas_engine.NpString):
    """A column of Python strings (nulls where the field is nullable), as pandera's `str`."""

    def coerce(self, data_container):
        if all_strings(data_container):
            return data_container  # str(x) of a str is x: pandera's coercion would return equal values
        return super().coerce(data_container)

    def check(self, pandera_dtype, data_container=None):
        if data_container is not None and all_strings(data_container):
            return True  # pandera's per-value check passes every value of such a column
        return super().check(pandera_dtype, data_container)
