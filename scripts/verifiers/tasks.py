"""The tiny tasks behind the verifiers test data: plain Python, shared by make_policy.py (project venv) and
the environments in v03/ and v04/ (one verifiers venv each). No downloads, no randomness at import.

- single-turn arithmetic: "What is 3 + 4?", answer "7"; the policy is taught to reply "The answer is 7."
- tool arithmetic: "Use the add tool to compute 23 + 48.", answer "71"; the policy is taught to call
  `add` with a hermes `<tool_call>` block, read the tool's result and reply "The answer is 71."
"""

from __future__ import annotations

import json
import re

QA_SYSTEM = "Answer the question. End with: The answer is N."
TOOL_SYSTEM = "You can call tools. Use add to compute the sum, then give the answer."

# Eval tasks (what the verifiers environments run): fixed, small.
QA_EVAL = [(3, 4), (5, 2), (6, 3), (1, 8), (7, 7), (2, 9)]
TOOL_EVAL = [(23, 48), (15, 31), (62, 17), (44, 29), (38, 51)]


def qa_question(a: int, b: int) -> str:
    return f"What is {a} + {b}?"


def tool_question(a: int, b: int) -> str:
    return f"Use the add tool to compute {a} + {b}."


def answer_text(n: int | str) -> str:
    return f"The answer is {n}."


def tool_call_text(a: int, b: int) -> str:
    """Hermes tool call as the chat template renders an assistant `tool_calls` entry."""
    return "<tool_call>\n" + json.dumps({"name": "add", "arguments": {"a": a, "b": b}}) + "\n</tool_call>"


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "properties": {
                "a": {"description": "The first integer.", "title": "A", "type": "integer"},
                "b": {"description": "The second integer.", "title": "B", "type": "integer"},
            },
            "required": ["a", "b"],
            "title": "add_args",
            "type": "object",
            "additionalProperties": False,
        },
        "strict": True,
    },
}
"""The OpenAI tool that verifiers 0.3.1's ToolEnv derives from `add(a: int, b: int) -> int` and its
docstring (checked by running it); the v0.4 harness sends the same one."""


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


NUMBER = re.compile(r"answer is\s*(-?\d+)")


def parsed_answer(text: str | None) -> str | None:
    """The N of the last "The answer is N" in `text`, else None."""
    found = NUMBER.findall(text or "")
    return found[-1] if found else None
