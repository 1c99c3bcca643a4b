"""scripts/process_cpu.py: a command's CPU by kind of process, the processes it left behind included."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "process_cpu.py"
# loaded from its file: scripts/ on sys.path would make scripts/vllm/ importable as `vllm` for the other tests
_spec = importlib.util.spec_from_file_location("process_cpu", SCRIPT)
process_cpu = sys.modules["process_cpu"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(process_cpu)
main, process_kind = process_cpu.main, process_cpu.process_kind


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
    # the command starts a busy process in a session of its own and ends 3 s later, never waiting for it; the
    # busy process retitles itself, as vLLM's engine processes do
    busy = textwrap.dedent("""
        import time
        time.sleep(0.3)
        with open("/proc/self/comm", "w") as comm:
            comm.write("Busy::Renamed")
        end = time.process_time() + 1.5
        while time.process_time() < end:
            pass
    """)
    (tmp_path / "busy_left_behind.py").write_text(busy)
    starter = textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, {str(tmp_path / "busy_left_behind.py")!r}], start_new_session=True)
        time.sleep(3)
    """)
    spin = "import time\nend = time.process_time() + 1\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)  # this process has waited for 1 s of CPU before
    assert main(["--interval", "0.2", "--", sys.executable, "-c", starter]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(line for line in out if line.endswith("[Busy::Renamed]"))
    assert 1.2 <= float(row.split()[0]) <= 2.5  # its 1.5 s, to the last reading (0.2 s)
    # and /usr/bin/time, which counts the processes waited for, would see none of it
    assert "exit 0" in out[-1] and "processes waited for: 0 s" in out[-1]


def test_the_command_s_exit_status_is_returned():
    assert main(["--interval", "0.1", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert subprocess.run([sys.executable, str(SCRIPT)],
                          capture_output=True, text=True).returncode == 2  # fmt: skip
