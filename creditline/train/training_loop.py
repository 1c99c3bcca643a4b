"""The one training loop: epochs of shuffled minibatches, one clipped AdamW step per minibatch.

The policy update (`trainer.train`), the step-reward models (`reward_model.train_reward_model`) and the
warm start (`warm_start.warm_start`) differ only in what a minibatch's gradient is and how the shuffled
order is cut into minibatches; the loop around them is this one:

    for epoch in 1..E:
        order = randperm(N)                       (one seeded generator for the whole fit)
        for each minibatch b of split(order):
            zero the gradients; accumulate ∂L_b/∂θ; clip ‖∇‖ to max_grad_norm; AdamW step

`adamw` builds the optimiser, resuming a previous round's state (moments and step counts) at this round's
learning rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from creditline import progress

Result = TypeVar("Result")


def adamw(
    parameters: Iterable[torch.nn.Parameter],
    learning_rate: float,
    weight_decay: float,
    state: dict | None = None,
    foreach: bool | None = None,
) -> torch.optim.AdamW:
    """AdamW over `parameters`; with `state` (a previous fit's `state_dict()`), its moments resumed and every
    group's learning rate set to `learning_rate` (a state dict carries the rate it was saved with)."""
    optimizer = torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=weight_decay, foreach=foreach)
    if state is not None:
        optimizer.load_state_dict(state)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
    return optimizer


@dataclass(frozen=True)
class Update(Generic[Result]):
    """One optimiser step: its epoch, minibatch index, gradient norm before clipping, and what the
    minibatch's `accumulate` returned (its loss sums, counts)."""

    epoch: int
    minibatch: int
    grad_norm: float
    result: Result


def minibatch_updates(
    optimizer: torch.optim.Optimizer,
    parameters: Callable[[], Iterable[torch.nn.Parameter]],
    items: int,
    epochs: int,
    seed: int,
    split: Callable[[torch.Tensor], Iterable],
    accumulate: Callable[..., Result],
    max_grad_norm: float,
    clip: Callable[..., torch.Tensor] = torch.nn.utils.clip_grad_norm_,
) -> Iterator[Update[Result]]:
    """Run the loop (module doc), yielding each `Update` right after its step.

    items: N, the count shuffled each epoch (one generator, seeded with `seed`, for every epoch);
    split(order) → the minibatches (each what `accumulate` takes);
    accumulate(minibatch) adds the minibatch's ∂L/∂θ to the parameters' `.grad` and returns its metrics;
    clip(parameters, max_grad_norm) → the norm before clipping (a sharded model passes its own).
    """
    generator = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        order = torch.randperm(items, generator=generator)
        parts = list(split(order))
        for part, minibatch in enumerate(parts):
            optimizer.zero_grad(set_to_none=True)
            result = accumulate(minibatch)
            grad_norm = clip(parameters(), max_grad_norm)
            optimizer.step()
            progress.update(epoch * len(parts) + part + 1, epochs * len(parts), "updates")
            yield Update(epoch, part, float(grad_norm), result)
