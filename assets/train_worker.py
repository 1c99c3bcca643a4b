"""One training process of a round under torchrun: the round's training stage, data parallel over W ranks.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m assets.train_worker \\
        --parent r001/policy --steps r002/steps.parquet --advantages r002/advantages.parquet \\
        --config config.json --round 2 --output r002/policy [--optimizer-state r001/policy/optimizer.pt]

Every rank reads the same inputs from files (the parent checkpoint folder, the round's steps and
advantages tables, the experiment config as `ExperimentConfig.to_dict()` JSON), joins torchrun's process
group (gloo on CPU, nccl on CUDA) and calls the same stage as one process, `creditline.round.train_policy`;
the trainer splits every minibatch across the ranks (`creditline.train.distributed`). Rank 0 then writes the
checkpoint folder with `save_policy` (atomically, as the in-process path does) and the metrics.

Launched by the `checkpoint` asset through Dagster Pipes, rank 0 sends the per-update metrics back as a
Pipes custom message (the asset records them; the materialisation itself stays the asset's, which knows
the lineage) and logs a line. Without Pipes, `--metrics` writes them as JSON. This module is the effectful
shell of one process, so it lives beside the asset that launches it, not in the pure core: it imports
`dagster_pipes` (Dagster's dependency-free protocol package), never `dagster`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from dagster_pipes import PipesContext, PipesEnvVarParamsLoader, open_dagster_pipes
from torch.distributed.tensor import DTensor

from creditline.config import read_registered
from creditline.policy.models import load_policy, save_policy
from creditline.round import train_policy
from creditline.store import read_parquet, write_json_atomic
from creditline.train.distributed import SHARDINGS, process_group, rank_and_size, whole_state_dict


def torchrun_command(
    python: str,
    processes: int,
    *,
    parent: str | Path,
    steps: str | Path,
    advantages: str | Path,
    config: str | Path,
    round_: int,
    output: str | Path,
    optimizer_state: str | Path | None = None,
    reference: str | Path | None = None,
    sharding: str = "replicated",
) -> list[str]:
    """The command that trains a round on `processes` ranks of this node (torchrun's standalone
    rendezvous)."""
    if processes < 1:
        raise ValueError(f"train_processes: {processes} is not a number of processes (at least 1)")
    command = [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(processes),
        "-m",
        "assets.train_worker",
        "--parent",
        str(parent),
        "--steps",
        str(steps),
        "--advantages",
        str(advantages),
        "--config",
        str(config),
        "--round",
        str(round_),
        "--output",
        str(output),
    ]
    if optimizer_state is not None:
        command += ["--optimizer-state", str(optimizer_state)]
    if reference is not None:
        command += ["--reference", str(reference)]
    if sharding != "replicated":
        command += ["--sharding", sharding]
    return command


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    config = read_registered(json.loads(Path(args.config).read_text()))  # checked by the parent: run nothing
    with process_group(args.device or config.rollouts.device) as device:
        rank, world = rank_and_size()
        with _pipes(rank) as pipes:
            model, tokenizer = load_policy(args.parent, device, sharded=args.sharding == "fsdp")
            if args.sharding == "fsdp" and rank == 0:
                print(
                    f"fsdp: sharded across {world} ranks; rank 0 holds {_held_block_elements(model)} of "
                    f"{_block_elements(model)} block parameter elements",
                    file=sys.stderr,
                    flush=True,
                )
            steps, advantages = read_parquet(args.steps), read_parquet(args.advantages)
            state = None
            if args.optimizer_state:
                state = torch.load(args.optimizer_state, map_location="cpu", weights_only=True)
            metrics, optimizer_state = train_policy(
                model,
                tokenizer,
                steps,
                advantages,
                config,
                args.round,
                state,
                reference_policy=args.reference,
            )
            whole = whole_state_dict(model) if args.sharding == "fsdp" else None  # every rank gathers
            if rank != 0:
                return
            save_policy(model, tokenizer, args.output, optimizer_state, state_dict=whole)
            if args.metrics:
                write_json_atomic(metrics, args.metrics)
            if pipes is not None:
                pipes.report_custom_message({"metrics": metrics})
                pipes.log.info(
                    f"round {args.round} trained on {world} ranks: {len(metrics)} updates, "
                    f"last loss {metrics[-1]['loss']:.4g}"
                )


def _block_elements(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if isinstance(p, DTensor))


def _held_block_elements(model: torch.nn.Module) -> int:
    return sum(p.to_local().numel() for p in model.parameters() if isinstance(p, DTensor))


@contextmanager
def _pipes(rank: int) -> Iterator[PipesContext | None]:
    """Rank 0's Pipes session when Dagster launched this run (None otherwise: no warning, no mock)."""
    if rank != 0 or not PipesEnvVarParamsLoader().is_dagster_pipes_process():
        yield None
        return
    with open_dagster_pipes() as pipes:
        yield pipes


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="assets.train_worker", description=__doc__.splitlines()[0])
    parser.add_argument("--parent", required=True, help="the parent checkpoint folder")
    parser.add_argument("--steps", required=True, help="the round's steps table (Parquet)")
    parser.add_argument("--advantages", required=True, help="the round's advantages table (Parquet)")
    parser.add_argument("--config", required=True, help="the ExperimentConfig.to_dict() JSON")
    parser.add_argument("--round", type=int, required=True, help="seeds the minibatch order")
    parser.add_argument("--output", required=True, help="the checkpoint folder to write (rank 0, atomically)")
    parser.add_argument("--optimizer-state", help="the parent's optimiser state (torch.save'd); none: fresh")
    parser.add_argument("--reference", help="the reference policy folder (when [train] kl_coef > 0)")
    parser.add_argument(
        "--sharding",
        default="replicated",
        choices=SHARDINGS,
        help="replicated: every rank holds the whole model; fsdp: its blocks split across the ranks",
    )
    parser.add_argument("--device", help="default: the config's rollouts.device (cuda: one GPU per rank)")
    parser.add_argument("--metrics", help="also write the per-update metrics here as JSON (rank 0)")
    return parser


if __name__ == "__main__":
    main()
