"""v1 taskset: sums through the `add` tool, up to 3 model calls. Taskset id: creditline_vf_tool_calls."""

import verifiers.v1 as vf
from creditline_vf_common import ArithData, InProcessChatHarness, ToolTask
from tasks import TOOL_EVAL, TOOL_SYSTEM, tool_question


class ToolCallsTaskset(vf.Taskset[ToolTask, vf.TasksetConfig]):
    def load(self) -> list[ToolTask]:
        return [ToolTask(ArithData(prompt=tool_question(a, b), system_prompt=TOOL_SYSTEM, a=a, b=b,
                                   answer=str(a + b), use_tools=True)) for a, b in TOOL_EVAL]  # fmt: skip


__all__ = ["ToolCallsTaskset", "InProcessChatHarness"]
