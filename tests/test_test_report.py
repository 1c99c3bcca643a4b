"""`make test`'s last lines (scripts/test_report.py): how each pytest ended, from the files its streams leave."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "test_report.py"
SPEC = importlib.util.spec_from_file_location("test_report", SCRIPT)
test_report = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(test_report)


def _pytest(folder: Path, name: str, body: str, *args: str) -> None:
    """A real pytest run of `body` as stream `name`, leaving its exit status and JUnit report as `make test` does."""
    (folder / f"test_{name}.py").write_text(body)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"test_{name}.py",
                           f"--junitxml=.pytest-{name}.xml", *args], cwd=folder, capture_output=True)  # fmt: skip
    (folder / f".pytest-{name}.exit").write_text(f"{done.returncode}\n")


def test_each_stream_says_its_counts_its_failed_tests_and_its_exit(tmp_path, capsys):
    _pytest(tmp_path, "rest", "import pytest\ndef test_a(): pass\n@pytest.mark.skip\ndef test_b(): pass\n")
    _pytest(tmp_path, "faults", "import pytest\ndef test_a(): assert 0\n@pytest.fixture\ndef f(): raise OSError\n"
            "def test_b(f): pass\n")  # fmt: skip
    (tmp_path / ".pytest-vllm.exit").write_text("124\n")  # stopped at its limit: no report, its stacks
    (tmp_path / ".pytest-vllm.stacks").write_text('  File "t.py", line 3 in test_hangs\n')
    (tmp_path / ".pytest-rest.stacks").write_text("a stream that ended by itself: its stacks are not shown\n")
    (tmp_path / ".pytest-late.xml").write_text("<testsuites><testsuite")  # cut short
    assert test_report.main(["rest", "faults", "vllm", "late"], tmp_path) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "== vllm: stopped at its limit; every thread's stack:"
    assert out[1] == '  File "t.py", line 3 in test_hangs'
    report = out[out.index("== how each pytest ended:") + 1 :]
    assert report[0].startswith("rest: 2 tests, 0 failed, 0 errors, 1 skipped in "), report
    assert report[0].endswith("; exit 0"), report
    assert report[1].startswith("faults: 2 tests, 1 failed, 1 errors, 0 skipped in "), report
    assert report[1].endswith("; exit 1"), report
    assert report[2:] == [
        "faults: failure test_faults::test_a",
        "faults: error test_faults::test_b",
        "vllm: no report; exit 124",
        report[-1],
    ]
    assert report[-1].startswith("late: unreadable report .pytest-late.xml (") and report[-1].endswith(
        "); exit none (it did not end)"
    )
    assert "a stream that ended by itself" not in "\n".join(out)


def test_all_streams_passing_exit_0(tmp_path, capsys):
    _pytest(tmp_path, "rest", "def test_a(): pass\n")
    assert test_report.main(["rest"], tmp_path) == 0
