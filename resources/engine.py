"""`EngineResource`: loads the generation engine an experiment asks for, on this deployment's device.

The experiment config chooses the engine kind ("torch" or "vllm") and the device; a deployment can
override the device (e.g. run the same experiment on `cuda` on a GPU node) without editing the config,
send generation to running OpenAI-compatible replicas (`generation_endpoints`), and choose how many processes
train a round (`train_processes`): the update is the same on any number
up to float summation order (`creditline.train.distributed`: the same parameters to ~1e-7, not the same
bytes), so it is a property of the machine, not of the experiment or its config hash.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from creditline.config import RolloutSettings
from creditline.engines import Engine, make_engine


class EngineResource(dg.ConfigurableResource):
    device_override: str = ""
    """Empty: use the experiment's `rollouts.device`."""
    train_processes: int = 1
    """Training processes per node under torchrun (`assets.train_worker`, one GPU each on CUDA); 1 trains
    in the asset's own process."""
    train_sharding: str = "replicated"
    """With train_processes > 1: "replicated" (every rank the whole model) or "fsdp" (its blocks split across
    the ranks, for a model that does not fit one device: `creditline.train.distributed.shard_blocks`)."""

    generation_endpoints: list[str] = []
    """Non-empty: OpenAI-compatible replicas generate instead of the experiment's engine (data parallel; each
    reloads the checkpoint, which must be on a filesystem they share: `creditline.engines.endpoints`)."""
    generation_model: str = "policy"
    """The model name the replicas serve."""

    tensor_parallel_size: int | None = None
    """The deployment's `[generation] tensor_parallel_size` (`creditline.config.TensorParallelSize`); None:
    the experiment's."""

    def vllm_settings(self, settings: RolloutSettings):
        """The experiment's vLLM settings, with this deployment's tensor parallelism where it sets one (the
        device is set where the engine is made: `make_engine`)."""
        return settings.vllm_settings(self.tensor_parallel_size)

    def load(
        self, checkpoint: str | Path, settings: RolloutSettings, content_hash: str | None = None
    ) -> Engine:
        """An engine for `checkpoint`; given its recorded `content_hash`, the process's last engine for it is
        reused."""
        if self.generation_endpoints:
            from creditline.engines.endpoints import EndpointsEngine

            return EndpointsEngine.for_checkpoint(
                self.generation_endpoints, checkpoint, content_hash, model_name=self.generation_model
            )
        device = self.device_override or settings.device
        return make_engine(settings.engine, checkpoint, device, self.vllm_settings(settings), content_hash)
