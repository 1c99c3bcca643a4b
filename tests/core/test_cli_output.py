"""What the CLI prints, as a user's shell meets it: a closed pipe, the descriptions of its verbs."""

import subprocess
import sys
import time
from pathlib import Path

from creditline.config import ExperimentConfig
from creditline.store import EvaluationRecord, LineageStore

ROOT = Path(__file__).resolve().parents[2]


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    """`creditline report --json | head -1`: the pipe closes after the first line; no traceback, no "unexpected
    BrokenPipeError", the exit status of a process ended by SIGPIPE."""
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.register_experiment("piped", ExperimentConfig(name="piped").to_dict())
    with store.session():
        for round_ in range(800):  # ~264 bytes each as JSON: 3.2 times a pipe's 64 KiB buffer
            store.record_evaluation(EvaluationRecord("piped", round_, "0" * 64, 0.5, 0.1, 7.0, 0.0, 32))
    command = [sys.executable, "-m", "pipelines.cli", "--data-root", str(tmp_path), "report", "--experiment",
               "piped", "--json"]  # fmt: skip
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout.readline().strip() == b"["
        process.stdout.close()
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=60) == 141
    assert stderr == ""


def test_every_command_and_flag_says_what_it_is():
    """`creditline CMD --help` has a description, and every option and argument a help line."""
    import argparse

    from pipelines.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert commands.choices
    for name, command in commands.choices.items():
        assert command.description, name
        for action in command._actions:
            if action.help is argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            if action.default is argparse.SUPPRESS:  # --data-root, --debug: described on the top level
                continue
            assert action.help, f"creditline {name} {'/'.join(action.option_strings) or action.dest}"
    assert all(a.help for a in parser._actions if not isinstance(a, argparse._SubParsersAction))


QUERY_INTERRUPTED = """
import sys
import duckdb
import pipelines.cli as cli

def report(args):  # a command whose main thread is inside a DuckDB query when the signal lands
    con = duckdb.connect()
    print("querying", flush=True)
    con.execute("SELECT sum(hash(range)) FROM range(500000000)").fetchall()  # 2-4 s on this machine
    return 0

cli.cmd_report = report
sys.exit(cli.main(sys.argv[1:]))
"""


INTERRUPTED_IN_A_FINALIZER = """
import sys, time
import pipelines.cli as cli

class Slow:
    def __del__(self):  # a finalizer running when the signal lands: its handler raises in here
        print("finalizing", flush=True)
        time.sleep(3)

def report(args):
    Slow()  # collected at once
    print("finalized", flush=True)
    time.sleep(3)  # the interrupt, delivered again, ends this
    print("not interrupted", flush=True)
    return 0

cli.cmd_report = report
sys.exit(cli.main(sys.argv[1:]))
"""


def test_sigterm_while_a_finalizer_runs_still_ends_the_command(tmp_path):
    """A signal whose handler runs inside `__del__` (or a garbage-collector callback) raises where Python
    cannot propagate it; the CLI delivers it again to the main thread, so the command still ends with its one
    interrupt line and 130 instead of going on (a SIGTERM lost this way let a killed sweep run to its end)."""
    import signal

    from pipelines.cli import INTERRUPTED

    command = [sys.executable, "-c", INTERRUPTED_IN_A_FINALIZER, "--data-root", str(tmp_path), "report"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "finalizing\n"
        time.sleep(0.5)  # inside the finalizer's sleep
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert "not interrupted" not in out
    assert (process.returncode, err.splitlines()) == (130, [INTERRUPTED])


def test_sigterm_inside_a_duckdb_query_ends_as_an_interrupt(tmp_path):
    """DuckDB turns the KeyboardInterrupt that SIGTERM raises mid-query into `RuntimeError('Query interrupted')`;
    the CLI still ends with its one interrupt line and 130, not "unexpected RuntimeError" and 1."""
    import signal

    from pipelines.cli import INTERRUPTED

    command = [sys.executable, "-c", QUERY_INTERRUPTED, "--data-root", str(tmp_path), "report"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "querying\n"
        time.sleep(0.5)  # into the query (DuckDB finishes an interrupted query before the process can exit)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert (process.returncode, err.splitlines()) == (130, [INTERRUPTED])
