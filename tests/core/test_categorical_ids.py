"""Ids read as categoricals (`creditline.store.read_parquet(categories=...)`): the join and the estimators use
Parquet's dictionary codes, and every advantage is the one the same tables give with string ids."""

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from creditline.config import AdvantageSettings
from creditline.credit.round_advantages import ID_COLUMNS, join_on_step, step_advantages, with_string_ids
from creditline.store import read_parquet, write_parquet_atomic


def _round_tables(seed: int, n_groups: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Steps, scores and episodes of `n_groups` groups of 2..4 episodes of 1..4 steps, rows shuffled (so a
    file's dictionary order is not the ids' sorted order); anchors recur within a group."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_groups):
        for e in range(int(rng.integers(2, 5))):
            reward = float(rng.integers(0, 3))
            for t in range(int(rng.integers(1, 5))):
                rows.append({
                    "episode_id": f"g{g:02d}/e{e}", "group_id": f"g{g:02d}", "step_idx": t,
                    "anchor_key": f"a{int(rng.integers(0, 3))}", "completion_ids": [1] * int(rng.integers(0, 4)),
                    "step_reward": float(rng.normal()), "episode_reward": reward,
                })  # fmt: skip
    steps = pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)
    scores = steps[["episode_id", "step_idx", "step_reward", "episode_reward"]].assign(rubric_version="v1")
    scores = scores.sample(frac=1.0, random_state=seed + 1).reset_index(drop=True)
    steps = steps.drop(columns=["step_reward", "episode_reward"])
    first = steps.drop_duplicates("episode_id")
    episodes = pd.DataFrame({"episode_id": first["episode_id"], "success": rng.random(len(first)) < 0.5})
    return steps, scores, episodes


def _read_back(frame: pd.DataFrame, folder: Path, name: str) -> pd.DataFrame:
    return read_parquet(write_parquet_atomic(frame, folder / f"{name}.parquet").path, ID_COLUMNS)


def test_the_named_columns_come_back_as_categoricals_with_the_same_values(tmp_path):
    steps, _, _ = _round_tables(0, 3)
    path = write_parquet_atomic(steps, tmp_path / "steps.parquet").path
    plain, coded = read_parquet(path), read_parquet(path, [*ID_COLUMNS, "not_a_column"])
    for column in ID_COLUMNS:
        assert plain[column].dtype == object
        assert isinstance(coded[column].dtype, pd.CategoricalDtype)
        assert coded[column].tolist() == plain[column].tolist()
    pd.testing.assert_frame_equal(with_string_ids(coded), plain)  # nothing else read differently


def test_the_join_matches_codes_and_keeps_the_steps_categorical(tmp_path):
    steps, scores, _ = _round_tables(1, 4)
    coded_steps, coded_scores = _read_back(steps, tmp_path, "steps"), _read_back(scores, tmp_path, "scores")
    assert list(coded_steps["episode_id"].cat.categories) != list(coded_scores["episode_id"].cat.categories)
    joined = join_on_step(coded_steps, coded_scores, ["step_reward"], "scores")
    assert isinstance(joined["episode_id"].dtype, pd.CategoricalDtype)
    expected = join_on_step(steps, scores, ["step_reward"], "scores")
    pd.testing.assert_frame_equal(with_string_ids(joined), expected)
    # scores of more episodes than a steps file has (one group's): the others' rows are left out
    plain_subset = steps[steps["group_id"] == "g00"]
    subset = _read_back(plain_subset, tmp_path, "subset")
    some = join_on_step(subset, coded_scores, ["step_reward"], "scores")
    expected = join_on_step(plain_subset.reset_index(drop=True), scores, ["step_reward"], "scores")
    pd.testing.assert_frame_equal(with_string_ids(some), expected)
    # an episode the steps do not have, and a step the scores miss: refused as with string ids
    other = scores.iloc[1:].assign(episode_id=lambda f: f["episode_id"].where(f.index != 2, "elsewhere"))
    with pytest.raises(ValueError, match=f"scores cover {len(steps) - 2} of {len(steps)} step rows"):
        join_on_step(coded_steps, _read_back(other, tmp_path, "other"), ["step_reward"], "scores")


ESTIMATORS = [
    AdvantageSettings("grpo", {}),
    AdvantageSettings("gigpo", {"mode": "mean_std_norm", "gamma": 0.95}),
    AdvantageSettings("hgpo", {"history_length": 2}),
    AdvantageSettings("turn_group", {}),
    AdvantageSettings("grpo", {"norm_by_std": False}, sample_filter="prof", filter_remove=1),
]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6), st.sampled_from(ESTIMATORS))
def test_categorical_ids_give_the_advantages_of_string_ids(seed, n_groups, advantage_settings):
    steps, scores, episodes = _round_tables(seed, n_groups)
    with tempfile.TemporaryDirectory() as folder:
        coded_steps = _read_back(steps, Path(folder), "steps")
        coded_scores = _read_back(scores, Path(folder), "scores")
        expected = step_advantages(steps, scores, advantage_settings, episodes)
        got = step_advantages(coded_steps, coded_scores, advantage_settings, episodes)
        pd.testing.assert_frame_equal(got, expected)  # the same floats; the ids written as plain strings
        written = [
            write_parquet_atomic(f, Path(folder) / f"{n}.parquet") for n, f in (("a", got), ("b", expected))
        ]
        assert written[0].content_hash == written[1].content_hash  # the advantages file: the same bytes


def test_no_estimator_hashes_ids_read_as_categoricals(tmp_path, monkeypatch):
    steps, scores, _ = _round_tables(2, 5)
    coded_steps, coded_scores = _read_back(steps, tmp_path, "steps"), _read_back(scores, tmp_path, "scores")

    factorize = pd.factorize

    def factorize_numbers_only(values, *args, **kwargs):  # the estimators' own integer keys are theirs
        if getattr(values, "dtype", np.dtype(object)).kind in "OUS":
            raise AssertionError("an id column was hashed")
        return factorize(values, *args, **kwargs)

    monkeypatch.setattr(pd, "factorize", factorize_numbers_only)
    for advantage_settings in ESTIMATORS[:4]:
        step_advantages(coded_steps, coded_scores, advantage_settings)
        with pytest.raises(AssertionError, match="hashed"):  # the same tables with string ids are
            step_advantages(steps, scores, advantage_settings)
