"""Trainer benchmark: one training step at a real vocabulary, completion-only chunked log-probs vs the
full-vocabulary path the trainer used before.

Shape (defaults, from the issue): a Qwen2-shaped model of ~9.8M parameters with the 151,936-token
vocabulary of Qwen2.5, 8 rows of 1,024 tokens (prompt 768 + completion 256), one minibatch, AdamW.
Each measurement runs in a fresh process, after one warm-up step; its peak memory is the growth of the
resident set during the second step (VmHWM after it − VmRSS before it, the peak reset through
/proc/self/clear_refs), its speed the row tokens per second of that step.

The full-vocabulary path cannot run at 8 × 1,024 tokens on a 24 GB machine (its logits, log-softmax and
their gradients are several copies of 8·1024·151936 fp32 floats, ~5 GB each), so it runs at 1 and 2
rows and is extrapolated linearly in rows (memory and time are affine in rows at a fixed length):
m(8) = m(1) + 7·(m(2) − m(1)). The new path runs at the full size. Before timing, both paths are
checked equal on a small case (loss and every gradient, to 1e-5).

On a CUDA device (`--device cuda`) both paths run at the full size, under the bf16 autocast the trainer uses
there; peak memory is the growth of `torch.cuda.max_memory_allocated` during the second step, its time
measured between two synchronisations.

    .venv/bin/python bench/trainer.py [--rows 8] [--prompt 768] [--completion 256] [--vocab 151936] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from creditline.train.logprobs import full_vocab_logprobs  # noqa: E402
from creditline.train.trainer import PackedBatch, TrainConfig, autocast_for, clipped_pg_terms, train  # noqa: E402


def build_model(vocab: int, max_positions: int) -> torch.nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                         tie_word_embeddings=True)  # fmt: skip
    return Qwen2ForCausalLM(config)


def build_batch(rows: int, prompt: int, completion: int, vocab: int) -> PackedBatch:
    generator = torch.Generator().manual_seed(1)
    length = prompt + completion
    input_ids = torch.randint(0, vocab, (rows, length), generator=generator)
    mask = torch.zeros(rows, length, dtype=torch.bool)
    mask[:, prompt - 1 : length - 1] = True  # position j predicts token j + 1
    old = torch.where(
        mask, -torch.rand(rows, length, generator=generator) - 11.0, 0.0
    )  # ≈ log(1/V) at random init
    advantages = torch.where(mask, torch.randn(rows, length, generator=generator), 0.0)
    return PackedBatch(input_ids, torch.ones_like(input_ids), mask, old, advantages)


def full_vocab_step(model, batch: PackedBatch, optimizer, config: TrainConfig) -> float:
    """The trainer's update before completion-only log-probs: every position's logits, then the mask (on CUDA
    under the trainer's bf16 autocast)."""
    device = next(model.parameters()).device
    moved = {f.name: getattr(batch, f.name) for f in fields(batch) if getattr(batch, f.name) is not None}
    batch = replace(batch, **{name: tensor.to(device) for name, tensor in moved.items()})
    with autocast_for(device, config.bf16):
        logp, _ = full_vocab_logprobs(model, batch.input_ids, batch.attention_mask, 1.0)
    terms, _ = clipped_pg_terms(logp[batch.completion_mask], batch.old_logprobs[batch.completion_mask],
                                batch.advantages[batch.completion_mask], config.clip_eps)  # fmt: skip
    loss = terms.mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    return float(loss.detach())


STEP_CONFIG = TrainConfig(learning_rate=1e-4, epochs=1, minibatches=1)


def child(path: str, rows: int, prompt: int, completion: int, vocab: int, device: str = "cpu") -> None:
    """Measure one step of `path` ("chunked" or "full") in this fresh process; print one JSON line."""
    torch.set_num_threads(2)
    model = build_model(vocab, prompt + completion).to(device)
    batch = build_batch(rows, prompt, completion, vocab)
    optimizer = torch.optim.AdamW(model.parameters(), lr=STEP_CONFIG.learning_rate)

    def step() -> None:
        if path == "full":
            full_vocab_step(model, batch, optimizer, STEP_CONFIG)
        else:
            train(model, batch, STEP_CONFIG, temperature=1.0, seed=0, optimizer_state=optimizer.state_dict())

    step()  # warm-up: first-call allocations and the optimiser state are not the step's cost
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak_mb = (torch.cuda.max_memory_allocated() - before) / 2**20
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set (VmHWM)
        before = _status_kb("VmRSS")
        start = time.perf_counter()
        step()
        seconds = time.perf_counter() - start
        peak_mb = (_status_kb("VmHWM") - before) / 1024
    print(json.dumps({"path": path, "rows": rows, "peak_mb": peak_mb, "seconds": seconds}))


def _status_kb(field: str) -> int:
    return int(re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1))


def check_equal(vocab: int) -> tuple[float, float]:
    """Loss and gradient differences (max abs) of the two paths on a small case: 2 rows of 48 + 16 tokens."""
    model = build_model(vocab, 64)
    batch = build_batch(2, 48, 16, vocab)
    results = []
    for path in ("full", "chunked"):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # gradients only, weights unchanged
        if path == "full":
            loss = full_vocab_step(model, batch, optimizer, TrainConfig(max_grad_norm=1e9))
        else:
            metrics, _ = train(model, batch, TrainConfig(epochs=1, minibatches=1, learning_rate=1e-12,
                                                         max_grad_norm=1e9, logprob_chunk_tokens=7), 1.0, 0)  # fmt: skip
            loss = metrics[0]["loss"]
        results.append((loss, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    return abs(loss_a - loss_b), max(float((grads_a[n] - grads_b[n]).abs().max()) for n in grads_a)


def measure(path: str, rows: int, args) -> dict:
    command = [sys.executable, __file__, "--child", path, "--rows", str(rows), "--prompt", str(args.prompt),
               "--completion", str(args.completion), "--vocab", str(args.vocab), "--device", args.device]  # fmt: skip
    out = subprocess.run(
        command, capture_output=True, text=True, check=True, env=os.environ | {"OMP_NUM_THREADS": "2"}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=768)
    parser.add_argument("--completion", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--child", choices=["full", "chunked"])
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.rows, args.prompt, args.completion, args.vocab, args.device)
    if args.device == "cuda":
        return main_cuda(args)
    torch.set_num_threads(2)
    loss_diff, grad_diff = check_equal(args.vocab)
    print(f"small case (2 rows × 64 tokens, vocabulary {args.vocab:,}): |Δloss| = {loss_diff:.1e}, "
          f"max |Δgrad| = {grad_diff:.1e}")  # fmt: skip
    tokens = args.prompt + args.completion
    new = measure("chunked", args.rows, args)
    one, two = measure("full", 1, args), measure("full", 2, args)
    extrapolate = {key: one[key] + (args.rows - 1) * (two[key] - one[key]) for key in ("peak_mb", "seconds")}
    print(f"one training step, {args.rows} rows × {tokens} tokens ({args.completion} completion), "
          f"vocabulary {args.vocab:,}, 2 CPU threads")  # fmt: skip
    print(f"  {'path':<44} {'peak MB':>9} {'seconds':>8} {'tokens/s':>9}")
    for name, row, n in [("full vocabulary, 1 row (measured)", one, 1), ("full vocabulary, 2 rows (measured)", two, 2),
                         (f"full vocabulary, {args.rows} rows (extrapolated)", extrapolate, args.rows),
                         (f"completion-only chunked, {args.rows} rows (measured)", new, args.rows)]:  # fmt: skip
        print(
            f"  {name:<44} {row['peak_mb']:>9.0f} {row['seconds']:>8.2f} {n * tokens / row['seconds']:>9.0f}"
        )
    print(f"peak memory: {extrapolate['peak_mb'] / new['peak_mb']:.1f}× less")
    print(f"tokens/s: {extrapolate['seconds'] / new['seconds']:.1f}× more")


def main_cuda(args) -> None:
    """Both paths at the full size on the GPU, side by side."""
    tokens = args.prompt + args.completion
    full, new = measure("full", args.rows, args), measure("chunked", args.rows, args)
    print(f"one training step, {args.rows} rows × {tokens} tokens ({args.completion} completion), "
          f"vocabulary {args.vocab:,}, {torch.cuda.get_device_name()}, bf16 autocast")  # fmt: skip
    print(f"  {'path':<44} {'peak MB':>9} {'seconds':>8} {'tokens/s':>9}")
    for name, row in [("full vocabulary", full), ("completion-only chunked", new)]:
        print(
            f"  {name:<44} {row['peak_mb']:>9.0f} {row['seconds']:>8.3f} {args.rows * tokens / row['seconds']:>9.0f}"
        )
    print(f"peak GPU memory: {full['peak_mb'] / new['peak_mb']:.1f}× less")
    print(f"tokens/s: {full['seconds'] / new['seconds']:.1f}× more")


if __name__ == "__main__":
    main()
