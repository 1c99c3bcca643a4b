"""Training processes under torchrun: which rows are this rank's, and the sums that make W ranks one update.

Data parallelism, the way `creditline.trainer.train` does it when a process group is initialised
(world size W > 1): every rank holds the whole round's batch and the same model (each loads the same
parent folder), and computes the same shuffled minibatch order from the same seed. Rank r trains on
rows r::W of each minibatch. Every rank divides its loss sums by the minibatch's GLOBAL completion-token
count N (computed from the whole minibatch, so the same number on every rank), so rank r's gradient is
its share (1/N) Σ_{t ∈ rank r} ∇ℓ_t of the one-process gradient (1/N) Σ_t ∇ℓ_t, and their SUM is that
gradient, up to the order of float additions. Clipping and the AdamW step then run on identical
gradients on every rank, and the parameters stay identical without a broadcast.

Why an explicit SUM all-reduce of the `.grad` tensors after the micro-batches, and not a
`DistributedDataParallel` wrapper: DDP averages (the loss would need × W), and it synchronises inside
backward, which requires every rank to run the same number of synchronised backward passes; here a
rank's micro-batch count follows its rows' lengths, and a minibatch with fewer rows than ranks leaves
a rank with none (DDP would hang). The wrapper would also sit between the trainer and the HF model
(`.module`, gradient checkpointing). What the explicit reduce gives up is DDP's overlap of
communication with the backward pass: one bucketed all-reduce per optimiser step, after it.

Without an initialised process group (or with W = 1) the trainer calls `rank_and_size` alone: the
one-process path makes no distributed calls. FSDP (parameters sharded across ranks) is not implemented: every rank holds the
whole model and optimiser state.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

BUCKET_ELEMENTS = 1 << 24
"""Gradient elements per all-reduce call (64 MiB of fp32): few calls, a bounded extra copy."""


def rank_and_size() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def sum_update(parameters: Iterable[torch.nn.Parameter], sums: dict[str, float]) -> dict[str, float]:
    """All-reduce (SUM) one minibatch's gradients in place, and its metric `sums`; return the global sums.

    A rank without a gradient for a parameter (no rows in this minibatch) adds zeros; a parameter with
    no gradient on any rank keeps None, as in one process (AdamW skips it).
    """
    params = [p for p in parameters if p.requires_grad]
    # one small reduce first: the metric sums, then per parameter the number of ranks holding a gradient
    head = [*sums.values(), *(float(p.grad is not None) for p in params)]
    head_sum = torch.tensor(head, dtype=torch.float64, device=params[0].device)  # (K + P,)
    dist.all_reduce(head_sum)
    values = head_sum.tolist()
    summed = [p for p, ranks in zip(params, values[len(sums) :], strict=True) if ranks > 0]
    for p in summed:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    for bucket in _buckets(summed):
        flat = torch.cat([p.grad.reshape(-1) for p in bucket])  # (Σ numel,)
        dist.all_reduce(flat)
        for p, part in zip(bucket, flat.split([p.numel() for p in bucket]), strict=True):
            p.grad.copy_(part.view_as(p.grad))
    return dict(zip(sums, values[: len(sums)], strict=True))


def sum_rows(table: torch.Tensor, device: torch.device) -> torch.Tensor:
    """All-reduce (SUM) a CPU table whose rows each rank filled for its own rows (zeros elsewhere): the
    whole table on every rank, each value from exactly one rank. Sent through `device` (nccl needs CUDA)."""
    shared = table.to(device)
    dist.all_reduce(shared)
    return shared.cpu()


def _buckets(params: list[torch.nn.Parameter]) -> Iterator[list[torch.nn.Parameter]]:
    """Consecutive parameters of one dtype, at most `BUCKET_ELEMENTS` per bucket (a larger one alone)."""
    bucket: list[torch.nn.Parameter] = []
    size = 0
    for p in params:
        if bucket and (p.grad.dtype != bucket[0].grad.dtype or size + p.numel() > BUCKET_ELEMENTS):
            yield bucket
            bucket, size = [], 0
        bucket.append(p)
        size += p.numel()
    if bucket:
        yield bucket


@contextmanager
def process_group(device: str) -> Iterator[str]:
    """Join torchrun's process group and yield this rank's device; leave the group on exit.

    The rendezvous is torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The backend is
    nccl when `device` is CUDA (each rank on `cuda:<LOCAL_RANK>`), gloo otherwise.
    """
    if device.startswith("cuda"):
        local = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=local)
        device = str(local)
    else:
        dist.init_process_group("gloo")
    try:
        yield device
    finally:
        dist.destroy_process_group()
