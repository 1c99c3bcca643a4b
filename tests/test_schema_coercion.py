"""`schemas.validate` skips pandera's coercion of the columns that already have their dtype: what it returns, and
what it refuses with which failure cases, must be what pandera's own coercing validation gives, whatever the
columns' dtypes and values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.errors as pa_errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import StepsTable, validate
from schemas.validate import _schema, _typed_columns
from tests.test_schemas import steps_frame

RETYPED = {
    "round": lambda s: s.astype("float64"),
    "task_id": lambda s: s.astype("int32"),
    "sample_idx": lambda s: s.astype("Int64"),
    "step_idx": lambda s: s.astype("uint8"),
    "episode_id": lambda s: s.astype("category"),
    "action": lambda s: s.astype("string"),
    "step_reward": lambda s: s.astype("float32"),
    "valid_action": lambda s: s.astype(object),
    "done": lambda s: s.astype("int64"),
}
"""Columns of a good steps table given another dtype that pandera's coercion brings back."""

BROKEN = {
    "none": lambda f: f,
    "a text column of numbers": lambda f: f.assign(observation=[1, 2, 3]),
    "a NaN reward": lambda f: f.assign(step_reward=[0.0, np.nan, 0.0]),
    "an integer column of words": lambda f: f.assign(task_id=["a", "b", "c"]),
    "a negative step": lambda f: f.assign(step_idx=[0, -1, 0]),
    "a float round": lambda f: f.assign(round=[1.5, 1.0, 1.0]),
    "a column twice": lambda f: pd.concat([f, f[["task_id"]]], axis=1),
}
"""What else is wrong with the table (pandera must refuse each, or coerce it)."""


def _outcome(validated):
    """(the frame, None) or (None, the failure cases as sorted tuples)."""
    try:
        return validated(), None
    except pa_errors.SchemaErrors as errors:
        cases = errors.failure_cases[["column", "check", "index", "failure_case"]].astype(str)
        return None, sorted(map(tuple, cases.to_numpy().tolist()))


@settings(max_examples=60, deadline=None)
@given(st.sets(st.sampled_from(sorted(RETYPED))), st.sampled_from(sorted(BROKEN)))
def test_skipping_the_coercion_of_typed_columns_changes_nothing(retyped, broken):
    frame = steps_frame()
    for column in retyped:
        frame[column] = RETYPED[column](frame[column])
    frame = BROKEN[broken](frame)
    typed = _typed_columns(StepsTable.to_schema(), frame)
    ours, ours_cases = _outcome(lambda: _schema(StepsTable, typed).validate(frame.copy(), lazy=True))
    theirs, their_cases = _outcome(lambda: StepsTable.validate(frame.copy(), lazy=True))
    assert ours_cases == their_cases
    if theirs is not None:
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)


def test_a_typed_table_skips_every_coercion_and_the_models_schema_is_left_as_it_was():
    frame = steps_frame()
    typed = _typed_columns(StepsTable.to_schema(), frame)
    assert typed == set(frame.columns)
    assert not any(
        column.coerce for name, column in _schema(StepsTable, typed).columns.items() if name in typed
    )
    assert StepsTable.to_schema().coerce  # the model's own schema still coerces
    pd.testing.assert_frame_equal(validate(StepsTable, frame, "steps"), steps_frame(), check_exact=True)


def test_a_column_of_another_dtype_is_still_coerced_and_a_bad_one_still_refused():
    frame = steps_frame()
    for column, retype in RETYPED.items():
        frame[column] = retype(frame[column])
    assert not _typed_columns(StepsTable.to_schema(), frame) & set(RETYPED)
    coerced = validate(StepsTable, frame, "steps")
    pd.testing.assert_frame_equal(coerced, StepsTable.validate(frame.copy(), lazy=True), check_exact=True)
    assert coerced["task_id"].dtype == np.int64 and coerced["episode_id"].dtype == object
    with pytest.raises(ValueError, match="task_id"):
        validate(StepsTable, steps_frame().assign(task_id=["a", "b", "c"]), "steps")
