"""`schemas.text.Text` against pandera's own `str`: the same column passes or fails, coerced to the same values,
with the same failure cases, whatever the column holds (hypothesis). The fast path only skips work."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pandera.errors as pa_errors
import pandera.pandas as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandera.typing import Series

from schemas.text import Text


class AsPandera(pa.DataFrameModel):
    name: Series[str] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True


class AsText(pa.DataFrameModel):
    name: Series[Text] = pa.Field(nullable=True)

    class Config:
        strict = True
        coerce = True


class AsPanderaStrict(AsPandera):
    class Config:
        coerce = False


class AsTextStrict(AsText):
    class Config:
        coerce = False


VALUES = st.one_of(
    st.text(max_size=6),
    st.none(),
    st.just(math.nan),
    st.integers(-5, 5),
    st.floats(allow_nan=False, width=32),
    st.binary(max_size=3),
    st.booleans(),
    st.just(np.str_("np")),
)


def _outcome(model: type[pa.DataFrameModel], frame: pd.DataFrame):
    """(validated column as a list, None) or (None, the failure cases as records)."""
    try:
        return model.validate(frame.copy(), lazy=True)["name"].tolist(), None
    except pa_errors.SchemaErrors as exc:
        cases = exc.failure_cases[["check", "index", "failure_case"]].map(repr)  # bytes: not str()-able
        return None, cases.to_dict("records")


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(x == y or (pd.isna(x) and pd.isna(y)) for x, y in zip(a, b, strict=True))


@settings(max_examples=200, deadline=None)
@given(st.lists(VALUES, max_size=12))
def test_text_validates_every_column_as_pandera_str_does(values):
    frame = pd.DataFrame({"name": pd.Series(values, dtype=object)})
    for pandera_model, text_model in ((AsPandera, AsText), (AsPanderaStrict, AsTextStrict)):
        (kept, refused), (kept_text, refused_text) = (
            _outcome(pandera_model, frame),
            _outcome(text_model, frame),
        )
        assert _same(kept, kept_text) and refused == refused_text, (values, pandera_model.__name__)


def test_a_column_of_strings_passes_unchanged_and_a_number_among_them_is_still_caught():
    strings = pd.DataFrame({"name": ["a", None, "c"]})
    assert AsTextStrict.validate(strings)["name"].tolist() == ["a", None, "c"]
    mixed = pd.DataFrame({"name": ["a", 5, "c"]})
    with pytest.raises(pa_errors.SchemaErrors) as refused:
        AsTextStrict.validate(mixed, lazy=True)
    assert refused.value.failure_cases["failure_case"].tolist() == [5]
    assert AsText.validate(mixed)["name"].tolist() == ["a", "5", "c"]  # coerced, as pandera's str coerces
