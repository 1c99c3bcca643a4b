"""Progress inside a round, for a person watching a terminal.

The round's long loops report what they have done: `play` after each turn (episodes ended of the call's
episodes), the trainers after each update. The stage protocol names the work around its compute
(`with progress.stage("rollouts"):`). A sink draws it: `TerminalLine`, which `creditline run` installs
when stderr is a terminal and `--quiet` is not given, rewrites one line:

    round 2  rollouts    96/192 episodes   24.1/s   ~4 s left

Without a sink (Dagster's own runs, the benchmarks, the tests, a piped `creditline run`) a report costs
one global lookup and draws nothing. Reports come from the process that runs the stage: a deployment
whose executor runs steps in other processes shows none.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Protocol, TextIO


class Sink(Protocol):
    def begin(self, name: str) -> None: ...
    def update(self, name: str, done: int, total: int | None, unit: str) -> None: ...
    def end(self, name: str) -> None: ...


_sink: Sink | None = None
_names: list[str] = []


def install(sink: Sink | None) -> Sink | None:
    """Make `sink` draw every report from now on (None: draw nothing); returns the one it replaces."""
    global _sink
    previous, _sink = _sink, sink
    return previous


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """The block whose reports are `name`'s (the innermost block names them)."""
    _names.append(name)
    if _sink is not None:
        _sink.begin(name)
    try:
        yield
    finally:
        _names.pop()
        if _sink is not None:
            _sink.end(name)


def in_stage() -> bool:
    """True while a stage's compute runs in this process (any thread may ask)."""
    return bool(_names)


def update(done: int, total: int | None, unit: str) -> None:
    """Report `done` of `total` `unit`s (total None: not known ahead) of the current stage's work."""
    if _sink is not None:
        _sink.update(_names[-1] if _names else "", done, total, unit)


class TerminalLine:
    """One line on a terminal, rewritten at most every `every_s` seconds: the stage, how much of its work is
    done, the rate since the stage began and, with a total, the time left at that rate."""

    def __init__(self, prefix: str = "", out: TextIO | None = None, every_s: float = 0.25):
        self.prefix, self.out, self.every_s = prefix, out or sys.stderr, every_s
        self._started: dict[str, float] = {}
        self._drawn = 0.0
        self._width = 0

    def begin(self, name: str) -> None:
        self._started[name] = time.monotonic()

    def update(self, name: str, done: int, total: int | None, unit: str) -> None:
        now = time.monotonic()
        if now - self._drawn < self.every_s and (total is None or done < total):
            return
        self._drawn = now
        elapsed = now - self._started.get(name, now)
        rate = done / elapsed if elapsed > 0 else 0.0
        line = f"{self.prefix}{name:<12} {done:>6}" + (f"/{total}" if total is not None else "") + f" {unit}"
        if rate > 0:
            line += f"  {rate:7.1f}/s"
            if total is not None and done < total:
                line += f"  ~{(total - done) / rate:.0f} s left"
        self._draw(line)

    def end(self, name: str) -> None:
        self._started.pop(name, None)
        self._draw("")

    def _draw(self, line: str) -> None:
        self.out.write("\r" + line.ljust(self._width) + ("\r" if not line else ""))
        self.out.flush()
        self._width = len(line)
