"""Hermes-style tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks in a completion.

Qwen2.5 and most open chat models (NousResearch's Hermes format) call tools by writing JSON objects between
`<tool_call>` and `</tool_call>` in their text. An OpenAI-compatible server turns those blocks into the
message's `tool_calls`; clients such as verifiers then run the tools and answer with `tool` messages.

`parse_tool_calls` follows vLLM's `hermes` tool parser (vllm/entrypoints/openai/tool_parsers/
hermes_tool_parser.py) so that a rollout served here reads as it would from `vllm serve
--tool-call-parser hermes`:

- blocks are found with `<tool_call>(.*?)</tool_call>|<tool_call>(.*)` (a last block left open by a
  completion cut at `max_tokens` still counts);
- every block must be a JSON object with `name` and `arguments`; if any is not, no tool call is returned
  and the whole text stays the content (vLLM logs the error and does the same);
- `arguments` is re-serialised as a JSON string (`ensure_ascii=False`), as the OpenAI API carries it;
- the content is the text before the first `<tool_call>` (None when empty); text between or after blocks
  is dropped, as vLLM drops it.

Only the text is parsed: the sampled token ids are never re-tokenised.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


@dataclass(frozen=True)
class ParsedToolCalls:
    content: str | None
    """The assistant message's text content (None when empty)."""
    tool_calls: list[dict]
    """OpenAI `tool_calls`: `{"id": "call_<i>", "type": "function", "function": {"name", "arguments"}}`,
    `arguments` a JSON string. Empty when the text holds no (well-formed) tool call."""


def parse_tool_calls(text: str) -> ParsedToolCalls:
    """Split a completion's text into content and OpenAI tool calls, as vLLM's hermes parser does."""
    if TOOL_CALL_START not in text:
        return ParsedToolCalls(content=text, tool_calls=[])
    try:
        blocks = [json.loads(closed or open_) for closed, open_ in TOOL_CALL_BLOCK.findall(text)]
        calls = [
            {
                "id": f"call_{index}",
                "type": "function",
                "function": {
                    "name": block["name"],
                    "arguments": json.dumps(block["arguments"], ensure_ascii=False),
                },
            }
            for index, block in enumerate(blocks)
        ]
    except (ValueError, TypeError, KeyError):  # bad JSON, a non-object block, a missing key
        return ParsedToolCalls(content=text, tool_calls=[])
    content = text[: text.find(TOOL_CALL_START)]
    return ParsedToolCalls(content=content or None, tool_calls=calls)
