"""Generation engines behind one protocol: `TorchEngine` everywhere, `VLLMEngine` on a GPU."""

from __future__ import annotations

from pathlib import Path

from creditline.engines.base import Completion, Engine, SamplingParams
from creditline.engines.torch_engine import TorchEngine


def make_engine(kind: str, folder: str | Path, device: str = "cpu", vllm_settings=None) -> Engine:
    """`kind` is "torch" or "vllm"; both load the same HF checkpoint folder. vLLM engines are shared
    within a process (`VLLMEngine.shared`); `vllm_settings` is a `VLLMSettings`."""
    if kind == "torch":
        return TorchEngine.from_checkpoint(folder, device)
    if kind == "vllm":
        from creditline.engines.vllm_engine import VLLMEngine, VLLMSettings

        return VLLMEngine.shared(folder, vllm_settings or VLLMSettings())
    raise ValueError(f"unknown engine {kind!r}; choose 'torch' or 'vllm'")


def release_generation_memory() -> None:
    """Free the GPU memory the process's vLLM engines hold, before training (none built: nothing to do;
    the module imports vLLM only when an engine is built)."""
    from creditline.engines.vllm_engine import VLLMEngine

    VLLMEngine.release_all()


__all__ = [
    "Completion",
    "Engine",
    "SamplingParams",
    "TorchEngine",
    "make_engine",
    "release_generation_memory",
]
