"""`creditline.liveness.descendants`: every living process below a process, grandchildren included, and none
beside it."""

import os
import subprocess
import sys

from creditline.liveness import descendants

PARENT_OF_ONE = (
    "import subprocess, sys; p = subprocess.Popen(['sleep', '30']); print('started', flush=True); "
    "sys.stdin.read(); p.kill(); p.wait()"
)
"""A process with one child, which it stops when its input closes."""


def test_children_and_grandchildren_are_found_and_a_sibling_is_not():
    child = subprocess.Popen([sys.executable, "-c", PARENT_OF_ONE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    sibling = subprocess.Popen(["sleep", "30"])
    try:
        assert child.stdout.readline() == "started\n"
        below_child = descendants(child.pid)
        assert [fields[1] for fields in below_child.values()] == [
            str(child.pid)
        ]  # one, whose parent is the child
        mine = descendants(os.getpid())
        assert {str(child.pid), str(sibling.pid)} | below_child.keys() <= mine.keys()
        assert str(sibling.pid) not in below_child and descendants(sibling.pid) == {}
    finally:
        child.stdin.close()
        sibling.kill()
        for process in (child, sibling):
            process.wait(timeout=30)
