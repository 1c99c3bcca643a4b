"""Public API: registry, params_hash, input validation, pyarrow input, token expansion, fill rule."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from adv_tables import random_steps

import creditline.credit.advantages as adv
from creditline.credit.advantages import (
    AdvantageInputError,
    Conventions,
    available,
    completion_advantages,
    completion_advantages_flat,
    compute,
    fill_preset,
    params_hash,
)
from creditline.credit.advantages.table import build_step_table

BASE = pd.DataFrame(
    {
        "group_id": ["g", "g", "g", "h"],
        "episode_id": ["a", "a", "b", "c"],
        "step_idx": [0, 1, 0, 0],
        "anchor_key": ["s0", "s1", "s0", "s0"],
        "step_reward": [1.0, 0.0, 0.0, 1.0],
        "episode_reward": [1.0, 1.0, 0.0, 1.0],
    }
)
NAMES = [
    "gigpo",
    "grpo",
    "hgpo",
    "igpo",
    "mc_branch",
    "prime",
    "reinforce_pp_baseline",
    "rloo",
    "spa",
    "spo_tree",
    "turn_group",
]


# --- registry ------------------------------------------------------------------------------
def test_available_lists_estimators_params_and_defaults():
    av = {name: info["params"] for name, info in available().items()}
    assert sorted(av) == NAMES
    assert av["grpo"] == {"norm_by_std": True, "conventions": "creditline"}
    assert av["gigpo"] == {
        "mode": "mean_std_norm",
        "gamma": 0.95,
        "step_advantage_w": 1.0,
        "enable_similarity": False,
        "similarity_thresh": 0.95,
        "conventions": "creditline",
    }
    assert av["hgpo"]["history_length"] == 2 and av["hgpo"]["base_group"] is False
    assert av["turn_group"] == {"variant": "a2tgpo", "gamma": None, "alpha": 1.0, "conventions": "creditline"}


def test_unknown_estimator_and_parameter_name_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'prorl'.*'gigpo'.*'turn_group'"):
        compute("prorl", BASE)
    with pytest.raises(
        ValueError, match=r"unknown parameter\(s\) \['gamma'\] for estimator 'grpo'.*norm_by_std"
    ):
        compute("grpo", BASE, gamma=0.9)
    with pytest.raises(ValueError, match="unknown conventions 'trl' for estimator 'grpo'"):
        compute("grpo", BASE, conventions="trl")
    with pytest.raises(ValueError, match="estimator 'gigpo' has no 'verl' reference"):
        compute("gigpo", BASE, conventions="verl")
    with pytest.raises(ValueError, match="unknown mode 'std'"):
        compute("gigpo", BASE, mode="std")
    with pytest.raises(ValueError, match="unknown variant"):
        compute("turn_group", BASE, variant="igpo")
    with pytest.raises(ValueError, match="history_length"):
        compute("hgpo", BASE, history_length=-1)
    with pytest.raises(ValueError, match="similarity_thresh"):
        compute("gigpo", BASE, enable_similarity=True, similarity_thresh=0.0)


def test_register_rejects_duplicates_positional_params_and_unnamed_presets():
    with pytest.raises(ValueError, match="already registered"):
        adv.register("grpo", references={"verl": Conventions()})(lambda table, conv: np.zeros(0))
    with pytest.raises(TypeError, match="keyword-only"):
        adv.register("bad_estimator")(lambda table, conv, x: np.zeros(0))
    # presets are named after the code they reproduce: a new name must be added to PRESETS first
    with pytest.raises(ValueError, match=r"unknown reference preset\(s\) \['reference'\]"):
        adv.register("bad_estimator", references={"reference": Conventions()})
    with pytest.raises(ValueError, match=r"unknown reference preset\(s\) \['creditline'\]"):
        adv.register("bad_estimator", references={"creditline": Conventions()})
    with pytest.raises(TypeError, match="must be Conventions or a callable"):
        adv.register("bad_estimator", references={"verl": "verl"})
    assert "bad_estimator" not in available()


def test_conventions_instance_and_knobs():
    # a Conventions instance equal to the preset gives the same result and the same hash
    creditline = Conventions()
    np.testing.assert_array_equal(compute("grpo", BASE, conventions=creditline), compute("grpo", BASE))
    assert params_hash("grpo", {"conventions": creditline}) == params_hash("grpo", {})
    # knobs are validated
    with pytest.raises(ValueError, match="ddof_step"):
        Conventions(ddof_step=2)
    with pytest.raises(ValueError, match="episode_singleton"):
        Conventions(episode_singleton="one")
    # episode_stats="step_rows" weights episode a (2 rows) twice: rows [1, 1, 0] -> μ = 2/3
    dr = compute("grpo", BASE, norm_by_std=False, conventions=Conventions(episode_stats="step_rows"))
    np.testing.assert_allclose(dr, [1 / 3, 1 / 3, -2 / 3, 0.0])


def test_params_hash_is_stable_and_resolved():
    h = params_hash("gigpo", {"gamma": 0.95})
    assert len(h) == 16 and int(h, 16) >= 0
    assert (
        h
        == params_hash("gigpo", {})
        == params_hash("gigpo", {"mode": "mean_std_norm", "conventions": "creditline"})
    )
    assert h == params_hash("gigpo", {"gamma": np.float64(0.95)})
    assert h != params_hash("gigpo", {"gamma": 0.9})
    assert h != params_hash("gigpo", {"conventions": "verl-agent"})
    assert params_hash("grpo") != params_hash("rloo")
    # a preset is expanded to its fields: verl (per episode) and verl-agent (step rows) differ
    assert params_hash("grpo", {"conventions": "verl"}) != params_hash("grpo", {"conventions": "verl-agent"})
    assert params_hash("turn_group", {"conventions": "igpo-fork"}) != params_hash(
        "turn_group", {"conventions": "matchtir", "variant": "matchtir"}
    )
    assert params_hash("gigpo", {"gamma": 0.95}) == "0be51cfae2c69c77"  # pinned: changes break lineage


# --- input contract --------------------------------------------------------------------------
BAD_INPUTS = [
    ("missing column", BASE.drop(columns=["anchor_key"]), r"missing column\(s\) \['anchor_key'\]"),
    (
        "NaN step_reward",
        BASE.assign(step_reward=[1, np.nan, 0, 1]),
        r"'step_reward': non-finite value nan .*row 1, episode_id='a', step_idx=1",
    ),
    (
        "inf episode_reward",
        BASE.assign(episode_reward=[np.inf, np.inf, 0, 1]),
        r"'episode_reward': non-finite value inf .*row 0, episode_id='a'",
    ),
    (
        "gap in step_idx",
        BASE.assign(step_idx=[0, 2, 0, 0]),
        r"'step_idx': step_idx must be 0..n-1 per episode \(expected 1, got 2\).*episode_id='a'",
    ),
    ("step_idx not from 0", BASE.assign(step_idx=[1, 2, 0, 0]), r"'step_idx': step_idx must be 0..n-1"),
    (
        "duplicate step",
        BASE.assign(step_idx=[0, 0, 0, 0]),
        r"'step_idx': duplicate \(episode_id, step_idx\).*episode_id='a', step_idx=0",
    ),
    (
        "episode_reward varies",
        BASE.assign(episode_reward=[1, 0.5, 0, 1]),
        r"'episode_reward': episode_reward not constant within an episode.*episode_id='a'",
    ),
    (
        "episode in two groups",
        BASE.assign(group_id=["g", "h", "g", "h"]),
        r"'group_id': episode spread over two group_ids.*group_id='h', first_step_group_id='g'",
    ),
    ("null id", BASE.assign(episode_id=["a", None, "b", "c"]), r"'episode_id': null id.*row 1"),
    ("fractional step_idx", BASE.assign(step_idx=[0, 1.5, 0, 0]), r"'step_idx': must be integers, got 1.5"),
    ("negative length", BASE.assign(completion_length=[1, -1, 0, 0]), r"'completion_length': negative"),
]


@pytest.mark.parametrize("as_arrow", [False, True], ids=["pandas", "arrow"])
@pytest.mark.parametrize("case,df,pattern", BAD_INPUTS, ids=[c for c, _, _ in BAD_INPUTS])
def test_bad_inputs_raise_naming_the_column(case, df, pattern, as_arrow):
    steps = pa.Table.from_pandas(df, preserve_index=False) if as_arrow else df
    with pytest.raises(AdvantageInputError, match=pattern):
        compute("gigpo", steps)
    assert issubclass(AdvantageInputError, ValueError)


def test_not_a_table():
    with pytest.raises(AdvantageInputError, match="DataFrame or a pyarrow Table"):
        compute("grpo", BASE.to_dict())


# --- inputs that must work ---------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_pyarrow_table_and_extra_columns_give_the_same_result(name):
    df = random_steps(np.random.default_rng(0), n_groups=4, group_size=5, max_steps=4, discrete=False)
    df = df.assign(
        gold_logprob=-np.arange(len(df)) / len(df), model_reward=np.arange(len(df)) / len(df)
    )  # IGPO's, prime's and spa's input; the others ignore them
    expected = compute(name, df)
    extra = df.assign(observation="obs", valid_action=True)
    np.testing.assert_array_equal(compute(name, extra), expected)
    table = pa.Table.from_pandas(df, preserve_index=False)
    np.testing.assert_array_equal(compute(name, table), expected)
    chunked = pa.concat_tables([table.slice(0, 7), table.slice(7)])  # several chunks
    np.testing.assert_array_equal(compute(name, chunked), expected)
    dictionary = table.set_column(1, "episode_id", table.column("episode_id").dictionary_encode())
    np.testing.assert_array_equal(compute(name, dictionary), expected)


@pytest.mark.parametrize("name", NAMES)
def test_categorical_ids_with_unused_and_reordered_categories_give_the_same_result(name):
    """Categoricals are read through their own codes (not hashed again): categories no row uses, in any
    order, change nothing, bit for bit."""
    df = random_steps(np.random.default_rng(1), n_groups=4, group_size=5, max_steps=4, discrete=True)
    df = df.assign(gold_logprob=-np.arange(len(df)) / len(df), model_reward=np.arange(len(df)) / len(df))
    expected = compute(name, df)
    ids = ("group_id", "episode_id", "anchor_key")
    categorical = df.astype({c: "category" for c in ids})
    np.testing.assert_array_equal(compute(name, categorical), expected)
    padded = df.astype(
        {c: pd.CategoricalDtype(["unused", *sorted(df[c].unique(), reverse=True), "zz-unused"]) for c in ids}
    )
    np.testing.assert_array_equal(compute(name, padded), expected)
    coded = build_step_table(padded)  # codes stay dense: the unused categories are left out
    assert (len(coded.episode_values), coded.n_groups) == (
        df["episode_id"].nunique(),
        df["group_id"].nunique(),
    )
    table = pa.Table.from_pandas(padded, preserve_index=False)  # dictionary-encoded ids, unused values kept
    assert pa.types.is_dictionary(table.schema.field("anchor_key").type)
    np.testing.assert_array_equal(compute(name, table), expected)
    second = pa.Table.from_pandas(df.iloc[9:], preserve_index=False).cast(
        table.schema
    )  # its own dictionaries
    chunks = pa.concat_tables([table.slice(0, 9), second])
    assert (
        not chunks.column("episode_id")
        .chunk(1)
        .dictionary.equals(table.column("episode_id").chunk(0).dictionary)
    )
    np.testing.assert_array_equal(compute(name, chunks), expected)


def test_an_arrow_dictionary_holding_a_value_twice_is_read_by_its_values():
    expected = compute("gigpo", BASE)
    repeated = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 3]), pa.array(["a", "a", "b", "c"]))
    table = pa.Table.from_pandas(BASE, preserve_index=False)
    table = table.set_column(1, "episode_id", repeated)
    np.testing.assert_array_equal(compute("gigpo", table), expected)


def test_a_null_categorical_id_is_refused_naming_its_row():
    steps = BASE.assign(episode_id=pd.Categorical(["a", None, "b", "c"], categories=["c", "b", "a", "x"]))
    with pytest.raises(AdvantageInputError, match=r"'episode_id': null id.*row 1"):
        compute("gigpo", steps)


def test_integer_ids_and_float_step_idx_and_index_labels():
    df = BASE.assign(group_id=[7, 7, 7, 9], episode_id=[10, 10, 2, 3], step_idx=[0.0, 1.0, 0.0, 0.0])
    df.index = [40, 30, 20, 10]
    expected = compute("gigpo", BASE.assign(episode_id=["x10", "x10", "x02", "x03"]))
    np.testing.assert_array_equal(compute("gigpo", df), expected)


@pytest.mark.parametrize("name", NAMES)
def test_empty_table(name):
    out = compute(name, BASE.assign(gold_logprob=0.0, model_reward=0.0).iloc[:0])
    assert out.shape == (0,) and out.dtype == np.float64


# --- tokens and the verifiers fill rule --------------------------------------------------------
def test_completion_advantages_repeat_the_step_scalar():
    parts = completion_advantages(np.array([0.5, -1.0, 2.0]), np.array([3, 0, 2]))
    assert [p.tolist() for p in parts] == [[0.5, 0.5, 0.5], [], [2.0, 2.0]]
    values, offsets = completion_advantages_flat(np.array([0.5, -1.0, 2.0]), np.array([3, 0, 2]))
    assert values.tolist() == [0.5, 0.5, 0.5, 2.0, 2.0] and offsets.tolist() == [0, 3, 3, 5]
    with pytest.raises(AdvantageInputError, match="same length"):
        completion_advantages(np.zeros(2), np.array([1]))
    with pytest.raises(AdvantageInputError, match="negative length -1 at step 1"):
        completion_advantages(np.zeros(2), np.array([1, -1]))
    with pytest.raises(AdvantageInputError, match="non-finite value nan at step 0"):
        completion_advantages(np.array([np.nan]), np.array([1]))
    with pytest.raises(AdvantageInputError, match="integers"):
        completion_advantages(np.zeros(1), np.array([1.5]))


def test_fill_preset_keeps_environment_values():
    # verifiers: step.advantage = step.advantage if not None else the estimator's value
    out = fill_preset(np.array([np.nan, 0.25, np.nan, 0.0]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert out.tolist() == [1.0, 0.25, 3.0, 0.0]
    with pytest.raises(AdvantageInputError, match="same length"):
        fill_preset(np.zeros(2), np.zeros(3))
    with pytest.raises(AdvantageInputError, match="infinite"):
        fill_preset(np.array([np.inf]), np.zeros(1))
    with pytest.raises(AdvantageInputError, match="unset step 0"):
        fill_preset(np.array([np.nan]), np.array([np.nan]))


def test_end_to_end_step_to_token_advantages():
    df = BASE.assign(completion_length=[3, 2, 4, 1])
    step_adv = fill_preset(np.array([np.nan, 9.0, np.nan, np.nan]), compute("gigpo", df, gamma=0.5))
    parts = completion_advantages(step_adv, df.completion_length.to_numpy())
    assert [len(p) for p in parts] == [3, 2, 4, 1] and parts[1].tolist() == [9.0, 9.0]
