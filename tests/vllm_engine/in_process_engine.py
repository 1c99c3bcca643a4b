"""Run by test_in_process.py in a process of its own, as `creditline serve` and a round's step hold their
engine: `VLLMEngine.shared` starts an engine whose engine core runs in this process on the untied
checkpoint in float32 and samples with it; then it is asked for the same checkpoint's engine in float16
(another key), and must close the first before it starts the second. Writes what it saw as JSON to `out`.

    python -m tests.vllm_engine.in_process_engine UNTIED_CHECKPOINT OUT  (in the repository)
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from creditline.engines.vllm_engine import VLLMEngine
from creditline.liveness import stat_fields
from tests.vllm_engine.conftest import SETTINGS
from tests.vllm_engine.test_engine import FLOAT16_SAMPLED, SAMPLED, prompts


def children() -> list[str]:
    """The names of this process's children (vLLM's engine processes name themselves VLLM::…)."""
    names = []
    for entry in Path("/proc").iterdir():
        fields = stat_fields(entry.name) if entry.name.isdigit() else None
        if fields is not None and fields[1] == str(os.getpid()):  # field 4, the parent
            try:
                names.append(Path(f"/proc/{entry.name}/comm").read_text().strip())
            except OSError:  # ended meanwhile
                pass
    return names


def main(untied: str, out: str) -> None:
    settings = replace(SETTINGS, in_process=True)
    seen: dict = {
        "float32_rows": prompts("untied", untied),
        "float16_rows": prompts("untied", untied, copies=8),
    }
    first = VLLMEngine.shared(untied, settings)
    seen["float32"] = [[c.token_ids, c.logprobs] for c in first.generate(seen["float32_rows"], SAMPLED)]
    seen["children_first"] = children()
    second = VLLMEngine.shared(untied, replace(settings, dtype="float16"))
    seen["first_closed"] = first not in VLLMEngine._running and first not in VLLMEngine._shared.values()
    seen["float16"] = [
        [c.token_ids, c.logprobs] for c in second.generate(seen["float16_rows"], FLOAT16_SAMPLED)
    ]
    seen["children_second"] = children()
    second.close()
    Path(out).write_text(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:])
