"""mc_branch and spo_tree (creditline.credit.advantages.branch): hand-computed toy trees, invariants, bad links."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creditline.credit.advantages import AdvantageInputError, compute

# One group: a (3 steps, rewards 0 0 1) and b (2 steps, 0 0); two continuations from a's step 1:
# c0 (0 0) and c1 (0 1). γ = 1.
ROWS = [
    ("a", 0, 0.0, None, None), ("a", 1, 0.0, None, None), ("a", 2, 1.0, None, None),
    ("b", 0, 0.0, None, None), ("b", 1, 0.0, None, None),
    ("a:b1.0", 0, 0.0, "a", 1), ("a:b1.0", 1, 0.0, "a", 1),
    ("a:b1.1", 0, 0.0, "a", 1), ("a:b1.1", 1, 1.0, "a", 1),
]  # fmt: skip


def toy() -> pd.DataFrame:
    frame = pd.DataFrame(
        ROWS, columns=["episode_id", "step_idx", "step_reward", "branch_of_episode", "branch_of_step"]
    )
    return frame.assign(group_id="g", anchor_key=frame["episode_id"] + frame["step_idx"].astype(str),
                        episode_reward=0.0, branch_of_step=frame["branch_of_step"].astype("Int64"))  # fmt: skip


def by_row(values: np.ndarray) -> list[float]:
    return [round(float(v), 12) for v in values]


def test_mc_branch_by_hand():
    # V(s0) = mean(G_a = 1, G_b = 0) = 1/2; V(a@1) = mean(G_a,1 = 1, c0 = 0, c1 = 1) = 2/3
    expected = [1 / 2, 1 / 3, 1 / 3, -1 / 2, -1 / 2, -2 / 3, -2 / 3, 1 / 3, 1 / 3]
    assert by_row(compute("mc_branch", toy())) == by_row(np.array(expected))
    # bootstrap: a's first segment gets Q = r_0 + V(a@1) = 2/3 instead of G_0 = 1
    expected[0] = 2 / 3 - 1 / 2
    assert by_row(compute("mc_branch", toy(), bootstrap=True)) == by_row(np.array(expected))


def test_mc_branch_discounts_returns():
    # γ = 0.5: G_a = [0.25, 0.5, 1], G_b = 0, c0 = 0, c1 = [0.5, 1]; V(s0) = 1/8, V(a@1) = (0.5 + 0 + 0.5)/3
    adv = compute("mc_branch", toy(), gamma=0.5)
    assert by_row(adv) == by_row(
        np.array([1 / 8, 1 / 6, 1 / 6, -1 / 8, -1 / 8, -1 / 3, -1 / 3, 1 / 6, 1 / 6])
    )


def test_spo_tree_by_hand():
    # leaves: a's last segment 1, c0 0, c1 1 (prefix 0); V(a's first segment) = mean(1, 0, 1) = 2/3;
    # b has no branch: V = 0; V(root) = mean(2/3, 0) = 1/3
    expected = np.array([1 / 3, 1 / 3, 1 / 3, -1 / 3, -1 / 3, -2 / 3, -2 / 3, 1 / 3, 1 / 3])
    assert by_row(compute("spo_tree", toy())) == by_row(expected)
    global_term = np.array([1 / 3, 2 / 3, 2 / 3, -1 / 3, -1 / 3, -1 / 3, -1 / 3, 2 / 3, 2 / 3])
    assert by_row(compute("spo_tree", toy(), treerl=True)) == by_row(expected + global_term)


def test_a_continuation_leaf_counts_its_sources_prefix():
    frame = toy()
    frame.loc[(frame["episode_id"] == "a") & (frame["step_idx"] == 0), "step_reward"] = (
        0.5  # before the branch
    )
    adv = compute("spo_tree", frame)
    # leaves: a 1.5, c0 0.5, c1 1.5 → V(a0) = 7/6; b 0; root 7/12; a's first segment 7/6 − 7/12 = 7/12
    assert by_row(adv)[:3] == by_row(np.array([7 / 12, 1.5 - 7 / 6, 1.5 - 7 / 6]))
    assert round(float(adv[5]), 12) == round(0.5 - 7 / 6, 12)


def test_without_branches_mc_branch_is_dr_grpo_on_returns():
    frame = toy()[lambda f: f["branch_of_episode"].isna()].drop(
        columns=["branch_of_episode", "branch_of_step"]
    )
    frame = frame.assign(episode_reward=frame.groupby("episode_id")["step_reward"].transform("sum"))
    expected = compute("grpo", frame, norm_by_std=False)
    np.testing.assert_allclose(compute("mc_branch", frame), expected)
    np.testing.assert_allclose(compute("spo_tree", frame), expected)


@st.composite
def branched_tables(draw):
    rows = []
    for g in range(draw(st.integers(1, 3))):
        for e in range(draw(st.integers(1, 3))):
            source = f"g{g}e{e}"
            n = draw(st.integers(1, 5))
            rows += [
                (f"g{g}", source, t, draw(st.sampled_from([0.0, 1.0, -0.5])), None, None) for t in range(n)
            ]
            for t in sorted(draw(st.sets(st.integers(1, 4), max_size=2))):
                if t >= n:
                    continue
                for k in range(draw(st.integers(1, 2))):
                    m = draw(st.integers(1, 3))
                    rows += [(f"g{g}", f"{source}:b{t}.{k}", s, draw(st.sampled_from([0.0, 1.0])), source, t)
                             for s in range(m)]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["group_id", "episode_id", "step_idx", "step_reward", "branch_of_episode",
                                        "branch_of_step"])  # fmt: skip
    return frame.assign(
        anchor_key="s", episode_reward=0.0, branch_of_step=frame["branch_of_step"].astype("Int64")
    )


@pytest.mark.parametrize("estimator,params", [("mc_branch", {}), ("mc_branch", {"bootstrap": True, "gamma": 0.9}),
                                              ("spo_tree", {}), ("spo_tree", {"treerl": True})])  # fmt: skip
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(frame=branched_tables(), seed=st.integers(0, 1000))
def test_row_order_and_group_permutation_do_not_matter(estimator, params, frame, seed):
    adv = pd.Series(
        compute(estimator, frame, **params), index=pd.MultiIndex.from_frame(frame[["episode_id", "step_idx"]])
    )
    shuffled = frame.sample(frac=1, random_state=seed)
    renamed = shuffled.assign(
        group_id=shuffled["group_id"].map(lambda g: f"z{g}")
    )  # group codes in another order
    again = pd.Series(compute(estimator, renamed, **params),
                      index=pd.MultiIndex.from_frame(renamed[["episode_id", "step_idx"]]))  # fmt: skip
    pd.testing.assert_series_equal(adv.sort_index(), again.sort_index())
    # every continuation's rows share one advantage (a continuation is one segment)
    conts = frame["branch_of_episode"].notna().to_numpy()
    per_episode = pd.Series(adv.to_numpy()[conts]).groupby(frame["episode_id"].to_numpy()[conts]).nunique()
    assert (per_episode <= 1).all()


def test_mc_branch_centres_each_valued_state():
    """Q − V over the paths that acted in a valued state sums to zero (V is their mean)."""
    adv = compute("mc_branch", toy())
    frame = toy().assign(adv=adv)
    firsts = frame[(frame["step_idx"] == 0) & frame["branch_of_episode"].isna()]  # the start state s0
    assert abs(firsts["adv"].sum()) < 1e-12
    at_point = pd.concat([frame[(frame["episode_id"] == "a") & (frame["step_idx"] == 1)],
                          frame[frame["branch_of_episode"].notna() & (frame["step_idx"] == 0)]])  # fmt: skip
    assert abs(at_point["adv"].sum()) < 1e-12


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda f: f.assign(branch_of_episode=f["branch_of_episode"].replace("a", "zz")), "names episode 'zz', which is not in the table"),
        (lambda f: f.assign(branch_of_step=f["branch_of_step"].replace(1, 5)), "branch_of_step 5; its source has steps 1..2"),
        (lambda f: f.assign(group_id=np.where(f["episode_id"] == "a:b1.0", "h", "g")), "is in another group"),
        (lambda f: f.assign(branch_of_episode=f["branch_of_episode"].replace("a", "a:b1.1").where(f["episode_id"] != "a:b1.1", "a")),
         "itself a continuation"),
    ],
)  # fmt: skip
def test_bad_links_are_refused_by_name(change, message):
    with pytest.raises(AdvantageInputError, match=message):
        compute("mc_branch", change(toy()))
