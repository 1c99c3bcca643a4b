"""Where a process's vLLM engines put their IPC sockets (`vllm_engine._own_ipc_folder`; no vLLM needed): a
folder of the process's own, removed when it ends, whether it exits as a program or ends as a multiprocessing
child (Dagster's multiprocess executor runs steps so, without `atexit`), and only after its daemonic children
(vLLM's engine processes) have been terminated and joined: they shut down with their sockets' folder still
there. A path the user set is kept; a plain fork that exits does not remove its parent's folder. The vLLM tests
check a real engine's sockets (tests/vllm_engine/test_round.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SCRIPT = """
import json, multiprocessing, os, sys
from creditline.engines import vllm_engine

def child(queue):
    vllm_engine._own_ipc_folder()
    queue.put(os.environ.get("VLLM_RPC_BASE_PATH"))

if __name__ == "__main__":
    vllm_engine._own_ipc_folder()
    mine = os.environ.get("VLLM_RPC_BASE_PATH")
    vllm_engine._own_ipc_folder()  # a second engine: the same folder
    seen = {"mine": mine, "again": os.environ.get("VLLM_RPC_BASE_PATH")}
    for method in ("forkserver", "spawn"):
        context = multiprocessing.get_context(method)
        queue = context.Queue()
        process = context.Process(target=child, args=(queue,))
        process.start()
        seen[method] = queue.get(timeout=60)
        process.join(timeout=60)
    pid = os.fork()
    if pid == 0:  # a plain fork that exits as a program (its finalizers run): its parent's folder stays
        sys.exit(0)
    os.waitpid(pid, 0)
    seen["mine exists after the fork"] = mine is not None and os.path.isdir(mine)
    print(json.dumps(seen))
"""


@pytest.fixture
def temporary(tmp_path):
    """A temporary folder with a short path, as /tmp's are (a socket's may have at most 107 characters)."""
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


def _run(tmp_path: Path, temporary: Path, **env: str) -> dict:
    """SCRIPT's findings, run as a program (a file: spawned children import their target from it) with the
    temporary folder `temporary`."""
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(tmp_path / "script.py")], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TMPDIR": str(temporary), **env})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_each_process_has_its_own_folder_and_removes_it_as_it_ends(tmp_path, temporary):
    seen = _run(tmp_path, temporary)
    folders = [seen["mine"], seen["forkserver"], seen["spawn"]]
    assert len(set(folders)) == 3 and seen["again"] == seen["mine"]
    assert all(Path(f).parent == temporary for f in folders)
    assert seen["mine exists after the fork"]
    # all three removed: the children's as they ended, the parent's at exit
    assert not list(temporary.iterdir())


DAEMON = """
import multiprocessing, os, signal, sys, time
from creditline.engines import vllm_engine

def engine_process(folder, report):
    # as vLLM's engine process does: it shuts down when its parent, exiting, terminates it
    def on_sigterm(*_):
        open(report, "w").write("folder there" if os.path.isdir(folder) else "folder gone")
        os._exit(0)
    signal.signal(signal.SIGTERM, on_sigterm)
    open(report + ".ready", "w").close()
    while True:
        time.sleep(0.1)

if __name__ == "__main__":
    vllm_engine._own_ipc_folder()
    child = multiprocessing.get_context("spawn").Process(
        target=engine_process, args=(os.environ["VLLM_RPC_BASE_PATH"], sys.argv[1]), daemon=True)
    child.start()
    deadline = time.monotonic() + 120
    while not os.path.exists(sys.argv[1] + ".ready"):  # its handler installed
        assert time.monotonic() < deadline and child.is_alive()
        time.sleep(0.1)
"""


def test_the_folder_stays_until_the_engine_processes_have_shut_down(tmp_path, temporary):
    (tmp_path / "daemon.py").write_text(DAEMON)
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, str(tmp_path / "daemon.py"), str(report)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TMPDIR": str(temporary)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert report.read_text() == "folder there"  # removed only after the child was terminated and joined
    assert not list(temporary.iterdir())


def test_a_path_the_user_set_is_kept_even_beside_an_inherited_folder(tmp_path, temporary):
    own = tmp_path / "own"
    own.mkdir()
    seen = _run(tmp_path, temporary, VLLM_RPC_BASE_PATH=str(own),
                CREDITLINE_VLLM_IPC_FOLDER=f"1:{temporary / 'clv-ipc-x'}")  # fmt: skip
    assert {seen["mine"], seen["forkserver"], seen["spawn"]} == {str(own)}
    assert own.is_dir() and not list(temporary.iterdir())  # the user's folder stays, none made


def test_no_folder_where_the_sockets_paths_would_not_fit(tmp_path):
    long = tmp_path / ("x" * 60)  # with a folder and a uuid in it, past 107 characters
    long.mkdir()
    script = "import os; from creditline.engines import vllm_engine; vllm_engine._own_ipc_folder(); " \
             "print(os.environ.get('VLLM_RPC_BASE_PATH'))"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(long)})  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "None", done  # vLLM's own default path
    assert not list(long.iterdir())
