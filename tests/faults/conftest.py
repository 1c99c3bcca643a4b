"""The fault tests print their matrices (cases × outcome) at the end of the session."""

from __future__ import annotations

import pytest

_KILL_ROWS: list[tuple[str, str, int, int, str]] = []


@pytest.fixture(scope="session")
def kill_matrix_rows() -> list[tuple[str, str, int, int, str]]:
    return _KILL_ROWS


def pytest_terminal_summary(terminalreporter) -> None:
    if not _KILL_ROWS:
        return
    write = terminalreporter.write_line
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
