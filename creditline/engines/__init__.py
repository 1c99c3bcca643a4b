"""Generation engines behind one protocol: `TorchEngine` everywhere, `VLLMEngine` where vLLM is installed.

Neither engine is imported with the package: `creditline.engines.base` (the protocol and `SamplingParams`,
which every config reads) must not cost an import of torch; `TorchEngine` is imported when first named.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from creditline.engines.base import Completion, Engine, SamplingParams

if TYPE_CHECKING:
    from creditline.engines.torch_engine import TorchEngine


def __getattr__(name: str):
    """`creditline.engines.TorchEngine`, imported on first use (PEP 562)."""
    if name == "TorchEngine":
        from creditline.engines.torch_engine import TorchEngine

        return TorchEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_TORCH_ENGINES: dict[tuple[str, str, str], TorchEngine] = {}
"""The last torch engine built for a recorded checkpoint: a round's rollouts play the checkpoint that the
previous round's evaluation just loaded (one load per process and checkpoint, not two)."""


def make_engine(
    kind: str, folder: str | Path, device: str = "cpu", vllm_settings=None, content_hash: str | None = None
) -> Engine:
    """`kind` is "torch" or "vllm"; both load the same HF checkpoint folder on `device`. vLLM engines are
    shared within a process (`VLLMEngine.shared`, reloaded when the folder or its `content_hash` changes);
    `vllm_settings` is a `VLLMSettings` (its device is `device`). A torch engine for a folder given with its
    recorded `content_hash` is kept until the next one (or `release_generation_memory`)."""
    if kind == "torch":
        from creditline.engines.torch_engine import TorchEngine

        if content_hash is None:
            return TorchEngine.from_checkpoint(folder, device)
        key = (str(folder), device, content_hash)
        if key not in _TORCH_ENGINES:
            _TORCH_ENGINES.clear()
            _TORCH_ENGINES[key] = TorchEngine.from_checkpoint(folder, device)
        return _TORCH_ENGINES[key]
    if kind == "vllm":
        from creditline.engines.vllm_engine import VLLMEngine, VLLMSettings

        settings = replace(vllm_settings or VLLMSettings(), device=device)
        return VLLMEngine.shared(folder, settings, content_hash)
    raise ValueError(f"unknown engine {kind!r}; choose 'torch' or 'vllm'")


def release_generation_memory() -> None:
    """Free the memory the process's engines hold, before training (the kept torch engine goes; vLLM's
    engines sleep; none built: nothing to do, and vLLM is imported only when an engine is built)."""
    _TORCH_ENGINES.clear()
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
