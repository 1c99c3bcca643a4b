"""Stop strings: a completion also ends as soon as its text contains one of the caller's strings.

The semantics are vLLM's with `include_stop_str_in_output=True`, so that both engines give the same rows:
after each sampled token the completion's text (decoded without special tokens) is searched; the first
token whose text completes a stop string is the completion's last token (kept, with its log-prob: it was
sampled), `finish_reason` is "stop" as at the EOS, and the completion's text ends with the stop string
(characters the same token added after it are dropped: `cut_after_stop`).

A stop string can end in the middle of a token (`"</a"` inside the token `"</answer"`): the token ids
keep the whole token, as sampled, and only the text is cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the watch takes the torch engine's tensors; finding a stop string needs no torch
    import torch


def stop_end(text: str, stop: Sequence[str]) -> int | None:
    """Index just past the stop string that ends first in `text`, or None if none occurs."""
    ends = [text.find(s) + len(s) for s in stop if s in text]
    return min(ends) if ends else None


def cut_after_stop(text: str, stop: Sequence[str]) -> str:
    """`text` up to and including its first stop string (all of it when none occurs)."""
    end = stop_end(text, stop)
    return text if end is None else text[:end]


class StopStringWatch:
    """Watches the rows of one batched generation for stop strings, one sampled token at a time.

    Each step decodes only a row's newest tokens: a stop string that the newest token completes lies
    within the last `window` tokens (a byte-level token holds at least one byte, so a string of n bytes
    spans at most n tokens; the margin covers a first token that starts mid-character and special tokens,
    which decode to nothing). A stop string completed earlier was caught at its own step.
    """

    def __init__(self, tokenizer, stop: Sequence[str], batch_size: int):
        if any(not s for s in stop):
            raise ValueError("a stop string must not be empty")
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.window = 2 * max(len(s.encode()) for s in self.stop) + 8
        self.rows: list[list[int]] = [[] for _ in range(batch_size)]

    def hits(self, tokens: torch.Tensor, finished: torch.Tensor) -> torch.Tensor:
        """Append this step's `tokens` (B,) to the rows not `finished` (B,); return the rows (B,) bool
        whose text now contains a stop string."""
        hit = finished.new_zeros(finished.shape)  # (B,) bool
        for row in (~finished).nonzero().flatten().tolist():
            ids = self.rows[row]
            ids.append(int(tokens[row]))
            text = self.tokenizer.decode(ids[-self.window :], skip_special_tokens=True)
            hit[row] = any(s in text for s in self.stop)
        return hit
