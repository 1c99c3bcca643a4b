"""Progress inside a round: on a terminal `creditline run` rewrites one line per stage (what is done, the rate,
the time left); with `--quiet`, or when stderr is not a terminal, nothing is drawn."""

import io
import threading
from pathlib import Path

import pytest

from creditline import progress
from tests.e2e.cli import DATA_ROOT, in_process

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"


def test_a_round_on_a_terminal_shows_its_stages_and_a_quiet_one_shows_nothing(tmp_path):
    run = ["run", "--experiment", "progress", "--config", str(TINY)]
    env = {DATA_ROOT: str(tmp_path)}
    shown = in_process([*run, "--rounds", "1"], env, terminal=True)
    assert shown.returncode == 0, shown.stderr
    lines = [line.split() for line in shown.stderr.split("\r")]
    # tiny_experiment.toml: 4 tasks × 4 samples = 16 episodes a round, 2 updates, 8 held-out episodes
    for stage, done in [
        ("rollouts", "16/16 episodes"),
        ("checkpoint", "2/2 updates"),
        ("evaluation", "8/8 episodes"),
    ]:
        assert ["round", "1", stage, *done.split()] in [line[:5] for line in lines], (stage, lines)
    assert shown.stdout.count("round   1/1") == 1  # the round's own line, on stdout as before

    quiet = in_process([*run, "--rounds", "2", "--quiet"], env, terminal=True)
    assert quiet.returncode == 0, quiet.stderr
    assert "\r" not in quiet.stderr and "episodes" not in quiet.stderr
    assert progress.install(None) is None  # the command put the sink back


def test_the_line_says_the_rate_and_the_time_left(monkeypatch):
    clock = iter([0.0, 2.0, 4.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    previous = progress.install(progress.TerminalLine("round 2  ", out, every_s=0.0))
    try:
        with progress.stage("rollouts"):
            progress.update(24, 96, "episodes")  # at 2 s: 12/s, 72 left → ~6 s
            progress.update(96, 96, "episodes")  # at 4 s: done
    finally:
        progress.install(previous)
    drawn = [line.rstrip() for line in out.getvalue().split("\r") if line.strip()]
    assert drawn == [
        "round 2  rollouts         24/96 episodes     12.0/s  ~6 s left",
        "round 2  rollouts         96/96 episodes     24.0/s",
    ]


def test_without_a_sink_a_report_draws_nothing(capsys):
    assert progress.install(None) is None
    with progress.stage("rollouts"):
        progress.update(1, 2, "episodes")
    assert capsys.readouterr() == ("", "")


def test_another_thread_sees_whether_a_stage_computes():
    # the pool-slot watcher asks Dagster whether the run waits for a slot only outside a stage's compute
    seen = []

    def ask():
        seen.append(progress.in_stage())

    def from_a_thread():
        thread = threading.Thread(target=ask)
        thread.start()
        thread.join()

    from_a_thread()
    with progress.stage("rollouts"):
        from_a_thread()
        with progress.stage("inner"):
            from_a_thread()
        from_a_thread()
    from_a_thread()
    assert seen == [False, True, True, True, False]
