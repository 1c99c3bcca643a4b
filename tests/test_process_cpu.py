"""scripts/process_cpu.py: a command's CPU by kind of process, the processes it left behind included."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from process_cpu import main, process_kind  # noqa: E402


@pytest.mark.parametrize(
    ("argv", "comm", "kind"),
    [
        (["/v/bin/python", "-m", "pytest", "-q"], "python", "python -m pytest"),
        (
            ["/v/bin/python3.11", "-u", "-X", "importtime", "-m", "pipelines.cli", "run"],
            "python",
            "python -m pipelines.cli",
        ),
        (
            ["/v/bin/python", "-B", "-c", "from multiprocessing.spawn import spawn_main;  spawn_main()"],
            "python",
            "python -c from multiprocessing.spawn import spawn_main; spawn_main()",
        ),
        (
            ["/v/bin/python", "-Xfrozen_modules=off", "/repo/bench/learning.py", "--quick"],
            "python",
            "python learning.py",
        ),
        (["/usr/lib/postgresql/15/bin/postgres", "-D", "/tmp/x"], "postgres", "postgres"),
        (["                    "], "VLLM::EngineCor", "[VLLM::EngineCor]"),  # a process that set its title
    ],
)
def test_a_process_is_named_by_what_it_runs(argv, comm, kind):
    assert process_kind(argv, comm) == kind


def test_a_process_left_running_by_the_command_is_counted_where_waiting_counts_nothing(tmp_path, capsys):
    # the command starts a busy process in a session of its own and ends 3 s later, never waiting for it
    busy = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass\n"
    (tmp_path / "busy_left_behind.py").write_text(busy)
    starter = textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, {str(tmp_path / "busy_left_behind.py")!r}], start_new_session=True)
        time.sleep(3)
    """)
    assert main(["--interval", "0.2", "--", sys.executable, "-c", starter]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(line for line in out if line.endswith("python busy_left_behind.py"))
    assert 1.2 <= float(row.split()[0]) <= 2.5  # its 1.5 s, to the last reading (0.2 s)
    # and /usr/bin/time, which counts the processes waited for, would see none of it
    assert "exit 0" in out[-1] and "processes waited for: 0 s" in out[-1]


def test_the_command_s_exit_status_is_returned():
    assert main(["--interval", "0.1", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "process_cpu.py")],
                          capture_output=True, text=True).returncode == 2  # fmt: skip
