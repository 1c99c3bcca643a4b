"""The fault tests print their matrices (cases × outcome) at the end of the session."""

from __future__ import annotations

import signal

import pytest


@pytest.fixture(autouse=True)
def _restore_sigterm():
    """`main()` (called in-process by the bad-input tests) installs a SIGTERM handler; put the previous one back."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def preloaded_cli():
    """Forks the `creditline` processes the fault tests kill (`tests/faults/preloaded.py`)."""
    from tests.faults.preloaded import PreloadedCli

    cli = PreloadedCli()
    yield cli
    cli.close()


_KILL_ROWS: list[tuple[str, str, int, int, str]] = []


@pytest.fixture(scope="session")
def kill_matrix_rows() -> list[tuple[str, str, int, int, str]]:
    return _KILL_ROWS


ROOT_FAULT_FILES = ("test_two_experiments.py", "test_first_start.py", "test_dead_leftovers.py",
                    "test_catalog_faults.py")  # fmt: skip
"""The faults of a shared data root beyond a single kill (issue 24), printed as one matrix."""


def _root_fault_rows(terminalreporter) -> list[tuple[str, str]]:
    rows = []
    for outcome in ("passed", "failed", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            if report.when == "call" or outcome == "error":
                if any(f"faults/{name}::" in nodeid for name in ROOT_FAULT_FILES):
                    rows.append((nodeid.split("faults/", 1)[1], outcome))
    return sorted(rows)


def pytest_terminal_summary(terminalreporter) -> None:
    write = terminalreporter.write_line
    if rows := _root_fault_rows(terminalreporter):
        write("")
        write("shared-root faults: two experiments, first starts, leftovers of dead processes, the catalog")
        for nodeid, outcome in rows:
            write(f"  {nodeid:<110} {outcome}")
    if not _KILL_ROWS:
        return
    write("")
    write("kill matrix: SIGKILL at a failpoint, then a plain `creditline run`")
    write(f"  {'case':<58} {'failpoint':<30} {'exit':>5} {'temp':>5}  after re-run")
    for case, fault, rc, temp, outcome in _KILL_ROWS:
        write(f"  {case:<58} {fault:<30} {rc:>5} {temp:>5}  {outcome}")
    recovered = sum(1 for row in _KILL_ROWS if row[4] == "recovered")
    write(
        f"  {len(_KILL_ROWS)} kills, {recovered} recovered completely by a plain re-run "
        "(verify clean, no temp file, no round skipped, same checkpoints, killed attempt FAILED)"
    )
