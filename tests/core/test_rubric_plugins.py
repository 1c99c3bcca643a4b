"""Rubrics from outside creditline: by entry point (an installed package's) or by import path, checked and
refused as environments are (tests/core/test_env_plugins.py).

`creditline_countdown` (tests/plugins/countdown), installed into the test venv by `make test`, registers
`countdown-solved` under the `creditline.rubrics` entry-point group; creditline's own code never imports it.
"""

import sys
import textwrap

import pandas as pd
import pytest

from creditline.config import ConfigError, ExperimentConfig, from_dict
from creditline.config.checks import check_config
from creditline.credit.rubric_registry import (
    BUILTIN,
    UnknownRubric,
    get_rubric,
    loadable_rubrics,
    registered_rubrics,
    rubric_by_version,
)
from creditline.credit.rubrics import RUBRICS

rubrics = pytest.importorskip(
    "creditline_countdown.rubrics",
    reason="the test plugin is installed by `make test` (pip install -e tests/plugins/countdown)",
)


def test_the_builtins_and_an_installed_package_s_rubric_have_names():
    assert registered_rubrics() == {
        "countdown-solved": "creditline_countdown.rubrics:make_solved_rubric",
        "env": BUILTIN,
        "env-efficient": BUILTIN,
    }
    assert get_rubric("env") is RUBRICS["env"]


def test_a_plugin_rubric_loads_by_name_and_by_import_path_and_scores():
    by_name = get_rubric("countdown-solved")
    assert get_rubric("creditline_countdown.rubrics:make_solved_rubric").version == by_name.version
    assert get_rubric("creditline_countdown.rubrics:SOLVED").version == by_name.version
    assert by_name.version.startswith("countdown-solved-")
    episodes = pd.DataFrame({"episode_id": ["a", "b"], "group_id": ["g", "g"], "success": [True, False]})
    steps = pd.DataFrame(
        {
            "episode_id": ["a", "a", "b"],
            "group_id": ["g", "g", "g"],
            "step_idx": [0, 1, 0],
            "step_reward": [0.0, 1.0, -0.1],
            "valid_action": [False, True, True],
        }
    )
    scores = by_name.score(episodes, steps)
    assert scores["step_reward"].tolist() == [-0.25, 0.0, 0.0]  # invalid_word, weight -0.25
    assert scores["episode_reward"].tolist() == [0.75, 0.75, 0.0]  # solved (1) + the step rewards
    assert scores["criterion.solved"].tolist() == [1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("env-eficient", 'is neither a registered rubric (countdown-solved, env, env-efficient) nor an import path "package.module:rubric" (did you mean "env-efficient"?)'),
        ("grid", 'is neither a registered rubric (countdown-solved, env, env-efficient) nor an import path "package.module:rubric"'),
        ("nopkg.rubrics:mine", "cannot import module 'nopkg.rubrics': No module named 'nopkg'"),
        ("creditline_countdown.rubrics:Nope", "creditline_countdown.rubrics:Nope: no attribute 'Nope'"),
        ("creditline_countdown.rubrics:WEIGHTS", "creditline_countdown.rubrics:WEIGHTS is a dict: expected a Rubric, a RubricGroup or a factory returning one (creditline.credit.rubrics)"),
        ("creditline_countdown:make_countdown", "creditline_countdown:make_countdown() returned a CountdownEnv: expected a Rubric or a RubricGroup (creditline.credit.rubrics)"),
        ("creditline_countdown.rubrics:broken_rubric", "creditline_countdown.rubrics:broken_rubric() raised RuntimeError: no rubric today"),
    ],
)  # fmt: skip
def test_a_bad_rubric_is_one_line_saying_why(name, why):
    with pytest.raises(ConfigError) as caught:
        from_dict({"rubric": name})
    assert caught.value.problems == [f'rubric = "{name}": {why}']
    with pytest.raises(UnknownRubric, match="^rubric "):
        get_rubric(name)


def test_checking_the_values_imports_no_rubric_code(tmp_path, monkeypatch):
    (tmp_path / "my_rubrics.py").write_text(
        "from creditline.credit.rubrics import RUBRICS\nIMPORTED = True\nMINE = RUBRICS['env']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {**ExperimentConfig().to_dict(), "rubric": "my_rubrics:MINE"}
    built, problems = check_config(ExperimentConfig, data)
    assert problems == [] and built is not None and built.rubric == "my_rubrics:MINE"
    assert "my_rubrics" not in sys.modules  # a value check names the module, never imports it
    assert from_dict({"rubric": "my_rubrics:MINE"}).rubric == "my_rubrics:MINE"  # the code stage loads it
    assert "my_rubrics" in sys.modules
    monkeypatch.delitem(sys.modules, "my_rubrics")


def test_a_version_is_found_among_plugins_and_by_the_import_paths_it_was_recorded_with():
    solved = get_rubric("countdown-solved")
    assert rubric_by_version(solved.version) == ("countdown-solved", solved)
    assert loadable_rubrics()["countdown-solved"] is solved
    efficient = get_rubric("env-efficient")
    assert rubric_by_version(efficient.version, ["creditline_countdown.rubrics:SOLVED"])[0] == "env-efficient"
    with pytest.raises(ValueError, match="no longer defined in code") as caught:
        rubric_by_version(
            "mine-12345678", ["nopkg.rubrics:mine", "creditline_countdown.rubrics:broken_rubric"]
        )
    assert solved.version in str(caught.value)  # what is defined now: the plugins' too


def test_a_rubric_only_an_import_path_names_is_found_by_that_path(tmp_path, monkeypatch):
    (tmp_path / "path_only.py").write_text(
        "from creditline.credit.rubrics import Criterion, Rubric, success\n"
        "def make():\n    return Rubric('path-only', (Criterion('success', success, 'episode'),))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rubric = get_rubric("path_only:make")
    with pytest.raises(ValueError, match="no longer defined"):
        rubric_by_version(rubric.version)  # not registered: found only by a source the store recorded
    assert rubric_by_version(rubric.version, ["path_only:make"]) == ("path_only:make", rubric)
    monkeypatch.delitem(sys.modules, "path_only")


def _dist(tmp_path, name: str, body: str) -> None:
    dist = (
        tmp_path / f"{name.replace('-', '_')}-1.0.dist-info"
    )  # an installed distribution, as pip lays it out
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(body))


def test_two_packages_registering_one_name_are_refused_naming_both(tmp_path, monkeypatch):
    _dist(tmp_path, "other-rubrics", "[creditline.rubrics]\ncountdown-solved = other_rubrics:solved\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as caught:
        from_dict({"rubric": "countdown-solved"})
    (line,) = caught.value.problems
    assert line.startswith("rubric = \"countdown-solved\": rubric 'countdown-solved' is registered twice: ")
    assert "creditline-countdown (creditline_countdown.rubrics:make_solved_rubric)" in line
    assert "other-rubrics (other_rubrics:solved)" in line


def test_a_plugin_may_not_take_a_builtin_s_name(tmp_path, monkeypatch):
    _dist(tmp_path, "shadow-rubrics", "[creditline.rubrics]\nenv = shadow_rubrics:env\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        UnknownRubric, match="rubric 'env' is built in, and registered again as shadow_rubrics:env"
    ):
        registered_rubrics()
