"""Which tasks a round trains on and which are held out for evaluation.

Training task ids are drawn from [0, EVAL_TASK_OFFSET) by a generator seeded with (experiment seed,
round); evaluation uses the ids from EVAL_TASK_OFFSET upwards, so the two never share a task id.
(A small maze has ~14k distinct layouts, so a held-out id can still produce a layout that some
training id also produced; the ids, and the stream of layouts, are disjoint by construction.)
"""

from __future__ import annotations

import numpy as np

EVAL_TASK_OFFSET = 1_000_000


def training_task_ids(seed: int, round_: int, count: int) -> list[int]:
    rng = np.random.default_rng([seed, round_])
    return sorted(int(t) for t in rng.choice(EVAL_TASK_OFFSET, size=count, replace=False))


def eval_task_ids(count: int) -> list[int]:
    return list(range(EVAL_TASK_OFFSET, EVAL_TASK_OFFSET + count))
