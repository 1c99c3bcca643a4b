"""Generation engines behind one protocol: `TorchEngine` everywhere, `VLLMEngine` on a GPU."""

from __future__ import annotations

from pathlib import Path

from creditline.engines.base import Completion, Engine, SamplingParams
from creditline.engines.torch_engine import TorchEngine


def make_engine(kind: str, folder: str | Path, device: str = "cpu") -> Engine:
    """`kind` is "torch" or "vllm"; both load the same HF checkpoint folder."""
    if kind == "torch":
        return TorchEngine.from_checkpoint(folder, device)
    if kind == "vllm":
        from creditline.engines.vllm_engine import VLLMEngine

        return VLLMEngine(folder)
    raise ValueError(f"unknown engine {kind!r}; choose 'torch' or 'vllm'")


__all__ = ["Completion", "Engine", "SamplingParams", "TorchEngine", "make_engine"]
