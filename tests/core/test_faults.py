"""Failpoints: the armed one kills its process; `CREDITLINE_FAULT_ONCE` lets only the first process die."""

import os
import signal
import subprocess
import sys

from creditline.faults import FAULT_ENV, ONCE_ENV
from creditline.liveness import ProcessId

HIT_TWICE = "from creditline.faults import failpoint; failpoint('x'); failpoint('x'); print('passed')"


def hit(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIT_TWICE], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_an_armed_failpoint_kills_every_process_that_reaches_it_without_once():
    for _ in range(2):
        assert hit({FAULT_ENV: "x:2"}).returncode == -signal.SIGKILL
    assert hit({FAULT_ENV: "x:3"}).stdout == "passed\n"  # the third hit never comes
    assert hit({FAULT_ENV: "y"}).stdout == "passed\n"


def test_once_kills_the_first_process_only_and_names_it_in_the_marker(tmp_path):
    marker = tmp_path / "fired"
    first = subprocess.Popen([sys.executable, "-c", HIT_TWICE], env={**os.environ, FAULT_ENV: "x:2",
                             ONCE_ENV: str(marker)}, stdout=subprocess.PIPE)  # fmt: skip
    first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL
    written = ProcessId.parse(marker.read_text())
    assert written.pid == first.pid and written.start_ticks > 0  # the process that was killed
    again = hit({FAULT_ENV: "x:2", ONCE_ENV: str(marker)})  # the retry's worker passes the failpoint
    assert again.returncode == 0 and again.stdout == "passed\n"
    assert ProcessId.parse(marker.read_text()) == written
