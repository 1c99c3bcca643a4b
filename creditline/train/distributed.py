"""Training processes under torchrun: which rows are this rank's, and the sums that make W ranks one update.

Data parallelism, the way `creditline.train.trainer.train` does it when a process group is initialised
(world size W > 1): every rank holds the whole round's batch and the same model (each loads the same
parent folder), and computes the same shuffled minibatch order from the same seed. Rank r trains on
rows r::W of each minibatch. Every rank divides its loss sums by the minibatch's GLOBAL completion-token
count N (computed from the whole minibatch, so the same number on every rank), so rank r's gradient is
its share (1/N) Σ_{t ∈ rank r} ∇ℓ_t of the one-process gradient (1/N) Σ_t ∇ℓ_t, and their SUM is
that gradient, up to the order of float additions. Clipping and the AdamW step then run on identical
gradients on every rank, and the parameters stay identical without a broadcast.

Why an explicit SUM all-reduce of the `.grad` tensors after the micro-batches, and not a
`DistributedDataParallel` wrapper: DDP averages (the loss would need × W), and it synchronises inside
backward, which requires every rank to run the same number of synchronised backward passes; here a
rank's micro-batch count follows its rows' lengths, and a minibatch with fewer rows than ranks leaves
a rank with none (DDP would hang). The wrapper would also sit between the trainer and the HF model
(`.module`, gradient checkpointing). What the explicit reduce gives up is DDP's overlap of
communication with the backward pass: one bucketed all-reduce per optimiser step, after it.

Sharded training (`shard_blocks`, FSDP2's `fully_shard`): for a model whose transformer blocks do not fit
one device W times over, every block's parameters, gradients and AdamW moments are split across the ranks
(dim 0, 1/W each); a block's full weights exist only while it runs (all-gathered before its forward, and
again for its backward). The embeddings, final norm and LM head stay whole on every rank (the trainer calls
the head on its own, outside the model's forward, so it cannot be an FSDP unit) and are summed by `sum_update`
as before. FSDP reduce-scatters the blocks' gradients in every backward, with the SUM (divide factor 1), so
a block's gradient shard is the same sum as in the replicated path. Because every all-gather is a
collective, every rank must run the same number of forward and backward passes: the trainer pads a rank's
micro-batches with passes whose loss is multiplied by 0 (`creditline.train.trainer.rank_micro_batches`). The
result is the one-process update to float summation order, as for the replicated path
(tests/scaleout/test_torchrun_training.py).

Without an initialised process group (or with W = 1) the trainer calls `rank_and_size` alone: the
one-process path makes no distributed calls.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor

SHARDINGS = ("replicated", "fsdp")
"""How the ranks hold the model: whole on every rank (data parallel), or its blocks split across them
(FSDP)."""

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
    trained = [p for p in parameters if p.requires_grad]
    params = [p for p in trained if not isinstance(p, DTensor)]  # FSDP has summed the shards already
    # one small reduce first: the metric sums, then per parameter the number of ranks holding a gradient
    head = [*sums.values(), *(float(p.grad is not None) for p in params)]
    head_sum = torch.tensor(head, dtype=torch.float64, device=trained[0].device)  # (K + P,)
    dist.all_reduce(head_sum)
    values = head_sum.tolist()
    summed = [p for p, ranks in zip(params, values[len(sums) :], strict=True) if ranks > 0]
    for p in summed:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    for bucket in _buckets(summed):
        flat = torch.cat([_grad(p).reshape(-1) for p in bucket])  # (Σ numel,)
        dist.all_reduce(flat)
        for p, part in zip(bucket, flat.split([p.numel() for p in bucket]), strict=True):
            _grad(p).copy_(part.view_as(_grad(p)))
    return dict(zip(sums, values[: len(sums)], strict=True))


def shard_blocks(model: torch.nn.Module, device: str | torch.device) -> None:
    """Shard every transformer block of `model` across the process group's ranks (FSDP2), in place, each
    rank's shards on its `device` (`process_group`'s). The blocks are the modules whose class HF
    names in `model._no_split_modules` (LlamaDecoderLayer, Qwen2DecoderLayer, ...): the units HF itself never
    splits across devices."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [module for module in model.modules() if type(module).__name__ in names]
    if not blocks:
        raise ValueError(
            f"{type(model).__name__} names no transformer blocks (_no_split_modules): "
            'it cannot be sharded; train it with sharding "replicated"'
        )
    # named, not FSDP's default (the machine's accelerator):
    # gloo ranks on a GPU host keep their shards on the CPU
    mesh = init_device_mesh(torch.device(device).type, (dist.get_world_size(),))
    for block in blocks:
        sharded = fully_shard(
            block, mesh=mesh, reshard_after_forward=True
        )  # each block is a root: whole only while it runs; `sharded` is `block`, now an FSDPModule
        # the SUM over ranks, as `sum_update` (FSDP's default is the mean),
        # as a plain SUM (gloo has no PREMUL_SUM)
        sharded.set_gradient_divide_factor(1.0)
        sharded.set_force_sum_reduction_for_comms(True)


def is_sharded(model: torch.nn.Module) -> bool:
    return any(isinstance(p, DTensor) for p in model.parameters())


def clip_grad_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_` over sharded and whole parameters: the 2-norm of every gradient
    element, a shard's squares summed over the ranks (each element is on exactly one rank) and a whole
    gradient's counted once; every gradient scaled by min(1, max_norm / (norm + 1e-6)). Returns the norm."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    shard_squares = torch.zeros((), dtype=torch.float64, device=local[0].device)
    whole_squares = torch.zeros((), dtype=torch.float64, device=local[0].device)
    for g, part in zip(grads, local, strict=True):
        if isinstance(g, DTensor):
            shard_squares += part.double().pow(2).sum()
        else:
            whole_squares += part.double().pow(2).sum()
    if dist.is_initialized():
        dist.all_reduce(shard_squares)
    norm = (shard_squares + whole_squares).sqrt()
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for part in local:
        part.mul_(scale.to(part.dtype))
    return norm.float().cpu()


def sharded_optimizer_state(state: dict, parameters: list[torch.nn.Parameter]) -> dict:
    """A whole-model optimiser state (`optimizer.state_dict()` of one process, as saved in a checkpoint) laid
    out for `parameters`: each sharded parameter's moments cut to this rank's shard (no communication:
    every rank holds the whole state)."""
    laid_out = {}
    for index, entry in state["state"].items():
        p = parameters[int(index)]
        laid_out[index] = {
            key: distribute_tensor(value.to(p.device), p.device_mesh, p.placements, src_data_rank=None)
            if isinstance(p, DTensor) and value.shape == p.shape
            else value
            for key, value in entry.items()
        }
    return {**state, "state": laid_out}


def whole_optimizer_state(state: dict) -> dict | None:
    """`sharded_optimizer_state`'s inverse, so a sharded run saves what one process would: every moment whole,
    on rank 0 (`_gathered_on_rank_0`; None on the other ranks)."""
    whole = {index: _gathered_on_rank_0(state["state"][index]) for index in sorted(state["state"])}
    return {**state, "state": whole} if dist.get_rank() == 0 else None


def whole_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The model's state dict, every shard gathered whole, on rank 0 (None on the other ranks)."""
    return _gathered_on_rank_0(model.state_dict())


def _gathered_on_rank_0(tensors: dict) -> dict | None:
    """Every DTensor of `tensors` all-gathered whole (a collective: every rank calls it, in the same order);
    rank 0 keeps the values on the CPU, the others drop each as soon as it is gathered (W whole copies in one
    host's memory would defeat sharding) and get None."""
    keep = dist.get_rank() == 0
    whole = {}
    for key, value in tensors.items():
        gathered = value.full_tensor() if isinstance(value, DTensor) else value
        if keep:
            whole[key] = gathered.cpu() if isinstance(gathered, torch.Tensor) else gathered
    return whole if keep else None


def sum_rows(table: torch.Tensor, device: torch.device) -> torch.Tensor:
    """All-reduce (SUM) a CPU table whose rows each rank filled for its own rows (zeros elsewhere): the
    whole table on every rank, each value from exactly one rank. Sent through `device` (nccl needs CUDA)."""
    shared = table.to(device)
    dist.all_reduce(shared)
    return shared.cpu()


def _grad(p: torch.nn.Parameter) -> torch.Tensor:
    """`p`'s gradient, which every parameter `sum_update` reduces has (it gives zeros to the others)."""
    assert p.grad is not None
    return p.grad


def _buckets(params: list[torch.nn.Parameter]) -> Iterator[list[torch.nn.Parameter]]:
    """Consecutive parameters of one dtype, at most `BUCKET_ELEMENTS` per bucket (a larger one alone)."""
    bucket: list[torch.nn.Parameter] = []
    size = 0
    for p in params:
        if bucket and (_grad(p).dtype != _grad(bucket[0]).dtype or size + p.numel() > BUCKET_ELEMENTS):
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
