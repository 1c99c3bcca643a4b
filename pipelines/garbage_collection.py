"""The cycle collector's pace while a process runs rounds.

CPython frees an object when its last reference goes; the cycle collector is only for the objects that
reference each other. It runs generation by generation: the youngest after 700 net allocations of container
objects (lists, dicts, instances), the middle after 10 of those passes, and the oldest, every object the
process holds, after 10 of the middle ones once the objects promoted since the last full pass reach a
quarter of those already there.

A process that runs rounds in-process (`creditline run`, `creditline rescore`) holds ~750,000 such objects
(750,542 after five rounds of the default experiment: Dagster, SQLAlchemy, MLflow, pandas, torch,
transformers), and a round of the default experiment allocates enough to pass that test about every second
round. Each full pass walks all of them: ~0.4 s. Measured with `gc.callbacks` around rounds 2–5 of `creditline
run` (default experiment, AMD EPYC, 2026-11-28), the collector took ~270 ms a round at Python's thresholds
(700, 10, 10): ~210 ms of it in full passes, 37 ms in 206 youngest-generation passes, 24 ms in 19 middle ones.

At a youngest threshold of 10,000 the middle and oldest passes come 14 times less often. In two runs of the
same rounds: 50 ms a round with no full pass, and 180 ms with one (in round 2, which round 1's new objects
tipped over): a round 68 ms in 12.5 youngest passes and 14 ms in 1.25 middle ones, and the full pass 393 ms.
From then on a full pass can come at most every ~8 rounds of this size. What reference counting frees is
freed at once as before; cyclic garbage waits longer, up to the next pass over the generation it reached.
What that does to peak memory was not measured.

Most of those objects live as long as the process (modules, classes, Dagster's definitions), yet every full
pass walks them again. So a process that runs a second round first collects every generation once and then
freezes the survivors (`gc.freeze`): the collector never walks them again, and its full passes walk only what
came after. Measured the same way (rounds 2–8 of `creditline run`, one process, 2026-11-29): the one
collection took 0.41 s and froze 747,220 objects; in the seven rounds after it no full pass came, and the
youngest and middle passes took 66 ms a round. At Python's own pace without the freeze a full pass costs ~0.4
s and comes every ~5–8 rounds of this size.

A frozen object that later becomes cyclic garbage is never freed (the collector no longer looks at it),
which is why the collection comes first: what is garbage then is freed then. Over those seven rounds 408
frozen objects became garbage (tuples, dicts, SQLAlchemy statement parts; no tensor): the freeze's one-time
cost. Freezing stops only the cycle search: a frozen object whose last reference goes is freed at once, as
before. A process that runs one round (`creditline run` resuming its last round; a step process of the
multiprocess executor runs none) never collects nor freezes; nor does one whose collection is off.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

YOUNGEST_THRESHOLD = 10_000
"""Net container allocations between two passes over the youngest generation while rounds run."""


_ROUNDS_RUN: dict[int, int] = {}
"""pid -> the `rounds_pace` blocks this process has left (keyed by pid: a forked child starts with none)."""


@contextlib.contextmanager
def rounds_pace() -> Iterator[None]:
    """Collect cycles at the rounds' pace (`YOUNGEST_THRESHOLD`, never more often than the process already
    does; a threshold of 0, collection off, stays off) inside the block; the process's own thresholds after
    it. A process's second block starts with `_settle_long_lived`."""
    pid = os.getpid()
    if _ROUNDS_RUN.get(pid, 0) == 1:
        _settle_long_lived()
    before = gc.get_threshold()
    youngest = before[0] and max(before[0], YOUNGEST_THRESHOLD)
    gc.set_threshold(youngest, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        _ROUNDS_RUN[pid] = _ROUNDS_RUN.get(pid, 0) + 1


def _settle_long_lived() -> None:
    """Collect every generation, then freeze what survived, so that no later pass walks it (the module's
    docstring); nothing while collection is off."""
    if gc.isenabled() and gc.get_threshold()[0] != 0:
        gc.collect()
        gc.freeze()
