"""The `creditline` command as the end-to-end tests run it: a subprocess on a given data root."""

import os
import subprocess
import sys
from pathlib import Path


def creditline(data_root: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "CREDITLINE_DATA_ROOT": str(data_root)}
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
