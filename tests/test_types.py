"""The core type-checks: mypy over `creditline/` (pyproject's `[tool.mypy]`) reports no error.

Run as `python -m mypy` from this interpreter, so it reads the packages installed beside the tests (torch,
numpy, pandas: their annotations are part of the check; transformers is taken as Any, see pyproject.toml)
and the settings of the repository root. mypy comes with the test extra (`make install-test`); without it this test fails rather than skip, so
a check that never ran cannot pass for one that did.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_reports_no_error_in_the_core():
    if importlib.util.find_spec("mypy") is None:
        pytest.fail(f"mypy is not installed for {sys.executable}: run `make install-test`", pytrace=False)
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"mypy exited {result.returncode}:\n{result.stdout}{result.stderr}"
