"""The runners' shared command line (see `__init__.py`); imported by path, beside them, in the verifiers
venv."""

from __future__ import annotations

import argparse


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("--base-url", "--model", "--policy", "--env-id", "--env-args", "--out"):
        parser.add_argument(name, required=True)
    for name in ("--num-examples", "--rollouts-per-example", "--max-tokens", "--seed"):
        parser.add_argument(name, required=True, type=int)
    parser.add_argument("--temperature", required=True, type=float)
    parser.add_argument("--split", choices=("train", "eval"), default="train")
    parser.add_argument("--select", default="{}")
    parser.add_argument("--path", action="append", default=[])
    return parser.parse_args()
