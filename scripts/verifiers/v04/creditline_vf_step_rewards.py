"""v1 taskset: the add-tool sums, with step-level credit preset on message nodes.

verifiers 0.4.0's v1 has no per-step reward (rewards live on the trace: `trace.rewards`) and no hook that
computes advantages; its data model does carry per-token credit on each sampled message node,
`MessageNode.advantages` (same layout as `logprobs`: one value per sampled token), which consumers such as
prime-rl stamp. This task writes it from a scoring hook (`@vf.metric`, which receives the trace before it is
saved): every sampled node whose reply calls `add` with the task's operands gets +1.0 on each sampled token,
a tool call with other operands -1.0; nodes without a tool call (the final answers) are left unassigned, so
their `advantages` key is absent from the saved line. Taskset id: creditline_vf_step_rewards.
"""

import json

import verifiers.v1 as vf
from creditline_vf_common import ArithData, InProcessChatHarness, ToolTask
from tasks import TOOL_EVAL, TOOL_SYSTEM, tool_question


class StepCreditTask(ToolTask):
    @vf.metric
    async def preset_node_advantages(self, trace: vf.Trace) -> float:
        """Assign per-node advantages on tool-call nodes; the metric is how many nodes got one."""
        assigned = 0
        for node in trace.nodes:
            calls = node.message.tool_calls if node.sampled and node.message.role == "assistant" else None
            if not calls:
                continue
            try:
                arguments = json.loads(calls[0].arguments)
            except ValueError:
                arguments = None
            good = calls[0].name == "add" and arguments == {"a": self.data.a, "b": self.data.b}
            node.advantages = [1.0 if good else -1.0] * sum(node.mask)
            assigned += 1
        return float(assigned)


class StepRewardsTaskset(vf.Taskset[StepCreditTask, vf.TasksetConfig]):
    def load(self) -> list[StepCreditTask]:
        return [StepCreditTask(ArithData(prompt=tool_question(a, b), system_prompt=TOOL_SYSTEM, a=a, b=b,
                                         answer=str(a + b), use_tools=True)) for a, b in TOOL_EVAL]  # fmt: skip


__all__ = ["StepRewardsTaskset", "InProcessChatHarness"]
