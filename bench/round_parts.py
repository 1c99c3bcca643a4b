"""Where a round's time goes inside the Dagster run: a wall clock around the functions of each part.

`PartClock` wraps the functions named in `PARTS` (the round's core work, the lineage catalog, MLflow, the
tables read and written, their schema checks, hashing, the charts) wherever this process's own modules hold
them (`assets`, `creditline`, `pipelines`, `resources`, `schemas`), and charges each call's wall time to its
part while `counting` is on, in the thread that turned it on. A call inside another part's call (a lineage
session inside MLflow's `round_run`) is charged to its own part and taken out of the caller's: every part's
figure is its time outside the others. The wrappers call the real functions; nothing else changes.

It exists so the overhead bench can give the core work timed inside the round beside its replay, and split
the rest by part, in the same run (earlier sessions did it by hand, with wrappers of their own).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import importlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

CORE = "core work"

PARTS: dict[str, tuple[str, ...]] = {
    CORE: (
        "creditline.round:generate_rollouts",
        "creditline.round:score_rollouts",
        "creditline.credit.round_advantages:step_advantages",
        "creditline.round:train_policy",
        "creditline.round:evaluate_policy",
        "creditline.policy.models:load_policy",
        "creditline.policy.models:load_optimizer_state",  # in the replay's training lap too
        "creditline.policy.models:save_policy",
    ),
    "lineage catalog": (
        "creditline.store.lineage:LineageStore.session",
        "creditline.store.lineage:LineageStore.transaction",
    ),
    "MLflow": tuple(
        f"resources.tracker:TrackerResource.{name}"
        for name in ("round_run", "experiment_run", "log", "logged_keys", "logged_at_step", "close", "status")
    ),
    "tables read": ("creditline.store.files:read_parquet",),
    "tables written": (
        "creditline.store.files:write_parquet_atomic",
        "creditline.store.files:write_bytes_atomic",
    ),
    "schema checks": ("schemas.validate:validate",),
    "hashing": (
        "creditline.store.lineage:check_on_disk",
        "creditline.store.lineage:hashed_folder",
        "creditline.lineage_chain:verify_checkpoint",
    ),
    "charts": ("creditline.credit.credit_plot:credit_picture", "creditline.plots:success_by_round"),
}
"""part: the functions ("module:attribute", "module:Class.method") whose calls are charged to it."""

CONTEXT_MANAGERS = {"creditline.store.lineage:LineageStore.session"}
"""The functions that return a context manager: their time is the block's, from entering to leaving."""

OURS = ("assets", "creditline", "pipelines", "resources", "schemas")
"""The packages whose modules' references to a wrapped function are replaced."""


class PartClock:
    """Seconds and calls per part (`seconds`, `calls`) of the calls made while `counting` is on, or inside a
    call of `gate` ("module:function", e.g. the function that runs a round's Dagster job)."""

    def __init__(self, parts: dict[str, tuple[str, ...]] = PARTS, gate: str | None = None):
        self.parts, self.gate = parts, gate
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        """Calls not made inside another call of the same part (a session's transactions are the session's)."""
        self.functions: collections.Counter[str] = collections.Counter()
        """Seconds per wrapped function ("module:attribute"), each outside the others."""
        self._thread: int | None = None
        self._stack: list[_OpenCall] = []
        self._undo: list[tuple[object, str, object]] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[PartClock]:
        """The wrappers in place for the block (and the originals back after it)."""
        for part, targets in self.parts.items():
            for target in targets:
                self._wrap(target, functools.partial(self._timed, part, target))
        if self.gate is not None:
            self._wrap(self.gate, self._counted)
        try:
            yield self
        finally:
            for owner, name, original in reversed(self._undo):
                setattr(owner, name, original)
            self._undo.clear()

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Charge the calls this thread makes inside the block."""
        self._thread = threading.get_ident()
        try:
            yield
        finally:
            self._thread = None

    def _wrap(self, target: str, wrapper: Callable[[Callable], Callable]) -> None:
        """Replace `target` by `wrapper(target)` on its owner and in our modules that imported it by name."""
        module_name, _, path = target.partition(":")
        owner: object = importlib.import_module(module_name)
        *outer, name = path.split(".")
        for attribute in outer:
            owner = getattr(owner, attribute)
        original = getattr(owner, name)
        timed = wrapper(original)
        self._replace(owner, name, original, timed)
        if not outer:  # a module's function: also where other modules imported it by name
            for module in list(sys.modules.values()):
                if module is not owner and module.__name__.split(".")[0] in OURS:
                    for attribute, value in list(vars(module).items()):
                        if value is original:
                            self._replace(module, attribute, original, timed)

    def _replace(self, owner: object, name: str, original: object, timed: object) -> None:
        self._undo.append((owner, name, original))
        setattr(owner, name, timed)

    def _counted(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def counted(*args, **kwargs):
            with self.counting():
                return original(*args, **kwargs)

        return counted

    def _timed(self, part: str, target: str, original: Callable) -> Callable:
        if target in CONTEXT_MANAGERS:
            return self._timed_block(part, target, original)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            if threading.get_ident() != self._thread:
                return original(*args, **kwargs)
            self._open(part)
            try:
                return original(*args, **kwargs)
            finally:
                self._close(target)

        return timed

    def _timed_block(self, part: str, target: str, original: Callable) -> Callable:
        @contextlib.contextmanager
        @functools.wraps(original)
        def timed(*args, **kwargs):
            if threading.get_ident() != self._thread:
                with original(*args, **kwargs) as value:
                    yield value
                return
            self._open(part)
            try:
                with original(*args, **kwargs) as value:
                    yield value
            finally:
                self._close(target)

        return timed

    def _open(self, part: str) -> None:
        self._stack.append(_OpenCall(part, time.perf_counter()))

    def _close(self, target: str) -> None:
        call = self._stack.pop()
        elapsed = time.perf_counter() - call.start
        self.seconds[call.part] += elapsed - call.nested
        self.functions[target] += elapsed - call.nested
        if not any(outer.part == call.part for outer in self._stack):
            self.calls[call.part] += 1
        if self._stack:
            self._stack[-1].nested += elapsed


@dataclasses.dataclass
class _OpenCall:
    """A wrapped call not yet returned: its part, when it began, and the time of the wrapped calls inside it."""

    part: str
    start: float
    nested: float = 0.0
