"""v1 taskset: single-turn sums ("What is 3 + 4?"), no tools. Taskset id: creditline_vf_single_turn."""

import verifiers.v1 as vf
from creditline_vf_common import ArithData, InProcessChatHarness, SingleTurnTask
from tasks import QA_EVAL, QA_SYSTEM, qa_question


class SingleTurnTaskset(vf.Taskset[SingleTurnTask, vf.TasksetConfig]):
    def load(self) -> list[SingleTurnTask]:
        return [SingleTurnTask(ArithData(prompt=qa_question(a, b), system_prompt=QA_SYSTEM, a=a, b=b,
                                         answer=str(a + b))) for a, b in QA_EVAL]  # fmt: skip


__all__ = ["SingleTurnTaskset", "InProcessChatHarness"]
