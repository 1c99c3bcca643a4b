"""Failpoints: the armed one kills its process; `CREDITLINE_FAULT_ONCE` lets only the first process die; a
stop waits for the process's turn on the catalog."""

import os
import signal
import subprocess
import sys
import threading
import time

from creditline.faults import FAULT_ENV, ONCE_ENV, SIGNAL_ENV
from creditline.liveness import ProcessId, stat_fields

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


STOP_BESIDE_A_HOLDER = """
import sys, threading, time
from creditline.faults import failpoint
from creditline.store.connection import CATALOG_TURN

held = threading.Event()

def holder():  # another thread inside a catalog transaction, as the experiment lease's heartbeat may be
    with CATALOG_TURN:
        held.set()
        print("held", flush=True)
        time.sleep(1.5)
        print("released", flush=True)

threading.Thread(target=holder).start()
held.wait()
failpoint("x")
print("continued", flush=True)
"""


def test_a_stop_waits_until_no_other_thread_holds_the_catalog():
    """SIGSTOP at a failpoint is never taken while another thread of the process has the catalog attached
    (a stopped process would keep every other process locked out of it until continued)."""
    env = {**os.environ, FAULT_ENV: "x", SIGNAL_ENV: "STOP"}
    process = subprocess.Popen([sys.executable, "-c", STOP_BESIDE_A_HOLDER], env=env, stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while (state := stat_fields(process.pid)[0]) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state == "T", f"never stopped: {lines}"
        time.sleep(0.2)  # what it printed before it stopped has reached the reader
        assert lines == ["held\n", "released\n"]  # the holder had left the catalog when the process stopped
        process.send_signal(signal.SIGCONT)
        assert process.wait(timeout=60) == 0
        reader.join(timeout=10)
        assert lines[-1] == "continued\n"
    finally:
        process.kill()
