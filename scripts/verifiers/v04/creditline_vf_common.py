"""Shared parts of the verifiers 0.4.0 (v1) test-data environments: task data, rewards, and an in-process
chat harness.

The ready-made v1 harnesses launch a program with `uv` (and tool servers as MCP processes); this machine has
no `uv`, so `InProcessChatHarness.launch` runs the agent loop in-process, which the `Harness.launch`
contract allows: every model call goes to the interception `endpoint` with the rollout's `secret` (so the
trace records it, and the train client turns it into token ids via vLLM's /inference/v1/generate), and the
harness returns a synthetic success `ProgramResult`. Tools are plain Python functions the harness executes
itself (the `add` tool); the model sees them as OpenAI `tools` on each request.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import verifiers.v1 as vf
from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks import ADD_TOOL, add, parsed_answer  # noqa: E402

TOOLS = {"add": add}


class ArithData(vf.TaskData):
    a: int
    b: int
    answer: str
    use_tools: bool = False


def assistant_texts(trace: vf.Trace) -> list[str]:
    """Text of each assistant message on the trace's (last) branch, in order."""
    branch = trace.branches[-1].messages if trace.branches else []
    return [m.content if isinstance(m.content, str) else "" for m in branch if m.role == "assistant"]


def final_text(trace: vf.Trace) -> str:
    texts = assistant_texts(trace)
    return texts[-1] if texts else ""


def tool_calls(trace: vf.Trace) -> list:
    branch = trace.branches[-1].messages if trace.branches else []
    return [c for m in branch if m.role == "assistant" for c in (m.tool_calls or [])]


class InProcessChatHarnessConfig(vf.HarnessConfig):
    max_turns: int = 3
    """Model calls per rollout at most (the loop stops earlier when a reply calls no tool)."""


class InProcessChatHarness(vf.Harness[InProcessChatHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        system, prompt = self.resolve_prompt(data)
        messages: list[dict] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        tools = [ADD_TOOL] if getattr(data, "use_tools", False) else None
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            for _ in range(self.config.max_turns):
                kwargs = {"tools": tools} if tools else {}
                response = await client.chat.completions.create(model=ctx.model, messages=messages, **kwargs)
                message = response.choices[0].message
                calls = message.tool_calls or []
                entry: dict = {"role": "assistant", "content": message.content}
                if calls:
                    entry["tool_calls"] = [
                        {"id": c.id, "type": "function",
                         "function": {"name": c.function.name, "arguments": c.function.arguments}}
                        for c in calls
                    ]  # fmt: skip
                messages.append(entry)
                if not tools or not calls:
                    break
                for call in calls:
                    try:
                        result = str(TOOLS[call.function.name](**json.loads(call.function.arguments)))
                    except Exception as exc:  # a bad call is answered, as verifiers' ToolEnv does
                        result = f"Error: {type(exc).__name__}: {exc}"
                    messages.append({"role": "tool", "tool_call_id": call.id, "name": call.function.name,
                                     "content": result})  # fmt: skip
        finally:
            await client.close()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


class SingleTurnTask(vf.Task[ArithData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if parsed_answer(final_text(trace)) == self.data.answer else 0.0

    @vf.reward(weight=0.5)
    async def close(self, trace: vf.Trace) -> float:
        got = parsed_answer(final_text(trace))
        return 1.0 if got is not None and abs(int(got) - int(self.data.answer)) <= 1 else 0.0

    @vf.metric
    async def answer_chars(self, trace: vf.Trace) -> float:
        return float(len(final_text(trace)))


class ToolTask(vf.Task[ArithData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if parsed_answer(final_text(trace)) == self.data.answer else 0.0

    @vf.reward(weight=0.25)
    async def used_add(self, trace: vf.Trace) -> float:
        return 1.0 if any(c.name == "add" for c in tool_calls(trace)) else 0.0

    @vf.metric
    async def answer_chars(self, trace: vf.Trace) -> float:
        return float(len(final_text(trace)))

    @vf.metric
    async def num_tool_calls(self, trace: vf.Trace) -> float:
        return float(len(tool_calls(trace)))
