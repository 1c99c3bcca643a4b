"""Advantages from branching rollouts: Monte-Carlo values of the states continuations restarted from.

Input: the round's step table with the branch links of `creditline.rollout.branching` (``branch_of_episode``,
``branch_of_step``: null on the round's own episodes). A continuation c restarted from step t of its source
episode e re-samples the action at that state, so the state s = (e, t) has K + 1 paths that chose an action
in it: e's own rows from t on, and each continuation's rows. The group's G episodes are the same for the
start state s_0. Call these *valued states*; each path is cut at them into segments:

    root episode e, branch steps t_1 < … < t_m:   [0, t_1), [t_1, t_2), …, [t_m, end)
    continuation c from (e, t):                    [t, end)      (its step_idx 0 is depth t)

Returns per path, discounted with γ (GiGPO Eq. 5): G_d = Σ_{k ≥ d} γ^{k−d} r_k over the path's own
rows.

``mc_branch`` — Q − V at the valued states (VinePPO, Kazemnejad et al. 2024, arXiv 2410.01679, §4: values
by Monte-Carlo rollouts from the state instead of a critic). For a row in the segment starting at depth a, in
valued state s_a:

    V̂(s_a)     = mean of G_a over the paths that chose an action in s_a    (K + 1 samples; G at s_0)
    Q̂(s_a, a)  = G_a of this path                                          (bootstrap=False)
               = Σ_{k=a}^{b−1} γ^{k−a} r_k + γ^{b−a} V̂(s_b)                (bootstrap=True, b: the
                                                                              next valued state on the path)
    A          = Q̂(s_a, a) − V̂(s_a)          on every row of the segment

so a step with no value estimate of its own shares its segment's credit, as every step shares the episode's
under GRPO. Without branches it is Dr.GRPO with γ-discounted returns (A = G_0 − mean_group G_0); branching
at every step makes it per-step Q − V.

``spo_tree`` — the tree-structured segment advantage of SPO-tree (Guo et al. 2025, arXiv 2505.23564;
AIFrameResearch/SPO ``HybridEpisodeGenerator``, its default "rloo" advantage). The segments are the tree's
nodes: the group's root has the G episodes' first segments as children, and a root path's segment j has its
segment j + 1 and the continuations from the end of segment j as children. Each path ends in a leaf, whose
value is the path's whole return from s_0 (the source's rewards before the branch step plus the
continuation's own, undiscounted). Values are means of the children's values, recursively, as SPO's code
does (a mean of means where branches finish early, not a mean over the leaves):

    V(leaf) = its return      V(n) = mean_{c ∈ children(n)} V(c)      V(root) = mean of the G first segments
    A(n)    = V(n) − V(parent(n))                                     on every row of segment n
    A(n)    = [V(n) − V(parent(n))] + [V(n) − V(root)]                (treerl=True)

``treerl=True`` adds the global term of TreeRL (Hou et al. 2025, arXiv 2506.11902; THUDM/TreeRL
``gather_paths`` with ``use_state_value_reward``, the released recipe), with V(root) subtracted where TreeRL
centres the leaf rewards (leave-one-out, then a token-weighted mean); TreeRL's 1/√(selected leaves)
weighting of V and its leaf sub-sampling are not reproduced.

Shapes: S step rows, E episodes; all arrays are in the sorted order of :class:`~.table.StepTable`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .conventions import Conventions
from .gigpo import step_returns
from .registry import register
from .segments import dense_codes
from .table import AdvantageInputError, StepTable

BRANCH_COLUMNS = ("branch_of_episode", "branch_of_step")


def branch_links(table: StepTable) -> tuple[np.ndarray, np.ndarray]:
    """(source episode code, branch step) per episode (E,), −1 and 0 for the round's own episodes; a link
    to an episode the table lacks, to a continuation, to a step its source does not have, or across groups
    is refused (AdvantageInputError naming the episode)."""
    n_episodes = len(table.ep_start)
    source, at = np.full(n_episodes, -1, np.int64), np.zeros(n_episodes, np.int64)
    if "branch_of_episode" not in table.extra:
        return source, at
    names = pd.Series(table.extra["branch_of_episode"][table.ep_start], dtype=object)
    steps = pd.to_numeric(
        pd.Series(table.extra.get("branch_of_step", np.full(n_episodes, np.nan))[table.ep_start]),
        errors="coerce",
    )
    linked = names.notna().to_numpy() & (names.astype(str) != "").to_numpy()
    codes = pd.Index(table.episode_values).get_indexer(names.where(linked, None))
    episode_ids = table.episode_values

    def fail(e: int | np.integer, problem: str) -> None:
        raise AdvantageInputError(f"column 'branch_of_episode': continuation {episode_ids[e]!r} {problem}")

    for e in np.flatnonzero(linked):
        src, t = int(codes[e]), steps.iloc[e]
        if src < 0:
            fail(e, f"names episode {names.iloc[e]!r}, which is not in the table")
        if linked[src]:
            fail(
                e, f"branches from {episode_ids[src]!r}, itself a continuation (one level of branching only)"
            )
        if not (pd.notna(t) and 1 <= int(t) < table.ep_len[src]):
            fail(
                e,
                f"has branch_of_step {int(t) if pd.notna(t) else None}; "
                f"its source has steps 1..{int(table.ep_len[src]) - 1} to branch at",
            )
        if table.ep_group[e] != table.ep_group[src]:
            fail(e, f"is in another group than its source {episode_ids[src]!r}")
        source[e], at[e] = src, int(t)
    return source, at


class Segments:
    """Every row's segment: the valued state it starts in and the depths of its first row and next cut."""

    def __init__(self, table: StepTable, source: np.ndarray, at: np.ndarray):
        ep = table.episode  # (S,)
        is_branch = source >= 0  # (E,)
        self.root_episode = np.where(is_branch, source, np.arange(len(source)))  # (E,)
        depth = table.step_idx + at[ep]  # (S,) depth in the root episode's path
        # branch points, as keys root_episode * M + step, sorted; each root's step 0 is a cut too
        m = int(depth.max()) + 2 if len(depth) else 1
        roots = np.flatnonzero(~is_branch)
        cuts = np.unique(np.concatenate([source[is_branch] * m + at[is_branch], roots * m]))
        row_key = self.root_episode[ep] * m + depth
        on_root = ~is_branch[ep]
        last_cut = cuts[np.searchsorted(cuts, row_key, side="right") - 1]  # (S,) latest cut ≤ the row
        start = np.where(on_root, last_cut % m, at[ep])  # (S,) depth of the segment's first row
        nxt_pos = np.searchsorted(cuts, row_key, side="right")
        nxt = cuts[np.minimum(nxt_pos, len(cuts) - 1)]
        has_next = on_root & (nxt_pos < len(cuts)) & (nxt // m == self.root_episode[ep])
        self.start = start
        self.next = np.where(has_next, nxt % m, -1)  # (S,) depth of the path's next cut, −1 if none
        # the cut before the segment's start on the root path (its root's cut 0 is always there), −1 for a
        # segment starting at 0: the parent node in the tree of segments
        before = cuts[
            np.maximum(np.searchsorted(cuts, self.root_episode[ep] * m + start, side="left") - 1, 0)
        ]
        self.previous = np.where(start > 0, before % m, -1)  # (S,)
        # the valued state: the group's start state, or (root episode, branch step)
        state_key = np.where(start == 0, -1 - table.group, self.root_episode[ep] * m + start)
        self.state, self.n_states = dense_codes(state_key)
        self.start_row = table.ep_start[ep] + (start - at[ep])  # (S,) the segment's first row of this path
        self.m = m


def state_values(returns: np.ndarray, seg: Segments) -> np.ndarray:
    """V̂ per valued state (n_states,): the mean return from it over the paths that acted in it."""
    first = np.flatnonzero(seg.start_row == np.arange(len(seg.start_row)))  # rows that act in a valued state
    total = np.bincount(seg.state[first], weights=returns[first], minlength=seg.n_states)
    count = np.bincount(seg.state[first], minlength=seg.n_states)
    return total / np.maximum(count, 1)


@register("mc_branch", columns=BRANCH_COLUMNS)
def mc_branch(
    table: StepTable, conv: Conventions, *, gamma: float = 1.0, bootstrap: bool = False
) -> np.ndarray:
    """A = Q̂(s_a, a) − V̂(s_a) on every row of the segment starting in valued state s_a (S,)."""
    del conv  # no σ, no ε: a difference of Monte-Carlo means
    if table.n_rows == 0:
        return np.zeros(0)
    source, at = branch_links(table)
    seg = Segments(table, source, at)
    returns = step_returns(table, gamma)  # (S,) G over each path's own rows
    value = state_values(returns, seg)  # (n_states,)
    q = returns[seg.start_row]
    if bootstrap:
        rows = np.flatnonzero(seg.next >= 0)
        depth_gap = seg.next[rows] - seg.start[rows]
        at_next = seg.start_row[rows] + depth_gap  # the path's row at its next cut (same root episode)
        q[rows] += gamma**depth_gap * (value[seg.state[at_next]] - returns[at_next])
    return q - value[seg.state]


@register("spo_tree", columns=BRANCH_COLUMNS)
def spo_tree(table: StepTable, conv: Conventions, *, treerl: bool = False) -> np.ndarray:
    """A(n) = V(n) − V(parent(n)) (+ V(n) − V(root) with `treerl`) on every row of node n (S,)."""
    del conv
    if table.n_rows == 0:
        return np.zeros(0)
    source, at = branch_links(table)
    seg = Segments(table, source, at)
    to_go = step_returns(table, 1.0)  # (S,) each path's rewards from the row on
    leaf = to_go[
        table.ep_start
    ]  # (E,) a continuation's leaf: its source's rewards before the branch, then its own
    branched = np.flatnonzero(source >= 0)
    src_rows = table.ep_start[source[branched]]
    leaf[branched] += to_go[src_rows] - to_go[src_rows + at[branched]]
    # per root episode: V of each segment, from its own leaf (the last segment) back to its first,
    # keyed root episode * M + segment start
    conts: dict[int, dict[int, list[float]]] = {}
    for c in branched:
        conts.setdefault(int(source[c]), {}).setdefault(int(at[c]), []).append(float(leaf[c]))
    node_value: dict[int, float] = {}
    for e in np.flatnonzero(source < 0):
        points = conts.get(int(e), {})
        value = float(leaf[e])
        for start in sorted(points, reverse=True):
            node_value[int(e) * seg.m + start] = value
            value = float(np.mean([value, *points[start]]))  # the node above: mean of its children
        node_value[int(e) * seg.m] = value
    values = pd.Series(node_value)
    roots = np.flatnonzero(source < 0)
    group = table.ep_group[roots]
    first = values.reindex(roots * seg.m).to_numpy()  # V of each root episode's first segment
    root_value = np.bincount(group, weights=first, minlength=table.n_groups) / np.maximum(
        np.bincount(group, minlength=table.n_groups), 1
    )
    # every row: its node's value and its parent's (the root path's segment ending where the node starts)
    ep = table.episode
    root_of_row = seg.root_episode[ep] * seg.m
    own = np.where(source[ep] >= 0, leaf[ep], values.reindex(root_of_row + seg.start).to_numpy())
    parent = np.where(
        seg.previous >= 0,
        values.reindex(root_of_row + np.maximum(seg.previous, 0)).to_numpy(),
        root_value[table.group],
    )
    advantage = own - parent
    if treerl:
        advantage += own - root_value[table.group]
    return advantage
