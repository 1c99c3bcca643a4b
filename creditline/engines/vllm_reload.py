"""An exact weight reload for vLLM workers: `reload_weights`, then re-pack the layers that load nothing.

vLLM 0.32's `reload_weights` loads a checkpoint into the running model layer by layer and re-runs each
layer's weight post-processing once all of that layer's parameters have arrived. A layer whose weight is
another layer's (an LM head tied to the input embeddings, `tie_word_embeddings`) receives nothing from the
checkpoint, so its post-processing never runs again. On a CUDA GPU that is harmless: the head multiplies
by the shared weight tensor, which holds the new values. On the CPU the head multiplies by a pre-packed
copy made at load time (`dispatch_cpu_unquantized_gemm`: oneDNN or sgl-kernel packing), which keeps the
old weights: after a reload the output layer is the previous checkpoint's, and log-probs were seen off by
up to 1.5 (shared/reference/stack-notes.md, "vLLM on this CPU").

`CheckpointReload` is a vLLM worker extension (`LLM(worker_extension_cls=...)`, or `vllm serve
--worker-extension-cls creditline.engines.vllm_reload.CheckpointReload`): its `reload_checkpoint` method,
called through `collective_rpc`, runs vLLM's own reload and then the post-processing of every layer that
shares its weight with another layer, so a reloaded engine computes what a freshly built one computes
(tests/vllm_engine/test_engine.py: after each reload the trainer scores the samples as vLLM did, and the tied
engine samples what a fresh one samples). vLLM imports this
module inside its worker processes; it imports nothing of vLLM at module level.
"""

from __future__ import annotations

RELOAD_METHOD = "reload_checkpoint"
"""The worker method `VLLMEngine.load` calls through `collective_rpc`."""
WORKER_EXTENSION = f"{__name__}.CheckpointReload"
"""The import path vLLM mixes into its worker class."""


class CheckpointReload:
    """Mixed into vLLM's worker class: `self` is the worker (it has `reload_weights` and `model_runner`)."""

    def reload_checkpoint(self, weights_path: str) -> int:
        """Load `weights_path` (a checkpoint folder of the served architecture) into the running model, then
        re-process the layers whose weight is shared with an earlier layer. Returns how many were."""
        self.reload_weights(  # type: ignore[attr-defined]
            weights_path=weights_path, is_checkpoint_format=True
        )
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        seen: set[int] = set()
        refreshed = 0
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if weight is None or weight.numel() == 0 or not hasattr(module, "quant_method"):
                continue
            if id(weight) in seen:  # a tied layer: its packed copy still holds the old weights
                module.quant_method.process_weights_after_loading(module)
                refreshed += 1
            seen.add(id(weight))
        return refreshed
