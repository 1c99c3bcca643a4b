"""On a CUDA GPU: the trainer on the model's device, vLLM's log-probs against the trainer's under nucleus
sampling, one shared vLLM engine that releases the GPU for training and reloads the next checkpoint, and
a whole round (rollouts, training, evaluation) with each engine through `creditline run`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"


def test_training_runs_on_the_models_device(tiny_policy_dir):
    from creditline.engines import SamplingParams, TorchEngine
    from creditline.policy.models import load_policy
    from creditline.rollout.episodes import encode_prompt
    from creditline.train.trainer import TrainConfig, pack, train

    model, tokenizer = load_policy(tiny_policy_dir, "cuda")
    engine = TorchEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id, "cuda")
    prompts = [encode_prompt(tokenizer, "go key left 2 down 1 last none")] * 8
    completions = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=2, seed=0))
    batch = pack(prompts, [c.token_ids for c in completions], [c.logprobs for c in completions],
                 [[1.0 if i % 2 else -1.0] * len(c.token_ids) for i, c in enumerate(completions)],
                 tokenizer.pad_token_id)  # fmt: skip
    metrics, _ = train(model, batch, TrainConfig(epochs=1, minibatches=2), temperature=1.0, seed=0)
    assert len(metrics) == 2 and all(torch.isfinite(torch.tensor(m["loss"])) for m in metrics)
    assert metrics[0]["sampler_kl"] < 1e-2  # bf16 autocast: small, not zero


def test_vllm_processed_logprobs_under_top_p_are_the_trainers(tiny_policy_dir):
    pytest.importorskip("vllm")
    from creditline.engines import SamplingParams
    from creditline.engines.vllm_engine import VLLMEngine
    from creditline.policy.models import load_policy
    from creditline.rollout.episodes import encode_prompt
    from creditline.train.trainer import TrainConfig, pack, score

    model, tokenizer = load_policy(tiny_policy_dir, "cuda")
    prompts = [encode_prompt(tokenizer, f"go key left {x} down 1 last none") for x in range(5)] * 8
    engine = VLLMEngine.shared(tiny_policy_dir)
    completions = engine.generate(
        prompts, SamplingParams(temperature=0.9, top_p=0.8, max_new_tokens=3, seed=1)
    )
    batch = pack(prompts, [c.token_ids for c in completions], [c.logprobs for c in completions],
                 [[0.0] * len(c.token_ids) for c in completions], tokenizer.pad_token_id)  # fmt: skip
    trainer = score(model, batch, 0.9, TrainConfig(bf16=False), top_p=0.8)
    mask = batch.completion_mask
    assert float((trainer[mask] - batch.old_logprobs[mask]).abs().max()) < 1e-2


def test_one_vllm_engine_per_process_sleeps_for_training_and_reloads_weights(tiny_policy_dir, tmp_path):
    pytest.importorskip("vllm")
    from creditline.engines import SamplingParams, release_generation_memory
    from creditline.engines.vllm_engine import VLLMEngine
    from creditline.policy.models import load_policy, save_policy
    from creditline.rollout.episodes import encode_prompt

    model, tokenizer = load_policy(tiny_policy_dir)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.5)
    changed = save_policy(model, tokenizer, tmp_path / "changed")
    prompts = [encode_prompt(tokenizer, f"pos {x} 1 key 2 3 door 4 0 have no last none") for x in range(5)]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=3)
    engine = VLLMEngine.shared(tiny_policy_dir)
    before = engine.generate(prompts, greedy)
    free_awake = torch.cuda.mem_get_info()[0]
    release_generation_memory()
    assert torch.cuda.mem_get_info()[0] > free_awake  # the weights and KV cache left the GPU
    assert VLLMEngine.shared(changed) is engine  # same architecture: reloaded, not rebuilt
    after = engine.generate(prompts, greedy)
    assert [c.logprobs for c in after] != [c.logprobs for c in before]


@pytest.mark.parametrize("engine", ["torch", "vllm"])
def test_a_whole_round_on_the_gpu(tmp_path, engine):
    if engine == "vllm":
        pytest.importorskip("vllm")
    config = tmp_path / "gpu.toml"
    config.write_text(
        TINY.read_text().replace("[rollouts]", f'[rollouts]\nengine = "{engine}"\ndevice = "cuda"')
    )
    env = os.environ | {"CREDITLINE_DATA_ROOT": str(tmp_path / "root")}
    run = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--experiment", f"gpu-{engine}",
                          "--config", str(config), "--rounds", "1"], env=env, capture_output=True, text=True,
                         timeout=1200)  # fmt: skip
    assert run.returncode == 0, run.stderr
    verify = subprocess.run([sys.executable, "-m", "pipelines.cli", "verify", "--experiment", f"gpu-{engine}"],
                            env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert verify.returncode == 0, verify.stdout
