"""Run a schema and turn pandera's failure cases into one readable error."""

from __future__ import annotations

import pandas as pd
import pandera.errors as pa_errors
import pandera.pandas as pa

from creditline.errors import CreditlineError


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
    """Validate (and coerce) `frame`; raise `TableValidationError` naming table, column and row."""
    try:
        return schema.validate(frame, lazy=True)
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
