"""The credit picture: which episodes it shows, and that its GRPO column is the round's GRPO."""

import pandas as pd

from creditline.config import AdvantageSettings
from creditline.credit.credit_plot import GRPO, credit_episodes, credit_picture, credit_table
from creditline.credit.round_advantages import step_advantages


def _round():
    """Three groups of two episodes, two steps each: g1 and g3 mixed outcomes, g2 both failed alike."""
    returns = {"g1:a": 1.0, "g1:b": 0.0, "g2:a": 0.0, "g2:b": 0.0, "g3:a": -0.5, "g3:b": 0.5}
    episodes = pd.DataFrame({"episode_id": list(returns), "env_return": list(returns.values())})
    steps = pd.DataFrame([
        {"episode_id": e, "group_id": e.split(":")[0], "step_idx": t, "anchor_key": f"{e[:2]}-{t}",
         "completion_ids": [7] * (t + 1), "action": ["up", "left"][t]} for e in returns for t in (0, 1)
    ])  # fmt: skip
    scores = steps[["episode_id", "step_idx"]].assign(
        rubric_version="env@1", episode_reward=steps["episode_id"].map(returns),
        step_reward=lambda f: f["episode_reward"].where(f["step_idx"] == 1, 0.0),
    )  # fmt: skip
    return episodes, steps, scores


def test_the_best_and_worst_of_the_first_mixed_groups_are_shown_in_group_order():
    episodes, steps, _ = _round()
    assert credit_episodes(episodes, steps) == ["g1:a", "g1:b", "g3:b", "g3:a"]
    assert credit_episodes(episodes, steps, count=2) == ["g1:a", "g1:b"]
    alike = episodes.assign(env_return=0.0)  # no mixed group: the first episodes
    assert credit_episodes(alike, steps, count=3) == ["g1:a", "g1:b", "g2:a"]


def test_the_grpo_column_is_the_rounds_grpo_and_tokens_carry_their_steps_advantage():
    episodes, steps, scores = _round()
    gigpo = step_advantages(steps, scores, AdvantageSettings("gigpo", {}))
    chosen = credit_episodes(episodes, steps)
    table = credit_table(episodes, steps, scores, gigpo, chosen)
    whole = step_advantages(steps, scores, GRPO).set_index(["episode_id", "step_idx"])["advantage"]
    mine = gigpo.set_index(["episode_id", "step_idx"])["advantage"]
    assert list(dict.fromkeys(table["episode_id"])) == chosen and len(table) == 8
    for row in table.itertuples():
        assert (
            row.grpo == whole[(row.episode_id, row.step_idx)]
        )  # computed on the chosen groups alone: the same
        assert row.advantage == mine[(row.episode_id, row.step_idx)]
        assert row.completion_advantages == [row.advantage] * (row.step_idx + 1)
    assert credit_picture(table, "gigpo", "a round").startswith(b"\x89PNG")


def test_on_an_imported_round_the_grpo_column_ignores_the_sources_preset_advantages():
    episodes, steps, scores = _round()
    imported = steps.assign(preset_advantage=[9.0, float("nan")] * 6)  # the source set every first step's
    preset = step_advantages(imported, scores, GRPO)
    assert (preset.loc[preset["step_idx"] == 0, "advantage"] == 9.0).all()  # the round keeps them
    table = credit_table(episodes, imported, scores, preset, credit_episodes(episodes, steps))
    whole = step_advantages(steps, scores, GRPO).set_index(["episode_id", "step_idx"])["advantage"]
    assert [row.grpo for row in table.itertuples()] == [
        whole[(r.episode_id, r.step_idx)] for r in table.itertuples()
    ]
    assert (table.loc[table["step_idx"] == 0, "advantage"] == 9.0).all()
