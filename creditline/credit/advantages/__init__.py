"""Step-level advantage estimators for multi-turn LLM-agent RL (pure numpy).

    compute(estimator, steps, **params) -> (S,) float64, aligned with the rows of ``steps``

``steps`` is a long step table (pandas DataFrame or pyarrow Table), one row per agent step:
``group_id, episode_id, step_idx (0-based, contiguous), anchor_key, step_reward,
episode_reward`` (+ optional ``completion_length``). Row order does not matter.

Registered estimators (``available()`` lists their parameters and defaults):

* ``grpo`` (``norm_by_std=False`` = Dr.GRPO), ``rloo``, ``reinforce_pp_baseline`` — outcome level
  (:mod:`.outcome`, verl ``core_algos.py`` @b178a3c).
* ``gigpo`` — episode + anchor-state step advantage (:mod:`.gigpo`, verl-agent @20bd331).
* ``hgpo`` — hierarchy of history-consistent groups (:mod:`.hgpo`, verl-agent @20bd331).
* ``turn_group`` — per-(group, turn index) normalisation: A²TGPO or MatchTIR (:mod:`.turn_group`).
* ``igpo`` — information-gain turn rewards from the policy's belief in a gold answer (:mod:`.igpo`).
* ``mc_branch`` (Q − V with Monte-Carlo values, VinePPO) and ``spo_tree`` (SPO-tree / TreeRL segment
  advantage) — from branching rollouts' continuations (:mod:`.branch`, ``creditline.rollout.branching``).

Each accepts ``conventions="creditline"`` (the project default), a :class:`Conventions`, or a
reference preset named after the code it reproduces (``presets(name)`` lists them):

* ``"verl"`` — verl ``core_algos.py`` @b178a3c (grpo, rloo, reinforce_pp_baseline): statistics
  over one value per episode, since verl treats a multi-turn episode as one response;
* ``"verl-agent"`` — verl-agent @20bd331 (grpo, rloo, reinforce_pp_baseline, gigpo, hgpo):
  episode statistics over all step rows (``compute_mean_std_cross_steps=True``);
* ``"igpo-fork"`` / ``"matchtir"`` — turn_group's A²TGPO copy in the IGPO fork @745078b / MatchTIR.

A preset the estimator has no reference for raises ValueError naming the valid ones; see
:mod:`.conventions` and docs/advantages.md.

Not implemented: ProRL's "stepwise reward centering + position-specific advantage estimation".
Its formula is not available in any public source we could find (the "ProRL" hits are NVIDIA's
Prolonged RL and ProRL Agent, neither a step-level estimator); we do not implement it from a
description.

Helpers: ``discounted_returns`` (GiGPO Eq. 5, O(S)), ``completion_advantages`` /
``completion_advantages_flat`` (step scalar → one value per completion token, verifiers PR #941),
``fill_preset`` (verifiers fill-if-None; "preset" there means an environment-set advantage, not
a conventions preset), ``params_hash`` (lineage key of estimator + params).
"""

from . import branch as _branch  # noqa: F401  (registers estimators)
from . import gigpo as _gigpo  # noqa: F401
from . import hgpo as _hgpo  # noqa: F401
from . import igpo as _igpo  # noqa: F401
from . import model_reward as _model_reward  # noqa: F401
from . import outcome as _outcome  # noqa: F401
from . import turn_group as _turn_group  # noqa: F401
from .conventions import CREDITLINE, Conventions
from .registry import available, compute, input_columns, params_hash, presets, register
from .returns import discounted_returns
from .table import REQUIRED_COLUMNS, AdvantageInputError
from .tokens import completion_advantages, completion_advantages_flat, fill_preset

__all__ = [
    "CREDITLINE",
    "REQUIRED_COLUMNS",
    "AdvantageInputError",
    "Conventions",
    "available",
    "completion_advantages",
    "completion_advantages_flat",
    "compute",
    "discounted_returns",
    "fill_preset",
    "input_columns",
    "params_hash",
    "presets",
    "register",
]
