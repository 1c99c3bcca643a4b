"""Where a vLLM engine's core runs (`VLLMSettings.in_process`, resolved by `runs_in_process`; no vLLM
needed): in this process on a CPU with one tensor-parallel rank, in processes of its own on a GPU or with
more ranks; `VLLM_ENABLE_V1_MULTIPROCESSING`, where set, decides instead, as vLLM reads it; an explicit
setting decides over both. tests/vllm_engine/test_in_process.py runs both kinds of engine."""

from __future__ import annotations

import pytest

from creditline.engines.vllm_engine import MULTIPROCESSING_ENV, VLLMSettings

CPU, GPU = VLLMSettings(device="cpu"), VLLMSettings(device="cuda")


@pytest.mark.parametrize(
    ("settings", "env", "expected"),
    [
        (CPU, None, True),
        (GPU, None, False),
        (VLLMSettings(device="cpu", tensor_parallel_size=2), None, False),
        (VLLMSettings(device="cuda:1"), None, False),
        (CPU, "1", False),
        (CPU, " 1 ", False),
        (GPU, "0", True),
        (CPU, "", True),  # set but empty: as unset
        (CPU, "00", True),  # as vLLM reads it: bool(int("00")) is False
        (VLLMSettings(device="cpu", in_process=False), None, False),
        (VLLMSettings(device="cuda", in_process=True), "1", True),
        (VLLMSettings(device="cpu", in_process=False), "0", False),
    ],
)
def test_where_the_engine_core_runs(monkeypatch, settings, env, expected):
    if env is None:
        monkeypatch.delenv(MULTIPROCESSING_ENV, raising=False)
    else:
        monkeypatch.setenv(MULTIPROCESSING_ENV, env)
    assert settings.runs_in_process is expected


def test_a_switch_vllm_cannot_read_is_one_line(monkeypatch):
    monkeypatch.setenv(MULTIPROCESSING_ENV, "false")
    with pytest.raises(ValueError, match=r"^VLLM_ENABLE_V1_MULTIPROCESSING='false': must be 0 or 1"):
        assert VLLMSettings(device="cpu").runs_in_process is None  # not reached
