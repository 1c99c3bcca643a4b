"""`creditline ARGV` called in the test's own process, and what it printed: for the bad-input tests, which
make hundreds of calls (a subprocess each would cost seconds of imports)."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.cli import main


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.err.splitlines()


def cli(capsys, *argv: str) -> Outcome:
    """`creditline ARGV` in this process; an argparse exit (or code that called sys.exit) counts as its exit code."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse: `usage: ...` then exit 2
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)
