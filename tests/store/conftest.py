from __future__ import annotations

from pathlib import Path

import pytest

from creditline.store import LineageStore


@pytest.fixture
def store(tmp_path: Path) -> LineageStore:
    return LineageStore(tmp_path / "catalog" / "lineage.duckdb")
