"""`creditline advantages` computes what a round computes: the round's step join, sample filter and fill of
an imported step's preset advantage (`creditline.credit.round_advantages`), on a shuffled scores table."""

import json

import numpy as np
import pandas as pd
import pytest

from creditline.config import AdvantageSettings
from creditline.credit.round_advantages import step_advantages
from tests.e2e.cli import creditline

SETTINGS = [
    AdvantageSettings(),  # the default experiment's GiGPO
    AdvantageSettings("grpo", {"norm_by_std": False}, sample_filter="prof", filter_remove=2),
    AdvantageSettings("hgpo", {"history_length": 1}),
]


def round_tables(seed: int = 0):
    """Three groups of four episodes, 1-4 steps each, a few anchor states shared; every third step of an
    imported source carries its own advantage (`preset_advantage`, NaN elsewhere)."""
    rng = np.random.default_rng(seed)
    rows = []
    for group in range(3):
        for sample in range(4):
            episode = f"g{group}-s{sample}"
            for step in range(int(rng.integers(1, 5))):
                rows.append({"episode_id": episode, "group_id": f"g{group}", "step_idx": step,
                             "anchor_key": f"{group}:{int(rng.integers(0, 3))}", "completion_ids": [1] * (step + 1),
                             "preset_advantage": float(rng.normal()) if len(rows) % 3 == 0 else np.nan})  # fmt: skip
    steps = pd.DataFrame(rows)
    reward = rng.normal(size=len(steps)).round(3)
    scores = steps[["episode_id", "step_idx"]].assign(rubric_version="env@1", step_reward=reward)
    scores["episode_reward"] = scores.groupby("episode_id")["step_reward"].transform("sum")
    episodes = pd.DataFrame({"episode_id": steps["episode_id"].unique()})
    episodes["success"] = rng.random(len(episodes)) < 0.5
    return steps, scores.sample(frac=1.0, random_state=seed), episodes


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"{s.estimator}-{s.sample_filter}")
def test_the_command_gives_the_rounds_advantages_exactly(tmp_path, settings):
    steps, scores, episodes = round_tables()
    paths = {name: tmp_path / f"{name}.parquet" for name in ("steps", "scores", "episodes")}
    for name, table in (("steps", steps), ("scores", scores), ("episodes", episodes)):
        table.to_parquet(paths[name])
    params = [
        arg for key, value in settings.params.items() for arg in ("--param", f"{key}={json.dumps(value)}")
    ]
    filters = ["--sample-filter", settings.sample_filter, "--filter-remove", str(settings.filter_remove),
               "--episodes", str(paths["episodes"])]  # fmt: skip
    out = tmp_path / "out.parquet"
    result = creditline(tmp_path / "data", "advantages", "--estimator", settings.estimator, *params, *filters,
                        "--steps", str(paths["steps"]), "--scores", str(paths["scores"]), "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    command = pd.read_parquet(out)
    round_ = step_advantages(steps, scores, settings, episodes)
    assert command["advantage"].tolist() == round_["advantage"].tolist()  # exactly, row for row
    presets = steps["preset_advantage"].notna().to_numpy()
    assert np.array_equal(
        command["advantage"].to_numpy()[presets], steps["preset_advantage"].to_numpy()[presets]
    )
    if settings.sample_filter == "prof":
        assert command["kept"].tolist() == round_["kept"].tolist() and not command["kept"].all()


def test_scores_that_miss_a_step_or_repeat_one_are_one_line(tmp_path):
    steps, scores, _ = round_tables()
    steps.to_parquet(tmp_path / "steps.parquet")
    scores.iloc[1:].to_parquet(tmp_path / "short.parquet")
    pd.concat([scores, scores.iloc[:1]]).to_parquet(tmp_path / "twice.parquet")
    for name, expected in (("short", f"cover {len(steps) - 1} of {len(steps)} step rows"),
                           ("twice", f"row {len(scores)}: a second row of step")):  # fmt: skip
        result = creditline(tmp_path / "data", "advantages", "--estimator", "grpo", "--steps",
                            str(tmp_path / "steps.parquet"), "--scores", str(tmp_path / f"{name}.parquet"),
                            "--out", str(tmp_path / "out.parquet"))  # fmt: skip
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert expected in result.stderr and f"{name}.parquet" in result.stderr
    assert not (tmp_path / "out.parquet").exists()
    refused = creditline(tmp_path / "data", "advantages", "--estimator", "grpo", "--sample-filter", "prof",
                         "--steps", str(tmp_path / "steps.parquet"), "--out", str(tmp_path / "out.parquet"))  # fmt: skip
    assert refused.returncode == 2 and "needs --episodes" in refused.stderr
