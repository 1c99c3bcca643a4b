"""Best-effort interleaving: an episode's turns merge while each prompt extends the previous prompt +
completion, and a new row starts where one does not (prime-rl's `interleave_rollout` rule)."""

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from creditline.rollout.turn_packing import COLUMNS, merge_turns

TOKENS = st.lists(st.integers(3, 50), min_size=1, max_size=4)


@st.composite
def episode(draw):
    """Turns whose prompts either extend the history (with a reply of 0+ tokens) or start afresh."""
    rows, history = [], draw(TOKENS)
    for step in range(draw(st.integers(1, 6))):
        completion = draw(TOKENS)
        rows.append({"episode_id": "e", "step_idx": step, "prompt_ids": list(history), "completion_ids": completion,
                     "completion_logprobs": [-0.5 - i for i in range(len(completion))],
                     "completion_advantages": [float(step)] * len(completion)})  # fmt: skip
        extends = draw(st.booleans())
        reply = draw(st.lists(st.integers(3, 50), max_size=3))
        history = [*history, *completion, *reply] if extends else draw(TOKENS)
    return rows


def chains(rows) -> int:
    """1 + the number of turns whose prompt does not extend the previous prompt + completion."""
    breaks = sum(
        list(b["prompt_ids"][: len(a["prompt_ids"]) + len(a["completion_ids"])]) != [*a["prompt_ids"], *a["completion_ids"]]
        or len(b["prompt_ids"]) < len(a["prompt_ids"]) + len(a["completion_ids"])
        for a, b in zip(rows, rows[1:], strict=False)
    )  # fmt: skip
    return 1 + breaks


@given(turns=episode())
def test_turns_merge_while_they_chain_and_every_sampled_token_is_kept_once_in_its_context(turns):
    merged = merge_turns(pd.DataFrame(turns)).to_dict("records")
    assert len(merged) == chains(turns)
    assert [s for row in merged for s in row["steps"]] == list(range(len(turns)))
    for row in merged:
        sequence = [*row["prompt_ids"], *row["completion_ids"]]
        assert (
            len(row["completion_ids"])
            == len(row["sampled_mask"])
            == len(row["completion_logprobs"])
            == len(row["completion_advantages"])
        )
        start = len(row["prompt_ids"])
        for step in row[
            "steps"
        ]:  # each merged turn: its prompt then its completion, at the sampled positions
            turn = turns[step]
            end = len(turn["prompt_ids"]) + len(turn["completion_ids"])
            assert sequence[:end] == [*turn["prompt_ids"], *turn["completion_ids"]]
            positions = range(len(turn["prompt_ids"]) - start, end - start)
            assert [row["sampled_mask"][p] for p in positions] == [1] * len(turn["completion_ids"])
            assert [row["completion_advantages"][p] for p in positions] == turn["completion_advantages"]
            assert [row["completion_logprobs"][p] for p in positions] == turn["completion_logprobs"]
        assert sum(row["sampled_mask"]) == sum(len(turns[s]["completion_ids"]) for s in row["steps"])
        unsampled = [i for i, m in enumerate(row["sampled_mask"]) if not m]
        assert all(
            row["completion_advantages"][i] == 0.0 and row["completion_logprobs"][i] == 0.0 for i in unsampled
        )


def test_a_hand_made_episode_with_one_break():
    turns = [
        {"prompt_ids": [1, 2], "completion_ids": [7], "completion_advantages": [0.5]},
        {
            "prompt_ids": [1, 2, 7, 9],
            "completion_ids": [8],
            "completion_advantages": [-1.0],
        },  # extends: reply [9]
        {"prompt_ids": [4], "completion_ids": [6, 5], "completion_advantages": [2.0, 2.0]},  # a fresh prompt
    ]
    rows = pd.DataFrame(
        [{**t, "episode_id": "e", "step_idx": i, "completion_logprobs": [-0.1] * len(t["completion_ids"])}
         for i, t in enumerate(turns)]
    )  # fmt: skip
    first, second = merge_turns(rows).to_dict("records")
    assert first["prompt_ids"] == [1, 2] and first["completion_ids"] == [7, 9, 8]
    assert first["sampled_mask"] == [1, 0, 1] and first["completion_advantages"] == [0.5, 0.0, -1.0]
    assert first["steps"] == [0, 1]
    assert second["prompt_ids"] == [4] and second["completion_ids"] == [6, 5] and second["steps"] == [2]


def _merge_by_walking(rows: pd.DataFrame) -> list[dict]:
    """The reference: every episode walked turn by turn (what `merge_turns` does for chaining episodes only)."""
    from creditline.rollout.turn_packing import _append, _extends, _single

    merged = []
    for _, turns in rows.sort_values(["episode_id", "step_idx"], kind="stable").groupby(
        "episode_id", sort=False
    ):
        current = None
        for turn in turns.to_dict("records"):
            if current is not None and _extends(current, turn):
                _append(current, turn)
            else:
                merged.append(current) if current is not None else None
                current = _single(turn)
        merged.append(current)
    return merged


@given(episodes=st.lists(episode(), min_size=1, max_size=5), order=st.randoms(use_true_random=False))
def test_merge_turns_equals_walking_every_episode_whatever_the_row_order(episodes, order):
    rows = [{**turn, "episode_id": f"e{n}"} for n, turns in enumerate(episodes) for turn in turns]
    order.shuffle(rows)
    frame = pd.DataFrame(rows)
    as_lists = [
        {k: list(v) if k in COLUMNS else v for k, v in row.items()}
        for row in merge_turns(frame).to_dict("records")
    ]
    assert as_lists == _merge_by_walking(frame)
