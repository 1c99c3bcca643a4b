"""The step table: validated, integer-coded and sorted once, so every estimator is vectorised.

Input: a pandas DataFrame or a pyarrow Table with one row per agent step and columns
``group_id, episode_id, step_idx, anchor_key, step_reward, episode_reward`` (extra columns
are ignored; an optional ``completion_length`` column gives the token count of each step's
completion, used by token-weighted whitening). Rows may come in any order.

String ids are factorised to dense int codes (pandas / Arrow hash tables, O(S)). Episode
codes follow the sorted episode ids, so after ``lexsort((step_idx, episode))`` the row order
is canonical: it depends on the ids, never on the input order. Estimators see rows sorted by
(episode_id, step_idx), so row i−1 is the previous step of row i whenever step_idx[i] > 0;
``compute`` scatters their output back to the input order.

Shapes: S step rows, E episodes, G groups, U unique anchors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from creditline.errors import CreditlineError

ID_COLUMNS = ("group_id", "episode_id", "anchor_key")
REQUIRED_COLUMNS = ("group_id", "episode_id", "step_idx", "anchor_key", "step_reward", "episode_reward")
LENGTH_COLUMN = "completion_length"
IdsFn = Callable[[int], dict[str, Any]]


class AdvantageInputError(CreditlineError, ValueError):
    """The step table breaks the input contract (the message names the column and a row)."""


@dataclass(frozen=True)
class StepTable:
    """Rows sorted by (episode_id, step_idx). Codes are dense ints; ``*_values`` decode them."""

    order: np.ndarray  # (S,) int64: sorted row r is input row order[r]
    group: np.ndarray  # (S,) int64 in [0, G)
    episode: np.ndarray  # (S,) int64 in [0, E), non-decreasing
    step_idx: np.ndarray  # (S,) int64, 0..len-1 within each episode
    anchor: np.ndarray | None  # (S,) int64 in [0, U)
    step_reward: np.ndarray  # (S,) float64
    episode_reward: np.ndarray | None  # (S,) float64, constant per episode
    completion_length: np.ndarray | None  # (S,) int64 or None (one token per row)
    ep_start: np.ndarray  # (E,) first sorted row of each episode
    ep_len: np.ndarray  # (E,) number of steps
    n_groups: int
    anchor_values: np.ndarray | None  # (U,) anchor key of each anchor code
    episode_values: np.ndarray  # (E,) episode_id of each episode code (sorted)
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Columns an estimator reads besides the required ones (``register(..., columns=)``), (S,) each in
    sorted row order; a column the input lacks is absent."""

    @property
    def n_rows(self) -> int:
        return int(self.order.shape[0])

    @property
    def ep_group(self) -> np.ndarray:  # (E,)
        return self.group[self.ep_start]

    @property
    def ep_reward(self) -> np.ndarray:  # (E,)
        assert self.episode_reward is not None
        return self.episode_reward[self.ep_start]


def _fail(problem: str, column: str, row: int | None, ids: dict[str, Any] | None = None) -> None:
    """Raise AdvantageInputError naming the column, the problem and an example input row."""
    where = ""
    if row is not None:
        details = "".join(f", {k}={v!r}" for k, v in (ids or {}).items())
        where = f" (example: input row {row}{details})"
    raise AdvantageInputError(f"column {column!r}: {problem}{where}")


def _column(steps: Any, name: str) -> Any:
    return steps.column(name) if isinstance(steps, pa.Table) else steps[name]


def _factorize(col: Any, name: str, sort: bool) -> tuple[np.ndarray, np.ndarray]:
    """(codes (S,) int64, uniques (K,)); codes follow first appearance (a categorical's or an Arrow
    dictionary's own order: its codes are used as they are), or sorted uniques."""
    if isinstance(col, pa.ChunkedArray) and pa.types.is_dictionary(col.type):
        coded = _dictionary_codes(col)
        if coded is not None:
            return _checked_codes(*coded, name, sort, dense=False)
        col = col.cast(col.type.value_type)  # a dictionary with nulls or repeated values: its values hashed
    if isinstance(col, pa.ChunkedArray):
        if col.null_count:
            _fail("null id", name, int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0]))
        enc = pc.dictionary_encode(col)
        chunks = [c.indices.to_numpy(zero_copy_only=False) for c in enc.chunks]
        codes = np.concatenate(chunks).astype(np.int64) if chunks else np.zeros(0, np.int64)
        dictionary = enc.chunks[0].dictionary if enc.num_chunks else pa.array([], col.type)
        uniques = np.asarray(dictionary.to_numpy(zero_copy_only=False), dtype=object)
        if sort and len(uniques):
            rank = pc.rank(dictionary, sort_keys="ascending", tiebreaker="first").to_numpy() - 1
            codes, uniques = rank[codes].astype(np.int64), uniques[np.argsort(rank)]
        return codes, uniques
    if isinstance(getattr(col, "dtype", None), pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy().astype(np.int64)
        uniques = np.asarray(col.cat.categories, dtype=object)
        return _checked_codes(codes, uniques, name, sort, dense=False)
    codes, uniques = pd.factorize(col, sort=False)
    codes, uniques = np.asarray(codes, dtype=np.int64), np.asarray(uniques, dtype=object)
    return _checked_codes(codes, uniques, name, sort, dense=True)


def _dictionary_codes(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray] | None:
    """(indices (S,) int64, −1 where null; dictionary (K,)) of a dictionary-encoded Arrow column, its values
    not hashed again; None when its dictionary holds a null or one value twice (its values must be hashed)."""
    col = col.unify_dictionaries()
    if col.num_chunks == 0:
        return np.zeros(0, np.int64), np.zeros(0, dtype=object)
    dictionary = col.chunk(0).dictionary
    if dictionary.null_count or pc.count_distinct(dictionary).as_py() != len(dictionary):
        return None
    indices = [chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False) for chunk in col.chunks]
    codes = np.concatenate(indices).astype(np.int64)
    return codes, np.asarray(dictionary.to_numpy(zero_copy_only=False), dtype=object)


def _checked_codes(
    codes: np.ndarray, uniques: np.ndarray, name: str, sort: bool, *, dense: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Codes (S,), −1 where null, of `uniques` (K,): a null refused naming its row; unless `dense` (a hash
    factorisation's codes are), the values no row uses are left out so that the codes are dense (a
    categorical's categories, a dictionary's values); sorted if `sort`."""
    if (codes < 0).any():
        _fail("null id", name, int(np.flatnonzero(codes < 0)[0]))
    used = None if dense else np.bincount(codes, minlength=len(uniques)) > 0  # (K,)
    if used is not None and not used.all():
        codes, uniques = (np.cumsum(used) - 1)[codes], uniques[used]
    if sort and len(uniques):
        perm = _sorting_permutation(uniques)
        rank = np.empty_like(perm)
        rank[perm] = np.arange(len(perm))
        codes, uniques = rank[codes], uniques[perm]
    return codes, uniques


def _sorting_permutation(uniques: np.ndarray) -> np.ndarray:
    """The permutation sorting distinct ids: Arrow's sort for text (byte order of UTF-8, which is code point
    order, as Python compares str; ~3x numpy's object sort), numpy's otherwise; mixed types by their text."""
    if isinstance(uniques[0], str):  # the call passes at least one
        try:
            return pc.sort_indices(pa.array(uniques, type=pa.string())).to_numpy().astype(np.int64)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
    try:
        return np.argsort(uniques, kind="stable")
    except TypeError:  # mixed id types: order by their text
        return np.argsort(uniques.astype(str), kind="stable")


def _numeric(col: Any) -> np.ndarray:
    """Column as a numpy array; Arrow nulls become NaN (then rejected by the finite check)."""
    if isinstance(col, pa.ChunkedArray):
        return col.to_numpy()
    return pd.Series(col).to_numpy()


def _first_non_number(values: np.ndarray) -> int | None:
    """Row of the first value that is not a number: text that is no number first, else numbers as text."""
    as_text = None
    for row, value in enumerate(values):  # only on the error path: an object or string column
        if isinstance(value, str | bytes):
            try:
                float(value)
            except ValueError:
                return row
            as_text = row if as_text is None else as_text
        elif isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
            return row
    return as_text


def _require_numbers(values: np.ndarray, name: str, what: str, ids: IdsFn | None) -> None:
    """Refuse a column of text or objects, naming the first bad row (numbers stored as text included)."""
    if values.dtype.kind in "iuf":
        return
    row = _first_non_number(values) if values.dtype.kind in "OUS" else 0
    if row is None:  # an object column holding only numbers: fine
        return
    _fail(
        f"must be {what}, got {_show(values[row])} (column dtype {values.dtype})",
        name,
        row,
        ids(row) if ids else None,
    )


def _as_int(values: np.ndarray, name: str, ids: IdsFn | None = None) -> np.ndarray:
    if np.issubdtype(values.dtype, np.integer):
        return values.astype(np.int64, copy=False)
    _require_numbers(values, name, "integers", ids)
    as_float = values.astype(np.float64)
    bad = ~np.isfinite(as_float) | (as_float != np.round(as_float))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        _fail(f"must be integers, got {_show(values[row])}", name, row, ids(row) if ids else None)
    return as_float.astype(np.int64)


def _as_finite(values: np.ndarray, name: str, ids: IdsFn) -> np.ndarray:
    _require_numbers(values, name, "numbers", ids)
    out = values.astype(np.float64, copy=False)
    bad = ~np.isfinite(out)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        _fail(f"non-finite value {_show(out[row])} (NaN/inf are not allowed)", name, row, ids(row))
    return out


def _show(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _read_columns(steps: Any, required: tuple[str, ...], code_anchors: bool = True) -> dict[str, Any]:
    """Validated columns in input order: codes/uniques for ids (anchor keys only if `code_anchors`), int64 /
    float64 arrays."""
    if not isinstance(steps, (pd.DataFrame, pa.Table)):
        raise AdvantageInputError(
            f"steps must be a pandas DataFrame or a pyarrow Table, got {type(steps).__name__}"
        )
    present = set(steps.column_names if isinstance(steps, pa.Table) else steps.columns)
    missing = [c for c in required if c not in present]
    if missing:
        raise AdvantageInputError(
            f"missing column(s) {missing}; "
            f"required columns are {list(required)}, got {sorted(map(str, present))}"
        )
    cols: dict[str, Any] = {"group_id": None, "anchor_key": None, "episode_reward": None, LENGTH_COLUMN: None}
    ep_codes, ep_values = cols["episode_id"] = _factorize(
        _column(steps, "episode_id"), "episode_id", sort=True
    )
    step_idx = cols["step_idx"] = _as_int(
        _numeric(_column(steps, "step_idx")), "step_idx", lambda r: {"episode_id": ep_values[ep_codes[r]]}
    )

    def ids(r: int) -> dict[str, Any]:
        return {"episode_id": ep_values[ep_codes[r]], "step_idx": int(step_idx[r])}

    if "group_id" in required:
        cols["group_id"] = _column(steps, "group_id")  # coded once sorted (`_group_codes`)
    if "anchor_key" in required and code_anchors:
        cols["anchor_key"] = _factorize(_column(steps, "anchor_key"), "anchor_key", sort=False)
    for name in ("step_reward", "episode_reward"):
        if name in required:
            cols[name] = _as_finite(_numeric(_column(steps, name)), name, ids)
    if LENGTH_COLUMN in present:
        length = cols[LENGTH_COLUMN] = _as_int(_numeric(_column(steps, LENGTH_COLUMN)), LENGTH_COLUMN, ids)
        if (length < 0).any():
            row = int(np.flatnonzero(length < 0)[0])
            _fail(f"negative token count {length[row]}", LENGTH_COLUMN, row, ids(row))
    return cols


def build_step_table(
    steps: Any, required: tuple[str, ...] = REQUIRED_COLUMNS, *, code_anchors: bool = True
) -> StepTable:
    """Validate ``steps`` (DataFrame or pyarrow Table) and sort it into a :class:`StepTable`;
    ``code_anchors=False`` leaves ``anchor`` None (for estimators that do not read it)."""
    cols = _read_columns(steps, required, code_anchors)
    (ep_codes, ep_values), step_idx = cols["episode_id"], cols["step_idx"]
    order = _sort_order(ep_codes, step_idx)
    ep, sidx = ep_codes[order], step_idx[order]

    def ids(r: int) -> dict[str, Any]:
        return {"episode_id": ep_values[ep[r]], "step_idx": int(sidx[r])}

    ep_start, ep_len = _check_steps(ep, sidx, order, ids)
    group_codes, group_values = np.zeros_like(ep), np.array(["<none>"], dtype=object)
    if cols["group_id"] is not None:
        group_codes, group_values = _group_codes(cols["group_id"], order, ep, ep_start, ids)
        _check_constant(
            group_codes,
            ep,
            ep_start,
            order,
            "group_id",
            "episode spread over two group_ids",
            lambda r: {
                **ids(r),
                "group_id": group_values[group_codes[r]],
                "first_step_group_id": group_values[group_codes[ep_start[ep[r]]]],
            },
        )
    er = None
    if cols["episode_reward"] is not None:
        er = cols["episode_reward"][order]
        _check_constant(
            er,
            ep,
            ep_start,
            order,
            "episode_reward",
            "episode_reward not constant within an episode",
            lambda r: {
                **ids(r),
                "episode_reward": float(er[r]),
                "first_step_value": float(er[ep_start[ep[r]]]),
            },
        )
    anchor = cols["anchor_key"]
    length = cols[LENGTH_COLUMN]
    return StepTable(
        order=order,
        group=group_codes,
        episode=ep,
        step_idx=sidx,
        anchor=None if anchor is None else anchor[0][order],
        step_reward=cols["step_reward"][order],
        episode_reward=er,
        completion_length=None if length is None else length[order],
        ep_start=ep_start,
        ep_len=ep_len,
        n_groups=len(group_values),
        anchor_values=None if anchor is None else anchor[1],
        episode_values=ep_values,
    )


def with_extra_columns(table: StepTable, steps: Any, names: tuple[str, ...]) -> StepTable:
    """``table`` with the columns ``names`` of ``steps`` that exist, in sorted row order (``extra``)."""
    present = steps.column_names if isinstance(steps, pa.Table) else list(steps.columns)
    extra = {name: _numeric(_column(steps, name))[table.order] for name in names if name in present}
    return replace(table, extra=extra)


def extra_column(table: StepTable, name: str, estimator: str, needs: str) -> np.ndarray:
    """The extra column ``name`` (S,) float64 in sorted row order, refused by name when the input lacks it
    (``estimator`` "needs" it: what it is and where it comes from), holds a non-number, or a NaN or
    infinity."""
    if name not in table.extra:
        raise AdvantageInputError(f"column {name!r}: estimator {estimator!r} needs {needs}")
    values = table.extra[name]
    if values.dtype.kind not in "iuf" and (r := _first_non_number(values)) is not None:
        raise AdvantageInputError(
            f"column {name!r}: must be numbers, got {_show(values[r])} "
            f"(example: input row {int(table.order[r])})"
        )
    values = values.astype(np.float64)
    if not np.isfinite(values).all():
        r = int(np.flatnonzero(~np.isfinite(values))[0])
        raise AdvantageInputError(f"column {name!r}: not finite (example: input row {int(table.order[r])})")
    return values


def _sort_order(ep_codes: np.ndarray, step_idx: np.ndarray) -> np.ndarray:
    """Permutation sorting rows by (episode code, step_idx); O(S) when the steps of every episode are
    0..n−1 (`_placed_order`, what `_check_steps` requires) or the rows already sorted, else a stable sort."""
    n = ep_codes.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    if (order := _placed_order(ep_codes, step_idx)) is not None:
        return order
    lo, hi = int(step_idx.min()), int(step_idx.max())
    span = hi - lo + 1
    if span < (1 << 62) // max(int(ep_codes.max()) + 1, 1):
        key = ep_codes * span + (step_idx - lo)
        if (key[1:] >= key[:-1]).all():
            return np.arange(n, dtype=np.int64)
        return np.argsort(key, kind="stable").astype(np.int64)
    return np.lexsort((step_idx, ep_codes)).astype(np.int64)


def _placed_order(ep_codes: np.ndarray, step_idx: np.ndarray) -> np.ndarray | None:
    """The sorting permutation without a sort, or None: with n_e rows of episode e (dense codes), numbered
    0..n_e−1, row r goes to place start[e] + step_idx[r], start the cumulative row count of the episodes
    before e. None unless every row lands on a place of its own (repeated or missing steps: the caller
    sorts, and `_check_steps` names the row)."""
    n = ep_codes.shape[0]
    count = np.bincount(ep_codes)  # (E,)
    if step_idx.min() < 0 or (step_idx >= count[ep_codes]).any():
        return None
    place = (np.cumsum(count) - count)[ep_codes] + step_idx  # (S,) in [0, S)
    if not (np.bincount(place, minlength=n) == 1).all():
        return None
    order = np.empty(n, dtype=np.int64)
    order[place] = np.arange(n)
    return order


def _check_steps(ep, sidx, order, ids) -> tuple[np.ndarray, np.ndarray]:
    """Duplicates and contiguity of step_idx; returns (ep_start (E,), ep_len (E,))."""
    n = ep.shape[0]
    new_ep = np.ones(n, dtype=bool)
    new_ep[1:] = ep[1:] != ep[:-1]
    dup = ~new_ep[1:] & (sidx[1:] == sidx[:-1])
    if dup.any():
        r = int(np.flatnonzero(dup)[0]) + 1
        _fail("duplicate (episode_id, step_idx)", "step_idx", int(order[r]), ids(r))
    ep_start = np.flatnonzero(new_ep)
    ep_len = np.diff(np.append(ep_start, n))
    expected = np.arange(n) - np.repeat(ep_start, ep_len)
    bad = sidx != expected
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        _fail(
            f"step_idx must be 0..n-1 per episode (expected {int(expected[r])}, got {int(sidx[r])})",
            "step_idx",
            int(order[r]),
            ids(r),
        )
    return ep_start.astype(np.int64), ep_len.astype(np.int64)


def _group_codes(
    col: Any, order: np.ndarray, ep: np.ndarray, ep_start: np.ndarray, ids
) -> tuple[np.ndarray, np.ndarray]:
    """(codes (S,) in sorted row order, uniques (G,)) of the group ids. A text column (numpy objects) is
    hashed at each episode's first row only (E values, not S): a row whose id differs from its episode's
    first is then refused as an episode spread over two groups, as the codes' check would."""
    values = col.to_numpy() if isinstance(col, pd.Series | pd.Index) and col.dtype == object else None
    if values is None:
        codes, uniques = _factorize(col, "group_id", sort=False)
        return codes[order], uniques
    rows = values[order]  # (S,) objects, sorted
    firsts = rows[ep_start]  # (E,)
    if pd.isna(firsts).any():
        _fail("null id", "group_id", int(order[ep_start[np.flatnonzero(pd.isna(firsts))[0]]]))
    ep_codes, uniques = pd.factorize(firsts, sort=False)
    codes = np.asarray(ep_codes, dtype=np.int64)[ep]
    spread = rows != firsts[ep]
    if spread.any():
        r = int(np.flatnonzero(spread)[0])
        _fail(
            "episode spread over two group_ids",
            "group_id",
            int(order[r]),
            {**ids(r), "group_id": rows[r], "first_step_group_id": firsts[ep[r]]},
        )
    return codes, np.asarray(uniques, dtype=object)


def _check_constant(values, ep, ep_start, order, column, problem, ids) -> None:
    bad = values != values[ep_start[ep]]
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        _fail(problem, column, int(order[r]), ids(r))
