"""Build the small chat policy that `creditline serve` serves to verifiers when making the test data.

Run with the project venv:  .venv/bin/python scripts/verifiers/make_policy.py [FOLDER]
(default FOLDER: tests/data/verifiers/policy). Deterministic: the same code gives the same weights.

1. `creditline.policy.chat_policy.build_chat_policy` (Qwen2 + byte-level BPE + ChatML, seed 0) on a corpus made of
   the tasks' texts, the `add` tool's JSON schema and hermes tool calls.
2. Tool calling: `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>` become added tokens
   (single ids, as in Qwen2.5: verifiers 0.4.0's hermes parser finds calls by token id), the embeddings are
   resized, and the chat template is replaced by a hermes-aware ChatML template (tools listed in the system
   turn, assistant `tool_calls` as `<tool_call>{json}</tool_call>`, each tool result as its own
   `<|im_start|>user\\n<tool_response>...` turn) that stays prefix-stable message by message.
3. A short fine-tune (plain next-token cross-entropy on the assistant tokens of chat-formatted
   demonstrations: single-turn "The answer is N." and add-tool conversations), so that the served model
   emits well-formed tool calls often and answers the sums sometimes right.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tasks import (  # noqa: E402
    ADD_TOOL,
    QA_SYSTEM,
    TOOL_SYSTEM,
    answer_text,
    qa_question,
    tool_call_text,
    tool_question,
)

from creditline.policy.chat_policy import ChatPolicyConfig, build_chat_policy  # noqa: E402
from creditline.policy.models import load_policy, save_policy  # noqa: E402

SEED = 0
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

HERMES_CHATML_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}"
    "{%- if tool.function is defined %}{{- tool.function | tojson }}{%- else %}{{- tool | tojson }}{%- endif %}"
    "{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message['content'] %}{{- message['content'] }}{%- endif %}"
    "{%- if message['tool_calls'] %}"
    "{%- for tool_call in message['tool_calls'] %}"
    "{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + tool_call.name + \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML with hermes tool calls (Qwen2.5's shapes, simplified: no default system message, one user turn per
tool result so that rendering `messages[:k]` is a prefix of rendering `messages`)."""


def qa_conversation(a: int, b: int) -> tuple[list[dict], None]:
    return [
        {"role": "system", "content": QA_SYSTEM},
        {"role": "user", "content": qa_question(a, b)},
        {"role": "assistant", "content": answer_text(a + b)},
    ], None


def tool_conversation(a: int, b: int) -> tuple[list[dict], list[dict]]:
    call = {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}
    return [
        {"role": "system", "content": TOOL_SYSTEM},
        {"role": "user", "content": tool_question(a, b)},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "name": "add", "content": str(a + b)},
        {"role": "assistant", "content": answer_text(a + b)},
    ], [ADD_TOOL]


def demonstrations(rng: random.Random) -> list[tuple[list[dict], list[dict] | None]]:
    demos = [qa_conversation(a, b) for a in range(1, 10) for b in range(1, 10)]
    demos += [tool_conversation(rng.randint(10, 69), rng.randint(10, 69)) for _ in range(160)]
    return demos


def corpus(rng: random.Random) -> list[str]:
    texts = [QA_SYSTEM, TOOL_SYSTEM, json.dumps(ADD_TOOL["function"])] * 20
    for _ in range(200):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        texts += [qa_question(a, b), answer_text(a + b)]
        a, b = rng.randint(10, 69), rng.randint(10, 69)
        texts += [tool_question(a, b), tool_call_text(a, b), str(a + b), answer_text(a + b)]
    return texts


def render(tokenizer, messages, tools, add_generation_prompt=False) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def training_example(tokenizer, messages, tools) -> tuple[list[int], list[int]]:
    """Ids of the whole conversation and labels that keep only the assistant turns (through `<|im_end|>`)."""
    ids = render(tokenizer, messages, tools)
    labels = [-100] * len(ids)
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = len(render(tokenizer, messages[:k], tools, add_generation_prompt=True))
        end = len(render(tokenizer, messages[: k + 1], tools)) - 1  # the template's "\n" after <|im_end|>
        assert ids[:end] == render(tokenizer, messages[: k + 1], tools)[:end], "template not prefix-stable"
        labels[start:end] = ids[start:end]
    return ids, labels


def fine_tune(model, examples, steps: int, batch_size: int, lr: float, pad_id: int) -> list[float]:
    generator = torch.Generator().manual_seed(SEED)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 20) * (1 - s / steps)
    )
    model.train()
    losses = []
    for step in range(steps):
        picks = torch.randint(len(examples), (batch_size,), generator=generator).tolist()
        batch = [examples[i] for i in picks]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((batch_size, width), pad_id)
        labels = torch.full((batch_size, width), -100)
        attention = torch.zeros((batch_size, width), dtype=torch.long)
        for row, (ids, labs) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(labs)] = torch.tensor(labs)
            attention[row, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step:4d} loss {loss.item():.3f}", flush=True)
    model.eval()
    return losses


def main(folder: str = "tests/data/verifiers/policy", steps: int = 500) -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    rng = random.Random(SEED)
    folder = Path(folder)
    started = time.time()
    build_chat_policy(folder, corpus(rng), ChatPolicyConfig(seed=SEED))
    model, tokenizer = load_policy(folder)
    tokenizer.add_tokens(TOOL_TOKENS)
    tokenizer.chat_template = HERMES_CHATML_TEMPLATE
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    examples = [training_example(tokenizer, m, t) for m, t in demonstrations(rng)]
    longest = max(len(ids) for ids, _ in examples)
    print(f"vocab {len(tokenizer)}, {len(examples)} demonstrations, longest {longest} tokens", flush=True)
    fine_tune(model, examples, steps=steps, batch_size=16, lr=3e-3, pad_id=tokenizer.pad_token_id)
    save_policy(model, tokenizer, folder)
    print(f"wrote {folder} in {time.time() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:2])
