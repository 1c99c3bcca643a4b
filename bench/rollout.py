"""Rollout benchmark: the torch engine against vLLM on the same checkpoint and prompts, in one run.

The generators, each timed on the same B prompts, after one warm-up call, as the median of `--repeats`
calls (tokens/s = completion tokens produced / wall seconds of the call; the vLLM ones take turns):

- torch engine: `TorchEngine` (transformers with a KV cache), what a round uses with `engine = "torch"`;
- vLLM engine: `VLLMEngine.generate`, what a round uses with `engine = "vllm"` (a seed and the sampled
  tokens' log-probs per row, processed log-probs);
- raw vLLM: `LLM.generate` of the same engine on the same prompts with the same per-row seeds and no log-probs
  (so the same completions, lengths included),
  the floor for what the round's path adds (goal: the round's path ≥ 90 % of it); and the same with the
  sampled tokens' log-probs (`logprobs=0`), which a round needs, to tell their cost from the rest.

vLLM's figures are taken twice, its engine core in this process and in processes of its own
(`VLLMSettings.in_process`), each engine's start timed too (wall, and CPU of this process and every process
below it, vLLM's engine-core and worker processes); the ratios use the device's default.

The checkpoint is a random Qwen2 built here (`creditline.policy.chat_policy`, BPE tokenizer trained on the maze's
text): `--shape small` (4 layers, width 256, head size 32: a CPU finishes in a minute or two) or
`--shape qwen2.5-0.5b` (Qwen2.5-0.5B's body: 24 layers, width 896, 14 heads of 64, 2 KV heads; its
vocabulary is the tokenizer's). The device is CUDA when there is one, else the CPU (vLLM's x86 build).

    .venv-vllm/bin/python bench/rollout.py [--shape small] [--rows 32] [--new-tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from creditline.config import EnvSettings  # noqa: E402
from creditline.engines import SamplingParams, TorchEngine  # noqa: E402
from creditline.engines.vllm_engine import VLLMEngine, VLLMSettings, import_vllm  # noqa: E402
from creditline.ids import derive_seed  # noqa: E402
from creditline.liveness import descendants, stat_fields  # noqa: E402
from creditline.policy.chat_policy import ChatPolicyConfig, build_chat_policy, environment_corpus  # noqa: E402
from creditline.policy.models import load_tokenizer  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
"""Clock ticks a second: the unit of `/proc/PID/stat`'s times."""

SHAPES = {
    "small": ChatPolicyConfig(hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=2, intermediate_size=704,
                              max_positions=1024, vocab_size=2048),
    "qwen2.5-0.5b": ChatPolicyConfig(hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
                                     intermediate_size=4864, max_positions=2048, vocab_size=2048),
}  # fmt: skip


def tokens_per_second(generators: dict, prompts, repeats: int) -> dict[str, tuple[float, int]]:
    """{name: (median tokens/s, tokens per call)} of `generators` (prompts → completion tokens produced), each
    warmed up once, then timed `repeats` times in turn (interleaved, so a drift of the machine's speed falls
    on all of them alike)."""
    for generate in generators.values():
        generate(prompts)
    rates: dict[str, list[float]] = {name: [] for name in generators}
    produced: dict[str, int] = {}
    for _ in range(repeats):
        for name, generate in generators.items():
            start = time.perf_counter()
            produced[name] = generate(prompts)
            rates[name].append(produced[name] / (time.perf_counter() - start))
    return {name: (statistics.median(rates[name]), produced[name]) for name in generators}


WHERE = {True: "in this process", False: "in processes of its own"}
"""Where vLLM's engine core runs (`VLLMSettings.in_process`)."""


def process_tree_cpu() -> float:
    """CPU seconds (user + system) of this process and every living process below it: vLLM's engine
    processes are children and grandchildren (`/proc`; Linux)."""
    tree = {str(os.getpid()): stat_fields(os.getpid()), **descendants(os.getpid())}
    return sum((int(f[11]) + int(f[12])) / TICKS for f in tree.values() if f is not None)


def vllm_rates(engine: VLLMEngine, prompts, params: SamplingParams, args) -> dict[str, tuple[float, int]]:
    """`tokens_per_second` of `engine` as a round calls it, and raw vLLM without and with log-probs."""
    vllm = engine._vllm

    def raw(logprobs: int | None):
        sampling = [vllm.SamplingParams(temperature=1.0, max_tokens=args.new_tokens, seed=derive_seed(0, row),
                                        logprobs=logprobs) for row in range(len(prompts))]  # fmt: skip

        def generate(p):
            outputs = engine.llm.generate([engine._tokens_prompt(prompt_token_ids=x) for x in p], sampling,
                                          use_tqdm=False)  # fmt: skip
            return sum(len(o.outputs[0].token_ids) for o in outputs)

        return generate

    return tokens_per_second(
        {"round": lambda p: sum(len(c.token_ids) for c in engine.generate(p, params)), "raw": raw(None),
         "raw_logprobs": raw(0)}, prompts, args.repeats)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"

    with tempfile.TemporaryDirectory() as tmp:
        corpus = environment_corpus(EnvSettings().build, episodes=200, seed=0)
        folder = build_chat_policy(Path(tmp) / "policy", corpus, SHAPES[args.shape])
        tokenizer = load_tokenizer(folder)
        prompts = [tokenizer.encode(text)[:48] for text in corpus[1 : 1 + args.rows]]  # B prompts
        params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=0)

        torch_engine = TorchEngine.from_checkpoint(folder, device)
        parameters = sum(p.numel() for p in torch_engine.model.parameters())
        measured = tokens_per_second(
            {"torch": lambda p: sum(len(c.token_ids) for c in torch_engine.generate(p, params))},
            prompts,
            args.repeats,
        )
        torch_engine = None  # its memory, before vLLM builds its engine

        import_vllm()  # imported once by the process either way: the starts below are the engines' own
        starts: dict[bool, tuple[float, float]] = {}
        for in_process in (True, False):  # the engine core in this process, then in processes of its own
            cpu, clock = process_tree_cpu(), time.perf_counter()
            settings = VLLMSettings(device=device, gpu_memory_utilization=0.5, in_process=in_process)
            engine = VLLMEngine(folder, settings)
            starts[in_process] = (time.perf_counter() - clock, process_tree_cpu() - cpu)
            measured |= {
                f"{name}/{in_process}": rate
                for name, rate in vllm_rates(engine, prompts, params, args).items()
            }
            engine.close()
    default = VLLMSettings(device=device).runs_in_process
    (torch_rate, torch_tokens), (round_rate, round_tokens) = measured["torch"], measured[f"round/{default}"]
    (raw_rate, raw_tokens), (raw_lp_rate, raw_lp_tokens) = (
        measured[f"raw/{default}"],
        measured[f"raw_logprobs/{default}"],
    )

    name = (
        torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} torch threads"
    )
    print(f"model: {args.shape} ({parameters / 1e6:.1f}M parameters, Qwen2, float32), device: {name}")
    print(
        f"{len(prompts)} prompts × up to {args.new_tokens} new tokens, temperature 1.0; median of {args.repeats}"
    )
    print(f"torch engine:  {torch_rate:9.0f} tokens/s ({torch_tokens} tokens a call)")
    print(
        f"vLLM engine:   {round_rate:9.0f} tokens/s ({round_tokens} tokens a call; VLLMEngine, as a round calls it)"
    )
    print(f"raw vLLM:      {raw_rate:9.0f} tokens/s ({raw_tokens} tokens a call; LLM.generate, no log-probs)")
    print(f"raw + logprob: {raw_lp_rate:9.0f} tokens/s ({raw_lp_tokens} tokens a call; LLM.generate, the sampled "
          "tokens' log-probs)")  # fmt: skip
    print(f"vLLM / torch: {round_rate / torch_rate:.2f}×   round / raw vLLM: {round_rate / raw_rate:.2f} (goal ≥ 0.90)"
          f"   round / raw with log-probs: {round_rate / raw_lp_rate:.2f}")  # fmt: skip
    here, apart = measured["round/True"][0], measured["round/False"][0]
    print(f"vLLM's engine core (the figures above: {WHERE[default]}, this device's default):")
    for in_process, (wall, cpu) in starts.items():
        print(f"  {WHERE[in_process]:<26} starts in {wall:5.1f} s on {cpu:5.1f} s of CPU, "
              f"then {measured[f'round/{in_process}'][0]:7.0f} tokens/s as a round calls it")  # fmt: skip
    print(
        f"  in this process / in its own: start {starts[True][0] / starts[False][0]:.2f}× the wall, "
        f"{starts[True][1] / starts[False][1]:.2f}× the CPU; tokens/s {here / apart:.2f}×"
    )


if __name__ == "__main__":
    main()
