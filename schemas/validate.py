"""Run a schema and turn pandera's failure cases into one readable error."""

from __future__ import annotations

import copy
import functools

import pandas as pd
import pandera.errors as pa_errors
import pandera.pandas as pa
from pandera.engines import pandas_engine

from creditline.errors import CreditlineError
from schemas.text import Text, all_strings


class TableValidationError(CreditlineError, ValueError):
    """A table broke its schema; the message names the table, the columns, rows and values."""


def _plain(value):
    """numpy scalars print as `np.int64(2)`; people want `2`."""
    return value.item() if hasattr(value, "item") else value


def _row_label(frame: pd.DataFrame, row) -> str:
    """`row 17 (episode_id='...', step_idx=3)`: the position and the ids that find the row again."""
    if row is None or pd.isna(row):
        return "all rows"
    row = int(row)
    ids = [
        f"{c}={_plain(frame.at[row, c])!r}"
        for c in ("episode_id", "step_idx")
        if c in frame.columns and row in frame.index
    ]
    return f"row {row}" + (f" ({', '.join(ids)})" if ids else "")


def validate(
    schema: type[pa.DataFrameModel], frame: pd.DataFrame, table: str, max_cases: int = 5
) -> pd.DataFrame:
    """Validate (and coerce) `frame`; raise `TableValidationError` naming table, column and row.

    The columns that already have their schema's dtype are not coerced (`_typed_columns`): pandera's coercion
    of such a column returns equal values of the same dtype, at the cost of a deep copy of the column's schema
    and an `astype` (a fifth of the default round's validation time). Which columns those are is decided per
    frame; every other column, and every check, is pandera's own (`tests/test_schema_coercion.py` compares
    the two on steps tables whose columns have other dtypes, or broken values, or a repeated name)."""
    try:
        return _schema(schema, _typed_columns(schema.to_schema(), frame)).validate(frame, lazy=True)
    except pa_errors.SchemaErrors as exc:
        cases = exc.failure_cases
        lines = []
        for check, failures in cases.groupby("check", sort=False, dropna=False):
            table_level = (failures["schema_context"] == "DataFrameSchema").all()
            column = "(whole table)" if table_level else ", ".join(sorted(set(map(str, failures["column"]))))
            rows = failures.drop_duplicates("index")
            shown = "; ".join(
                _row_label(frame, case.index)
                + ("" if table_level and pd.notna(case.index) else f" value {case.failure_case!r}")
                for case in rows.head(max_cases).itertuples(index=False)
            )
            more = f"; and {len(rows) - max_cases} more" if len(rows) > max_cases else ""
            lines.append(f"  column {column}: {check}: {shown}{more}")
        raise TableValidationError(f"table {table!r} failed its schema:\n" + "\n".join(lines)) from None


def _typed_columns(schema: pa.DataFrameSchema, frame: pd.DataFrame) -> frozenset[str]:
    """The schema's columns that `frame` holds with exactly their declared dtype (a `Text` column: all
    strings, which its coercion would pass unchanged); none where a column name repeats (pandera's way)."""
    if not frame.columns.is_unique:
        return frozenset()
    return frozenset(
        name
        for name, column in schema.columns.items()
        if name in frame.columns
        and (
            all_strings(frame[name])
            if isinstance(column.dtype, Text)
            else pandas_engine.Engine.dtype(frame[name].dtype) == column.dtype
        )
    )


@functools.lru_cache(maxsize=128)
def _schema(model: type[pa.DataFrameModel], typed: frozenset[str]) -> pa.DataFrameSchema:
    """`model`'s schema, its columns in `typed` not coerced (the others as the model says)."""
    schema = model.to_schema()
    if not typed or not schema.coerce:
        return schema
    schema = copy.deepcopy(schema)  # `to_schema` hands out one object per model: never change it
    schema.coerce = False
    for name, column in schema.columns.items():
        column.coerce = name not in typed
    return schema
