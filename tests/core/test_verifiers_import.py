"""verifiers files read into a round's episodes and steps: exact tokens, rewards, presets, and clear errors."""

from __future__ import annotations

import json
import math
import random

import pytest
from verifiers_files import (
    QUESTION,
    SCAFFOLD,
    SYSTEM,
    TOOL_REPLY,
    classic_line,
    classic_run,
    v1_episode,
    v1_run,
    write_lines,
)

from creditline.config import AdvantageSettings
from creditline.config.sampling_settings import round_sampling, sampling_problem
from creditline.credit.round_advantages import step_advantages
from creditline.credit.rubrics import RUBRICS
from creditline.ids import anchor_key
from creditline.interop.export import export_lines
from creditline.interop.imported_rollouts import SourceError
from creditline.interop.verifiers_import import read_source, source_tables
from creditline.interop.verifiers_v1 import fill_advantages
from creditline.round import training_rows
from schemas import SCHEMAS, validate


def tables(folder, experiment="x", round_=3):
    return source_tables(read_source(folder), experiment, round_)


def test_classic_rollouts_keep_their_tokens_and_the_reward_arrives_at_the_last_step(tmp_path):
    t = tables(classic_run(tmp_path))
    episodes, steps = (
        validate(SCHEMAS["episodes"], t.episodes, "episodes"),
        validate(SCHEMAS["steps"], t.steps, "steps"),
    )
    assert list(episodes["episode_id"]) == ["x:r3:t0:s0", "x:r3:t0:s1", "x:r3:t1:s0", "x:r3:t1:s1"]
    assert sorted(episodes.loc[episodes.task_id == 0, "env_return"]) == [0.0, 1.0]
    winner = steps[
        steps.episode_id
        == episodes.loc[(episodes.task_id == 0) & (episodes.env_return == 1.0), "episode_id"].item()
    ]
    # line "a": calls [7, 8] then [7]; the second prompt is the first + its completion + the tool's reply
    assert winner["prompt_ids"].tolist() == [QUESTION + [10], QUESTION + [10, 7, 8] + TOOL_REPLY]
    assert winner["completion_ids"].tolist() == [[7, 8], [7]]
    assert winner["completion_logprobs"].tolist() == [[-0.25, -0.25], [-0.25]]
    assert winner["step_reward"].tolist() == [0.0, 1.0]  # R on the last step; the filled step rewards dropped
    assert winner["anchor_key"].tolist() == [
        anchor_key(json.dumps(QUESTION + [10])),
        anchor_key(json.dumps(TOOL_REPLY)),
    ]
    assert steps["preset_advantage"].isna().all()  # verifiers' own fill values are not presets
    assert json.loads(episodes["source_components"][0]) == {
        "correct": episodes["env_return"][0],
        "num_turns": 2.0,
    }


def test_classic_step_values_an_environment_set_are_kept_as_presets(tmp_path):
    # group rewards 1 and 0 (mean 0.5): the fill would write advantages +0.5 / -0.5 and rewards 1 / 0
    lines = [classic_line(0, "a", 1.0, [[7], [7]], step_rewards=[0.25, 1.0], step_advantages=[2.0, 0.5]),
             classic_line(0, "b", 0.0, [[8], [8]], step_advantages=[-0.5, -0.5])]  # fmt: skip
    t = tables(write_lines(tmp_path / "results.jsonl", lines).parent)
    a = t.steps[t.steps.source_ref.str.startswith("1:")]
    assert a["step_reward"].tolist() == [0.25, 1.0]  # the preset 0.25 on step 0, R on the last (filled)
    assert a["preset_advantage"].iloc[0] == 2.0 and math.isnan(
        a["preset_advantage"].iloc[1]
    )  # 0.5 = the fill
    assert t.steps[t.steps.source_ref.str.startswith("2:")]["preset_advantage"].isna().all()
    assert t.episodes["env_return"].max() == 1.0  # verifiers' reward; the preset is not added


def test_environment_step_rewards_stay_step_rewards_and_the_return_is_verifiers_reward(tmp_path):
    # one call each; the environment set step rewards 1.5 (R 0.7) and 0.75 (R 0.25). verifiers scores on R
    # alone: mean 0.475, advantages +0.225 / -0.225 (saved by score_group, the fill). Adding the presets
    # into the return would give 2.2 / 1.0, mean 1.6, advantages +0.6 / -0.6.
    lines = [classic_line(0, "a", 0.7, [[7]], step_rewards=[1.5], step_advantages=[0.225]),
             classic_line(0, "b", 0.25, [[8]], step_rewards=[0.75], step_advantages=[-0.225])]  # fmt: skip
    t = tables(write_lines(tmp_path / "results.jsonl", lines).parent)
    by_ref = t.steps.set_index("source_ref")
    assert by_ref.at["1:0", "step_reward"] == 1.5 and by_ref.at["2:0", "step_reward"] == 0.75
    assert sorted(t.episodes["env_return"]) == [0.25, 0.7]
    scores = RUBRICS["env"].score(t.episodes, t.steps)
    assert sorted(scores["episode_reward"]) == pytest.approx([0.25, 0.7])
    assert sorted(scores["step_reward"]) == [0.75, 1.5]  # the step rewards, for estimators that read them
    advantages = step_advantages(t.steps, scores, AdvantageSettings("grpo", {"norm_by_std": False}))
    by_episode = advantages.merge(t.steps[["episode_id", "step_idx", "source_ref"]]).set_index("source_ref")
    assert by_episode.at["1:0", "advantage"] == pytest.approx(0.225, abs=1e-12)
    assert by_episode.at["2:0", "advantage"] == pytest.approx(-0.225, abs=1e-12)


def test_v1_prompts_are_the_node_tokens_from_the_root_and_rewards_are_weighted(tmp_path):
    lines = [
        v1_episode("k", "t1", 1.0, [[7, 8], [7]], truncated_last=True),
        v1_episode("k", "t2", 0.0, [[8], [8]]),
    ]
    t = tables(write_lines(tmp_path / "traces.jsonl", lines).parent)
    steps = validate(SCHEMAS["steps"], t.steps, "steps")
    first = steps[steps.source_ref.str.startswith("1:")]
    assert first["prompt_ids"].tolist() == [
        SYSTEM + QUESTION + SCAFFOLD,
        SYSTEM + QUESTION + SCAFFOLD + [7, 8] + TOOL_REPLY + SCAFFOLD,
    ]
    assert first["completion_ids"].tolist() == [[7, 8], [7]]
    assert first["completion_logprobs"].tolist() == [[-0.5, -0.5], [-0.5]]
    assert first["truncated"].tolist() == [False, True] and first["finish_reason"].tolist() == [
        "stop",
        "length",
    ]
    assert first["source_ref"].tolist() == ["1:2", "1:4"]  # line 1, nodes 2 and 4
    assert first["step_reward"].tolist() == [0.0, 2.0]  # score 1 × weight 2, at the last step
    assert "add({})" in first["action"].iloc[0] and first["observation"].iloc[1] == "tool: 3"
    assert json.loads(t.episodes["source_components"].iloc[1]) == {"correct": 1.0, "turns": 2.0}


def test_line_order_does_not_change_the_tables(tmp_path):
    folder = v1_run(tmp_path / "a")
    lines = (folder / "traces.jsonl").read_text().splitlines()
    random.Random(0).shuffle(lines)
    shuffled = write_lines(tmp_path / "b" / "traces.jsonl", lines).parent
    one, two = tables(folder), tables(shuffled)
    for name in ("episodes", "steps"):
        a, b = (
            getattr(one, name).drop(columns=["source_ref"], errors="ignore"),
            getattr(two, name).drop(columns=["source_ref"], errors="ignore"),
        )
        assert a.to_json() == b.to_json()


def test_v1_node_advantages_become_presets_and_fill_writes_them_back(tmp_path):
    folder = v1_run(tmp_path, advantages={"t1": [[0.5, 0.5], None]})
    t = tables(folder)
    assert sorted(t.steps["preset_advantage"].dropna().tolist()) == [0.5]
    per_step = {"1:2": [1.0, 2.0], "3:2": [-1.0]}
    lines = [json.loads(line) for line in fill_advantages(folder / "traces.jsonl", per_step)]
    nodes = lines[0]["traces"][0]["nodes"]
    assert nodes[2]["advantages"] == [1.0, 2.0] and "advantages" not in nodes[4]  # unassigned stays absent
    assert lines[2]["traces"][0]["nodes"][2]["advantages"] == [-1.0]
    with pytest.raises(SourceError, match="1 advantages for 2 sampled tokens"):
        fill_advantages(folder / "traces.jsonl", {"1:2": [1.0]})
    with pytest.raises(SourceError, match="name nodes the file does not have"):
        fill_advantages(folder / "traces.jsonl", {"9:2": [1.0]})


def test_v1_node_advantages_that_vary_per_token_are_kept_per_token_and_exported_unchanged(tmp_path):
    varying = [0.1, -0.37]  # node 2 of line 1: one value per sampled token, not one repeated
    folder = v1_run(tmp_path / "in", advantages={"t1": [varying, None], "t2": [[0.25], [0.5, 0.5]]})
    t = tables(folder)
    steps = validate(SCHEMAS["steps"], t.steps, "steps")
    scores = RUBRICS["env"].score(t.episodes, t.steps)
    advantages = validate(
        SCHEMAS["advantages"], step_advantages(steps, scores, AdvantageSettings("grpo", {})), "advantages"
    )
    rows = training_rows(steps, advantages).set_index("source_ref")
    assert rows.loc["1:2", "completion_advantages"] == varying  # exactly the source's values, per token
    assert rows.loc["1:2", "advantage"] == pytest.approx((0.1 - 0.37) / 2)  # the scalar: their mean
    assert rows.loc["2:2", "completion_advantages"] == [0.25]  # constant presets work as before
    assert rows.loc["2:4", "completion_advantages"] == [0.5, 0.5] and rows.loc["2:4", "advantage"] == 0.5
    grpo = rows.loc["1:4", "advantage"]  # unassigned: the estimator's, repeated over the tokens
    assert rows.loc["1:4", "completion_advantages"] == [grpo]
    bad = steps.assign(preset_completion_advantages=[[1.0]] + list(steps["preset_completion_advantages"][1:]))
    with pytest.raises(Exception, match="preset_completion_advantages"):
        validate(SCHEMAS["steps"], bad, "steps")

    exported = list(export_lines("verifiers-v1", "x", 3, steps, scores, advantages,
                                 source=folder / "traces.jsonl"))  # fmt: skip
    assert json.loads(exported[0])["traces"][0]["nodes"][2]["advantages"] == varying
    again = tables(write_lines(tmp_path / "out" / "traces.jsonl", [json.loads(x) for x in exported]).parent)
    again_rows = training_rows(
        again.steps,
        step_advantages(
            again.steps, RUBRICS["env"].score(again.episodes, again.steps), AdvantageSettings("grpo", {})
        ),  # fmt: skip
    ).set_index("source_ref")
    assert again_rows["completion_advantages"].to_dict() == rows["completion_advantages"].to_dict()


def test_verifiers_v1_export_refuses_a_round_that_was_not_imported(tmp_path):
    t = tables(classic_run(tmp_path))
    with pytest.raises(ValueError, match="not imported from verifiers v1"):
        list(export_lines("verifiers-v1", "x", 3, t.steps, t.steps, t.steps, source=None))


def _bad_v1(tmp_path, mutate, n=0):
    episodes = [v1_episode("k", "t1", 1.0, [[7, 8]]), v1_episode("k", "t2", 0.0, [[8]])]
    mutate(episodes[n])
    return write_lines(tmp_path / "traces.jsonl", episodes).parent


@pytest.mark.parametrize(
    "mutate, field, why",
    [
        (
            lambda e: e["traces"][0]["nodes"][2].update(logprobs=[-0.5, -0.5]),
            "traces[0].nodes[2].logprobs",
            "2 values for 1 sampled tokens",
        ),
        (
            lambda e: e["traces"][0]["nodes"][2].update(token_ids=[]),
            "traces[0].nodes[2].token_ids",
            "saved without token ids",
        ),
        (
            lambda e: e["traces"][0]["nodes"][2].update(mask=[True, False]),
            "traces[0].nodes[2].mask",
            "last tokens",
        ),
        (
            lambda e: e["traces"][0]["nodes"][2].update(advantages=[1.0, 2.0]),
            "traces[0].nodes[2].advantages",
            "2 values for 1 sampled tokens",
        ),
        (
            lambda e: e["traces"][0]["rewards"]["correct"].update(score="1"),
            "traces[0].rewards.correct.score",
            "finite number",
        ),
        (lambda e: e["traces"].append(e["traces"][0]), "traces", "multi-agent"),
        (
            lambda e: e["traces"][0]["nodes"].__setitem__(0, "system"),
            "traces[0].nodes[0]",
            "expected an object",
        ),
        (
            lambda e: e["traces"][0]["rewards"].update(correct=1.0),
            "traces[0].rewards.correct",
            "expected an object",
        ),
        (lambda e: e["traces"][0]["nodes"][2].update(mask=[0, 1]), "traces[0].nodes[2].mask", "booleans"),
        (lambda e: e["traces"][0]["nodes"][1].update(parent=4), "traces[0].nodes[1].parent", "not a node"),
        (lambda e: e["traces"][0].update(id="t1"), "id", "duplicate rollout id 't1' (also at"),
    ],
)
def test_a_bad_v1_line_is_named_by_file_line_and_field(tmp_path, mutate, field, why):
    folder = _bad_v1(tmp_path, mutate, n=1)
    with pytest.raises(SourceError) as error:
        tables(folder)
    assert error.value.field == field and why in error.value.why
    assert error.value.where.endswith("traces.jsonl line 2")


@pytest.mark.parametrize(
    "mutate, field, why",
    [
        (
            lambda line: line["trajectory"][1].update(tokens=None),
            "trajectory[1].tokens",
            "saved without token ids",
        ),
        (lambda line: line.pop("trajectory"), "trajectory", "state_columns"),
        (
            lambda line: line["trajectory"][0]["tokens"].update(completion_logprobs=[-1.0]),
            "trajectory[0].tokens.completion_logprobs",
            "1 values for 2",
        ),
        (
            lambda line: line["trajectory"][0]["tokens"].update(prompt_ids=[1, -3]),
            "trajectory[0].tokens.prompt_ids",
            "non-negative",
        ),
        (lambda line: line.update(reward=float("nan")), "reward", "finite number"),
        (
            lambda line: line["trajectory"][1].update(prompt="text"),
            "trajectory[1].prompt",
            "list of messages",
        ),
    ],
)
def test_a_bad_classic_line_is_named_by_file_line_and_field(tmp_path, mutate, field, why):
    lines = [classic_line(0, "a", 1.0, [[7, 8], [7]]), classic_line(0, "b", 0.0, [[8, 8], [8]])]
    mutate(lines[1])
    with pytest.raises(SourceError) as error:
        tables(write_lines(tmp_path / "results.jsonl", lines).parent)
    assert (error.value.where.rsplit(" ", 2)[-2:], error.value.field) == (["line", "2"], field)
    assert why in error.value.why


def test_truncated_files_single_rollout_groups_and_unknown_files_are_refused(tmp_path):
    good = json.dumps(classic_line(0, "a", 1.0, [[7]]))
    with pytest.raises(SourceError, match=r"line 2: json: not valid JSON .*truncated"):
        tables(write_lines(tmp_path / "t" / "results.jsonl", [good, good[:40]]).parent)
    with pytest.raises(SourceError, match="task '0' has one rollout"):
        tables(write_lines(tmp_path / "g" / "results.jsonl", [good]).parent)
    with pytest.raises(SourceError, match="neither results.jsonl nor traces.jsonl"):
        tables(tmp_path / "g" / "..")
    with pytest.raises(SourceError, match="neither a verifiers v1 episode"):
        tables(write_lines(tmp_path / "o" / "other.jsonl", [{"x": 1}]))


def test_sampling_settings_are_imported_per_row(tmp_path):
    # classic: metadata.json's sampling_args hold for the run; a line's own sampling_args win (prime-rl's)
    lines = [classic_line(0, "a", 1.0, [[7], [7]]), classic_line(0, "b", 0.0, [[8]])]
    lines[1]["sampling_args"] = {"temperature": 0.6, "extra_body": {"top_k": -1}}
    folder = write_lines(tmp_path / "c" / "results.jsonl", lines).parent
    (folder / "metadata.json").write_text(json.dumps({"sampling_args": {"temperature": 0.7, "top_p": 0.95}}))
    steps = tables(folder).steps.set_index("source_ref")
    assert steps.loc[["1:0", "1:1"], "temperature"].tolist() == [0.7, 0.7]
    assert steps.loc[["1:0", "1:1"], "top_p"].tolist() == [0.95, 0.95]
    assert steps.at["2:0", "temperature"] == 0.6 and math.isnan(steps.at["2:0", "top_p"])
    assert steps.at["2:0", "top_k"] == -1 and math.isnan(steps.at["1:0", "top_k"])
    validate(SCHEMAS["steps"], steps.reset_index(), "steps")
    assert sampling_problem(steps) == (
        "rollouts sampled with 2 different settings (temperature=0.6 top_p=1, temperature=0.7 top_p=0.95): "
        "one round trains at one temperature and top_p; import each setting's rollouts as a round of its own"
    )
    # v1: each call's own `sampling`
    episodes = [v1_episode("k", "t1", 1.0, [[7], [7]]), v1_episode("k", "t2", 0.0, [[8]])]
    episodes[0]["traces"][0]["calls"][0]["sampling"] = {"temperature": 0.7, "max_tokens": 40}
    episodes[0]["traces"][0]["calls"][1]["sampling"] = {"temperature": 0.7, "top_p": 0.9}
    episodes[1]["traces"][0]["calls"][0]["sampling"] = {"temperature": 0.7, "top_p": 0.9, "top_k": 20}
    steps = tables(write_lines(tmp_path / "v" / "traces.jsonl", episodes).parent).steps.set_index(
        "source_ref"
    )
    assert steps["temperature"].tolist() == [0.7, 0.7, 0.7]
    assert steps.loc[["1:2", "1:4"], "top_p"].fillna(-1).tolist() == [-1, 0.9]
    assert steps.at["2:2", "top_k"] == 20
    assert sampling_problem(steps).startswith("rollouts sampled with top_k=20: the trainer cannot score")
    # nothing saved: NaN, the trainer's [rollouts] values (round_sampling)
    unsaved = tables(classic_run(tmp_path / "n")).steps
    assert unsaved["temperature"].isna().all() and round_sampling(unsaved, 0.8, 1.0) == (0.8, 1.0)
    assert round_sampling(steps.drop(columns="top_k").loc[["1:2"]], 1.0, 1.0) == (0.7, 1.0)


def test_greedy_sampling_is_refused(tmp_path):
    lines = [classic_line(0, "a", 1.0, [[7]]), classic_line(0, "b", 0.0, [[8]])]
    lines[0]["sampling_args"] = {"temperature": 0}
    with pytest.raises(SourceError, match=r"line 1: sampling_args.temperature: 0: greedy decoding"):
        read_source(write_lines(tmp_path / "results.jsonl", lines))


def test_an_evaluation_s_greedy_single_rollouts_are_read_but_not_for_training(tmp_path):
    """A held-out evaluation (`[eval.verifiers]`) plays each example once, greedily: both formats read."""
    lines = [classic_line(0, "a", 1.0, [[7]]), classic_line(1, "b", 0.0, [[8], [8]])]
    folder = write_lines(tmp_path / "c" / "results.jsonl", lines).parent
    (folder / "metadata.json").write_text(json.dumps({"sampling_args": {"temperature": 0.0}}))
    episodes = [v1_episode("k0", "t1", 0.5, [[7]]), v1_episode("k1", "t2", 0.0, [[8]])]
    for episode in episodes:
        episode["traces"][0]["calls"][0]["sampling"] = {"temperature": 0}
    for run in (folder, write_lines(tmp_path / "v" / "traces.jsonl", episodes).parent):
        with pytest.raises(SourceError, match="temperature: 0: greedy decoding"):
            read_source(run)
        source = read_source(run, for_training=False)
        got = source_tables(source, "x", 0)
        assert len(got.episodes) == 2 and got.episodes["sample_idx"].tolist() == [0, 0]
        assert got.episodes["success"].tolist() == (got.episodes["env_return"] > 0).tolist()
        assert (got.steps["temperature"] == 0).all() and got.steps["valid_action"].all()


def test_bad_bytes_empty_files_and_symlink_loops_are_named(tmp_path):
    good = json.dumps(classic_line(0, "a", 1.0, [[7]])).encode()
    bad = tmp_path / "bytes" / "results.jsonl"
    bad.parent.mkdir()
    bad.write_bytes(good + b"\n" + good[:10] + b"\xff" + good[11:] + b"\n")
    with pytest.raises(SourceError) as info:
        read_source(bad.parent)
    assert (
        str(info.value)
        == f"{bad} line 2: encoding: not UTF-8 (byte 0xff at column 11); verifiers writes UTF-8 JSON lines"
    )

    empty = write_lines(tmp_path / "empty" / "results.jsonl", [])
    with pytest.raises(SourceError, match=f"^{empty}: rollouts: the file holds no rollouts"):
        read_source(empty.parent)

    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "results.jsonl").symlink_to(loop / "results.jsonl")
    for path in (loop, loop / "results.jsonl"):
        with pytest.raises(SourceError, match=f"^{loop}/results.jsonl: path: a symlink that leads nowhere"):
            read_source(path)
