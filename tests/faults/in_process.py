"""`creditline ARGV` called in the test's own process, and what it printed: for the bad-input tests, which
make hundreds of calls (a subprocess each would cost seconds of imports). The call is `tests.e2e.cli.in_process`."""

from __future__ import annotations

from dataclasses import dataclass

from tests.e2e.cli import in_process


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.err.splitlines()


def cli(*argv: str) -> Outcome:
    """`creditline ARGV` in this process; an argparse exit (or code that called sys.exit) counts as its exit code."""
    result = in_process(list(argv))
    return Outcome(result.returncode, result.stdout, result.stderr)
