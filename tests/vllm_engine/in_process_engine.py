"""Run by test_in_process.py in a process of its own, as `creditline serve` and a round's step hold their
engine: `VLLMEngine.shared` starts an engine whose engine core runs in this process on the untied
checkpoint in float32 and samples with it; then it is asked for the same checkpoint's engine in float16
(another key), and must close (and free) the first before it starts the second. Writes what it saw as JSON
to `out`.

    python -m tests.vllm_engine.in_process_engine UNTIED_CHECKPOINT OUT  (in the repository)
"""

from __future__ import annotations

import json
import os
import random
import sys
import weakref
from dataclasses import replace
from pathlib import Path
from random import Random

import torch

from creditline.engines.vllm_engine import MULTIPROCESSING_ENV, VLLMEngine
from creditline.liveness import descendants
from tests.vllm_engine.conftest import SETTINGS
from tests.vllm_engine.test_engine import FLOAT16_SAMPLED, SAMPLED, prompts


def children() -> list[str]:
    """The names of the processes below this one (vLLM's engine processes name themselves VLLM::…)."""
    names = []
    for pid in descendants(os.getpid()):
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:  # ended meanwhile
            pass
    return names


def main(untied: str, out: str) -> None:
    settings = replace(SETTINGS, in_process=True)
    seen: dict = {
        "float32_rows": prompts("untied", untied),
        "float16_rows": prompts("untied", untied, copies=8),
    }
    set_num_threads = torch.set_num_threads
    random.seed(7)
    first = VLLMEngine.shared(untied, settings)
    seen["process_state_kept"] = {  # what the build changed that is not the engine's, put back
        "environment": os.environ.get(MULTIPROCESSING_ENV),  # unset in the test's environment
        "set_num_threads": torch.set_num_threads is set_num_threads,
        "random": random.random() == Random(7).random(),
    }
    seen["float32"] = [[c.token_ids, c.logprobs] for c in first.generate(seen["float32_rows"], SAMPLED)]
    seen["children_first"] = children()
    first_core = weakref.ref(
        first.llm.llm_engine.engine_core.engine_core
    )  # vLLM's EngineCore, in this process
    second = VLLMEngine.shared(untied, replace(settings, dtype="float16"))
    seen["first_closed"] = first not in VLLMEngine._running and first not in VLLMEngine._shared.values()
    seen["first_freed"] = first_core() is None  # its weights and KV cache with it
    try:
        first.generate(seen["float32_rows"], SAMPLED)
        seen["closed_refuses"] = False
    except RuntimeError as error:
        seen["closed_refuses"] = "after close" in str(error)
    seen["float16"] = [
        [c.token_ids, c.logprobs] for c in second.generate(seen["float16_rows"], FLOAT16_SAMPLED)
    ]
    seen["children_second"] = children()
    second.close()
    seen["distributed_after_close"] = torch.distributed.is_initialized()
    Path(out).write_text(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:])
