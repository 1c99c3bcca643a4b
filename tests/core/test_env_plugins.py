"""Environments from outside creditline: by entry point (an installed package's) or by import path.

`creditline_countdown` (tests/plugins/countdown) is a separate package installed into the test venv by
`make test`, registering `countdown` under the `creditline.environments` entry-point group; creditline's
own code never imports it.
"""

import textwrap

import pytest

from creditline.config import ConfigError, from_dict
from creditline.envs import BUILTIN_ENVIRONMENTS, UnknownEnvironment, make_env, registered_environments
from creditline.envs.registry import environment_factory
from creditline.policy.initial_policy import build_initial_policy
from creditline.policy.models import load_tokenizer

creditline_countdown = pytest.importorskip(
    "creditline_countdown",
    reason="the test plugin is installed by `make test` (pip install -e tests/plugins/countdown)",
)


def test_the_builtins_and_an_installed_package_register_through_the_same_entry_point_group():
    registered = registered_environments()
    assert registered["maze"] == "creditline.envs.maze:MazeEnv"
    assert registered["arithmetic"] == "creditline.envs.arithmetic:ArithmeticEnv"
    assert registered["countdown"] == "creditline_countdown:CountdownEnv"
    assert environment_factory("countdown") is creditline_countdown.CountdownEnv
    assert set(BUILTIN_ENVIRONMENTS) == {"maze", "arithmetic", "lookup", "credit_dial"}


def test_a_plugin_environment_runs_by_name_and_by_import_path():
    for name in ("countdown", "creditline_countdown:make_countdown", "creditline_countdown:CountdownEnv"):
        env = make_env(name, top=4)
        observation = env.reset(3, seed=0)
        assert observation.text == "at 2 target 4"  # task 3's layout, from the plugin's own generator
        assert env.step("More.").observation.text == "at 3 target 4"
        assert env.step("more").success


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("grid", 'is neither a registered environment (arithmetic, countdown, credit_dial, lookup, maze) nor an import path "package.module:factory"'),
        ("countdwn", 'is neither a registered environment (arithmetic, countdown, credit_dial, lookup, maze) nor an import path "package.module:factory" (did you mean "countdown"?)'),
        ("nopkg.envs:make", "cannot import module 'nopkg.envs': No module named 'nopkg'"),
        ("creditline_countdown:Nope", "creditline_countdown:Nope: no attribute 'Nope'"),
        ("creditline_countdown:MOVES", "creditline_countdown:MOVES is not callable: expected a factory returning an environment"),
    ],
)  # fmt: skip
def test_a_bad_environment_name_is_one_line_saying_why(name, why):
    with pytest.raises(ConfigError) as caught:
        from_dict({"env": {"name": name, "params": {}}})
    assert caught.value.problems == [f'env.name = "{name}": {why}']
    with pytest.raises(UnknownEnvironment, match="^environment "):
        make_env(name)


def test_a_factory_that_returns_no_environment_is_refused_naming_what_is_missing():
    with pytest.raises(ConfigError) as caught:
        from_dict({"env": {"name": "argparse:Namespace", "params": {}}})
    (line,) = caught.value.problems
    assert line.startswith('env.params = {}: rejected by environment "argparse:Namespace": ')
    assert line.endswith("without name, max_steps, reset, step (see creditline.envs.base.Environment)")


def test_plugin_params_are_checked_against_its_signature_and_by_building_it():
    with pytest.raises(ConfigError) as caught:
        from_dict({"env": {"name": "countdown", "params": {"topp": 3}}})
    assert caught.value.problems == [
        'env.params = { topp = 3 }: unknown parameter topp of environment "countdown"; known: invalid_penalty, '
        "max_steps, top"
    ]
    with pytest.raises(ConfigError) as caught:
        from_dict({"env": {"name": "countdown", "params": {"top": 12}}})
    assert caught.value.problems == [
        'env.params = { top = 12 }: rejected by environment "countdown": countdown top must be in 1..9 '
        "(single digit words), got 12"
    ]


def test_features_that_need_an_optional_member_are_refused_when_the_env_lacks_it():
    minimal = {"name": "creditline_countdown:MinimalCountdownEnv", "params": {}}
    with pytest.raises(ConfigError) as caught:
        from_dict({"env": minimal})  # the built-in tiny policy needs vocabulary()
    assert [line.split(":")[0] for line in caught.value.problems] == ['initial_policy = "builtin']
    assert "has no vocabulary()" in caught.value.problems[0]
    with pytest.raises(ConfigError) as caught:
        from_dict({"env": minimal, "initial_policy": "builtin:chat", "warm_start": {"episodes": 4}})
    (line,) = caught.value.problems
    assert line.startswith(
        'warm_start.episodes = "> 0": environment "creditline_countdown:MinimalCountdownEnv"'
    )
    assert line.endswith(
        'has no format_example(rng) drawing a random well-formed action, which a warm start and "builtin:chat" needs'
    )


def test_the_tiny_policy_learns_a_plugins_words_and_the_default_policy_is_unchanged(tmp_path):
    plugin = from_dict({"env": {"name": "countdown", "params": {}}})
    folder, _ = build_initial_policy(plugin, tmp_path / "plugin")
    tokenizer = load_tokenizer(folder)
    assert tokenizer.unk_token_id not in tokenizer.encode("at 3 target 5 more less", add_special_tokens=False)
    default_folder, _ = build_initial_policy(from_dict({}), tmp_path / "default")
    default = load_tokenizer(default_folder)
    assert "more" not in default.get_vocab()  # the built-in vocabulary (and checkpoint hash) ignore plugins
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    assert by_id[: len(default.get_vocab())] == sorted(default.get_vocab().items(), key=lambda item: item[1])


def test_two_packages_registering_one_name_are_refused_naming_both(tmp_path, monkeypatch):
    dist = tmp_path / "other_countdown-1.0.dist-info"  # a second installed distribution, as pip lays it out
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: other-countdown\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent("""\
            [creditline.environments]
            countdown = other_countdown:Env
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownEnvironment) as caught:
        registered_environments()
    message = str(caught.value)
    assert "'countdown' is registered twice" in message
    assert "creditline-countdown (creditline_countdown:CountdownEnv)" in message
    assert "other-countdown (other_countdown:Env)" in message
