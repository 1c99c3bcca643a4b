"""GiGPO — Group-in-Group Policy Optimization (Feng et al. 2025, arXiv 2505.10978).

Reference code: verl-agent @20bd331 ``gigpo/core_gigpo.py``. Per step row i of episode e:

    Eq. 3  A^E_e   = (R_e − μ_g) / (σ_g + ε)          (mode "mean_std_norm"; "mean_norm": R_e − μ_g)
    Eq. 5  R_t     = Σ_{k≥t} γ^{k−t} r_k              (discounted return of step_reward)
    Eq. 6  anchor group = (group_id, anchor_key)      rows of a group that saw the same state
    Eq. 7  A^S_i   = (R_t,i − μ_S) / (σ_S + ε)        (over the anchor group; "mean_norm": no σ)
    Eq. 8  A_i     = A^E_e + ω · A^S_i                 ω = ``step_advantage_w``

``conventions="verl-agent"`` reproduces verl-agent @20bd331 (GiGPO exists only there, so there is
no ``"verl"`` preset): episode stats over step rows (``compute_mean_std_cross_steps=True``),
unbiased σ at both levels, episode singleton → raw score, anchor-group singleton → 0 (μ = own value).

Similarity grouping (``enable_similarity=True``, text anchors only): within each group_id, the
distinct anchors are visited in a deterministic order, by their first (episode_id, step_idx)
in sorted order (verl-agent visits rows in *batch order*, which our inputs do not fix). Each
anchor joins the first existing cluster whose representative (its first member) has
``difflib.SequenceMatcher(None, anchor, rep).ratio() >= similarity_thresh``, else starts a new
cluster. Identical strings always land in the same cluster, so visiting distinct anchors is
equivalent to visiting rows. Cost: O(Σ_g U_g · C_g) ratio calls (U_g distinct anchors and C_g
clusters in group g), each O(len²) worst case, in a Python loop over distinct anchors (not
rows); ``real_quick_ratio``/``quick_ratio`` upper bounds skip most full comparisons.
"""

from __future__ import annotations

from difflib import SequenceMatcher

import numpy as np

from .conventions import VERL_AGENT_GIGPO, Conventions
from .outcome import episode_advantage
from .registry import register
from .segments import dense_codes, discounted_suffix_sum, group_zscore, pair_codes
from .table import StepTable

MODES = ("mean_std_norm", "mean_norm")


def check_mode(mode: str) -> bool:
    """True if the mode divides by σ; unknown modes raise ValueError."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {list(MODES)}")
    return mode == "mean_std_norm"


def step_returns(table: StepTable, gamma: float) -> np.ndarray:
    """Eq. 5: discounted return of step_reward per row (S,)."""
    return discounted_suffix_sum(table.step_reward, table.ep_start, table.ep_len, float(gamma))


def anchor_groups(
    table: StepTable, enable_similarity: bool, similarity_thresh: float
) -> tuple[np.ndarray, int]:
    """Eq. 6: (codes (S,), n) of (group_id, anchor) groups, exact or by text similarity."""
    assert table.anchor is not None and table.anchor_values is not None
    codes, n = pair_codes(table.group, table.anchor, len(table.anchor_values))
    if not enable_similarity:
        return codes, n
    if not 0.0 < similarity_thresh <= 1.0:
        raise ValueError(f"similarity_thresh must be in (0, 1], got {similarity_thresh!r}")
    # pair codes are numbered by first appearance in canonical row order: visit them in that order
    first_row = np.full(n, -1, dtype=np.int64)
    first_row[codes[::-1]] = np.arange(table.n_rows - 1, -1, -1)
    pair_group = table.group[first_row]
    pair_anchor = table.anchor_values[table.anchor[first_row]]
    cluster = cluster_by_similarity(pair_group, pair_anchor, similarity_thresh)
    return dense_codes(cluster[codes])


def cluster_by_similarity(groups: np.ndarray, texts: np.ndarray, thresh: float) -> np.ndarray:
    """Greedy clustering (U,) -> global cluster id (U,); items visited in the given order."""
    out = np.empty(len(texts), dtype=np.int64)
    reps: dict[int, list[tuple[SequenceMatcher, int, int]]] = {}  # group -> [(matcher, len, id)]
    next_id = 0
    for u in range(len(texts)):
        text = texts[u]
        if not isinstance(text, str):
            raise ValueError(f"similarity grouping needs text anchors, got {type(text).__name__}: {text!r}")
        clusters = reps.setdefault(int(groups[u]), [])
        for matcher, rep_len, cid in clusters:
            total = len(text) + rep_len
            if total and 2.0 * min(len(text), rep_len) / total < thresh:  # real_quick_ratio bound
                continue
            matcher.set_seq1(text)  # a = anchor, b = representative, as verl-agent
            if matcher.quick_ratio() >= thresh and matcher.ratio() >= thresh:
                out[u] = cid
                break
        else:
            clusters.append((SequenceMatcher(None, "", text), len(text), next_id))
            out[u] = next_id
            next_id += 1
    return out


@register("gigpo", references={"verl-agent": VERL_AGENT_GIGPO}, anchors=True)
def gigpo(
    table: StepTable,
    conv: Conventions,
    *,
    mode: str = "mean_std_norm",
    gamma: float = 0.95,
    step_advantage_w: float = 1.0,
    enable_similarity: bool = False,
    similarity_thresh: float = 0.95,
) -> np.ndarray:
    """A = A^E + ω·A^S (Eq. 8), one value per step row (S,)."""
    scale = check_mode(mode)
    a_episode = episode_advantage(table, conv, scale=scale)  # (S,) Eq. 3
    returns = step_returns(table, gamma)  # (S,) Eq. 5
    codes, n = anchor_groups(table, enable_similarity, similarity_thresh)  # Eq. 6
    a_step = group_zscore(
        returns,
        codes,
        n,
        ddof=conv.ddof_step,
        eps_sigma=conv.eps_sigma,
        eps_var=conv.eps_var,
        singleton=conv.step_singleton,
        scale=scale,
    )  # Eq. 7
    return a_episode + float(step_advantage_w) * a_step
