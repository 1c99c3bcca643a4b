"""`VLLMEngine`: the production generation path, on a CUDA GPU (optional extra `creditline[vllm]`).

It loads the same HF checkpoint folder as `TorchEngine` and honours the same protocol: prompts go in as
token ids, completions come back with the log-prob of each sampled token. vLLM reports log-probs of the
raw model distribution unless asked for processed ones; with `logprobs_mode="processed_logprobs"` they
are the log-softmax of `logits / temperature` over the top-p nucleus (vLLM 0.32 applies temperature,
then masks the tokens outside top-k/top-p, then takes the log-softmax; greedy gives the raw
log-softmax), which is `creditline.logprobs.nucleus_logits`'s definition, the trainer's.

One engine per process and configuration (`VLLMEngine.shared`): building a vLLM engine takes tens of
seconds (weights, CUDA graphs, KV-cache profiling), so the rounds of a `creditline run` reuse it and a
new checkpoint of the same architecture is loaded by reloading weights. Training runs on the same GPU,
so `release_all` puts every engine to sleep first (level 2: weights and KV cache freed); the next `shared` call wakes it with the new weights. vLLM is imported lazily: nothing on
the CPU path needs it installed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from creditline.engines.base import Completion, SamplingParams
from creditline.ids import derive_seed


@dataclass(frozen=True)
class VLLMSettings:
    gpu_memory_utilization: float = 0.5
    """Fraction of the GPU's memory vLLM may take (weights + KV cache)."""
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    """True: no CUDA graphs (faster start, slower decoding)."""


class VLLMEngine:
    _shared: ClassVar[dict[tuple[str, VLLMSettings], VLLMEngine]] = {}

    def __init__(self, folder: str | Path, settings: VLLMSettings = VLLMSettings()):
        try:
            import vllm
            from vllm.inputs import TokensPrompt
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise RuntimeError("VLLMEngine needs `pip install creditline[vllm]` and a CUDA GPU") from exc
        self._vllm, self._tokens_prompt = vllm, TokensPrompt
        self.llm = vllm.LLM(
            model=str(folder),
            tokenizer=str(folder),
            gpu_memory_utilization=settings.gpu_memory_utilization,
            tensor_parallel_size=settings.tensor_parallel_size,
            enforce_eager=settings.enforce_eager,
            logprobs_mode="processed_logprobs",
            enable_sleep_mode=True,
        )
        self.folder = str(folder)
        self.content_hash: str | None = None
        """The recorded hash of the weights loaded, when the caller gave it."""
        self.asleep = False
        self.eos_token_id = self.llm.get_tokenizer().eos_token_id

    @property
    def context_length(self) -> int:
        """The longest prompt + completion vLLM serves for this model (`max_model_len`)."""
        return self.llm.llm_engine.model_config.max_model_len

    @classmethod
    def shared(
        cls, folder: str | Path, settings: VLLMSettings = VLLMSettings(), content_hash: str | None = None
    ) -> VLLMEngine:
        """This process's engine for `folder`'s architecture and `settings`, awake, with `folder`'s weights
        (those recorded as `content_hash`, when given: a folder re-written since it was loaded is reloaded)."""
        key = (_architecture(folder), settings)
        engine = cls._shared.get(key)
        if engine is None:
            engine = cls._shared[key] = cls(folder, settings)
            engine.content_hash = content_hash
        else:
            engine.load(folder, content_hash)
        return engine

    def load(self, folder: str | Path, content_hash: str | None = None, force: bool = False) -> None:
        """Wake up with the weights of `folder` (a checkpoint of the same architecture); without `force`, a no-op
        when awake with this folder recorded as this `content_hash`."""
        if not force and (str(folder), content_hash) == (self.folder, self.content_hash) and not self.asleep:
            return
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
        else:
            self.llm.reset_prefix_cache()  # cached KV blocks belong to the old weights
        self.folder, self.content_hash, self.asleep = str(folder), content_hash, False

    def release(self) -> None:
        """Free the GPU memory of weights and KV cache (level-2 sleep) until the next `load`."""
        if not self.asleep:
            self.llm.sleep(level=2)
            self.asleep = True

    @classmethod
    def release_all(cls) -> None:
        """Put every engine of this process to sleep (before training on the same GPU)."""
        for engine in cls._shared.values():
            engine.release()

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        if self.asleep:
            raise RuntimeError("VLLMEngine.generate while released: call load(folder) first")
        # vLLM seeds each request's own generator: one seed for the batch would give identical prompts (a
        # group's samples) identical completions, so each row gets its own seed, derived from the call's.
        sampling = [
            self._vllm.SamplingParams(
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                seed=derive_seed(params.seed, row),
                logprobs=0,  # the sampled token's own log-prob
                stop=list(params.stop) or None,
                include_stop_str_in_output=True,  # as TorchEngine: the text ends with the stop string
            )
            for row in range(len(prompts))
        ]
        inputs = [self._tokens_prompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(inputs, sampling, use_tqdm=False)
        completions = []
        for output in outputs:
            choice = output.outputs[0]
            if choice.finish_reason not in ("stop", "length"):
                raise RuntimeError(f"vLLM ended a completion with finish_reason={choice.finish_reason!r}")
            ids = list(choice.token_ids)
            logprobs = [entry[token].logprob for token, entry in zip(ids, choice.logprobs, strict=True)]
            completions.append(
                Completion(token_ids=ids, logprobs=logprobs, finish_reason=choice.finish_reason)
            )
        return completions


def _architecture(folder: str | Path) -> str:
    """Checkpoints with the same config.json share an engine (weights are reloaded, not rebuilt)."""
    return hashlib.sha256((Path(folder) / "config.json").read_bytes()).hexdigest()
