"""`VLLMEngine`: the production generation path, on a CUDA GPU (optional extra `creditline[vllm]`).

It loads the same HF checkpoint folder as `TorchEngine` and honours the same protocol: prompts go
in as token ids, completions come back with the log-prob of each sampled token. vLLM reports
log-probs of the raw model distribution unless asked for processed ones; we request
`logprobs_mode="processed_logprobs"` so they are `log_softmax(logits / temperature)`, which is what
the trainer's ratio expects. vLLM is imported lazily: nothing on the CPU path needs it installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from creditline.engines.base import Completion, SamplingParams


class VLLMEngine:
    def __init__(
        self, folder: str | Path, gpu_memory_utilization: float = 0.5, tensor_parallel_size: int = 1
    ):
        try:
            import vllm
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise RuntimeError("VLLMEngine needs `pip install creditline[vllm]` and a CUDA GPU") from exc
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=str(folder),
            tokenizer=str(folder),
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            logprobs_mode="processed_logprobs",
            enforce_eager=True,
        )
        self.eos_token_id = self.llm.get_tokenizer().eos_token_id

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        vllm = self._vllm
        sampling = vllm.SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            seed=params.seed,
            logprobs=0,  # the sampled token's own log-prob
        )
        inputs = [vllm.inputs.TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(inputs, sampling, use_tqdm=False)
        completions = []
        for output in outputs:
            choice = output.outputs[0]
            ids = list(choice.token_ids)
            logprobs = [entry[token].logprob for token, entry in zip(ids, choice.logprobs, strict=True)]
            reason = "stop" if choice.finish_reason == "stop" else "length"
            completions.append(Completion(token_ids=ids, logprobs=logprobs, finish_reason=reason))
        return completions
