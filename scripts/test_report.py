"""How each pytest of `make test` ended, as the last lines of its output (CI shows only the end).

For each stream NAME (`rest`, `faults`, `vllm`, `late`, `dev`) the Makefile leaves, in the project root:
- `.pytest-NAME.exit`: the exit status of its pytest (124: stopped at the stream's limit by `timeout`; 137:
  killed 60 s after that);
- `.pytest-NAME.xml`: its JUnit report (none when it was stopped before its end, or did not start);
- `.pytest-NAME.stacks`: every thread's stack, written when it was stopped (tests/conftest.py).

Prints the stacks of the streams that were stopped, then a line per stream (tests, failures, errors, skipped,
seconds, exit status) and a line per failed test; exits 1 if any stream did not exit 0.

    python scripts/test_report.py rest faults vllm late dev
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

STOPPED = {"124", "137"}
"""`timeout`'s exit status when it stopped the command at its limit, and when it then had to kill it."""


def exit_status(name: str, root: Path) -> str:
    exit_file = root / f".pytest-{name}.exit"
    return exit_file.read_text().strip() if exit_file.is_file() else "none (it did not end)"


def stream_lines(name: str, root: Path) -> tuple[list[str], bool]:
    """The lines that say how stream `name` ended, and whether it passed."""
    status, report = exit_status(name, root), root / f".pytest-{name}.xml"
    if not report.is_file():
        return [f"{name}: no report; exit {status}"], False
    try:
        suite = ET.parse(report).getroot().find("testsuite")
    except ET.ParseError as error:
        return [f"{name}: unreadable report {report.name} ({error}); exit {status}"], False
    if suite is None:
        return [f"{name}: no testsuite in {report.name}; exit {status}"], False
    counts = {key: suite.get(key) for key in ("tests", "failures", "errors", "skipped")}
    lines = [
        f"{name}: {counts['tests']} tests, {counts['failures']} failed, {counts['errors']} errors, "
        f"{counts['skipped']} skipped in {float(suite.get('time')):.0f} s; exit {status}"
    ]
    for case in suite.iter("testcase"):
        for outcome in ("failure", "error"):
            if case.find(outcome) is not None:
                lines.append(f"{name}: {outcome} {case.get('classname')}::{case.get('name')}")
    return lines, status == "0"


def main(names: list[str], root: Path = Path(".")) -> int:
    for name in names:
        stacks = root / f".pytest-{name}.stacks"
        if exit_status(name, root) in STOPPED and stacks.is_file() and stacks.stat().st_size:
            print(f"== {name}: stopped at its limit; every thread's stack:\n{stacks.read_text()}")
    print("== how each pytest ended:")
    passed = True
    for name in names:
        lines, ok = stream_lines(name, root)
        print("\n".join(lines))
        passed &= ok
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
