"""The malformed-input matrix: bad input gets clear `error:` lines, exit 2, and stores nothing.

The promise of `creditline` (pipelines/cli.py): a bad config, argument or input file is reported as
one line per problem, `error: ...`, naming the input, the field and the row, before anything is
stored or registered; the exit code is 2 and there is no traceback (unless --debug). Each case below
breaks one input and checks all four parts of that promise:

    (a) `main([...])` returns 2;
    (b) stderr is only `error: ` lines (as many as there are problems), none with a traceback;
    (c) the lines name the right thing: the dotted field, the file, the column, the row;
    (d) nothing already stored changed: every file under the data root (path and sha256) and every
        row of every table of `lineage.duckdb` are the same before and after; a bad config run on an
        empty data root leaves no catalog behind, so its experiment name stays free.

Config and argument cases run against a copy of a data root that already holds an experiment (a
registered config, a recorded artifact, a Dagster instance), so "nothing changed" has something to
change. Two hypothesis tests mutate one field of the default config and one cell of a valid steps
table: those inputs may be valid (exit 0) or not (exit 2), never a crash (exit 1), never a traceback.
`test_print_matrix`, last, prints every case with its outcome.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creditline.config import ExperimentConfig
from creditline.store import ArtifactRecord, LineageStore, write_parquet_atomic
from pipelines.cli import main
from tests.faults.in_process import Outcome, cli

STORED = "stored-exp"
"""The experiment already registered in the template data root (never the one a case names)."""
DEFAULT_NAME = ExperimentConfig().name
CATALOG = "lineage.duckdb"


# --- one call of the CLI, and what it must leave ----------------------------------------------------


@dataclass
class Row:
    case: str
    code: int
    first: str
    lines: int
    clean: bool
    """Exit 2 with only `error:` lines and no traceback."""
    changed: bool
    """Files or catalog rows under a data root (or the input's folder) differ afterwards."""
    wrote: bool
    """The --out file exists afterwards."""


MATRIX: list[Row] = []
HYPOTHESIS: dict[str, dict[int, list[float]]] = {}
"""{hypothesis test: {exit code: [seconds of each call]}}."""
HYPOTHESIS_REGISTER = "`register --config` with one mutated config field"
HYPOTHESIS_CELL = "`advantages` on a steps table with one corrupted cell"


def tally(test: str, code: int, seconds: float) -> None:
    HYPOTHESIS.setdefault(test, {}).setdefault(code, []).append(seconds)


def is_clean_rejection(outcome: Outcome) -> bool:
    lines = outcome.lines
    return (
        outcome.code == 2
        and bool(lines)
        and all(line.startswith("error: ") for line in lines)
        and "Traceback" not in outcome.err
    )


def snapshot(*folders: Path) -> dict[str, Any]:
    """Every file (relative path -> sha256) and every catalog table's rows under `folders`."""
    state: dict[str, Any] = {}
    for folder in folders:
        if not folder.exists():
            continue
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            state[f"{folder.name}/{path.relative_to(folder)}"] = hashlib.sha256(path.read_bytes()).hexdigest()
        catalog = folder / CATALOG
        if catalog.exists():
            with duckdb.connect(str(catalog), read_only=True) as con:
                tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
                for table in sorted(tables):
                    rows = con.execute(f'SELECT * FROM "{table}"').fetchall()
                    state[f"{folder.name}/{CATALOG}:{table}"] = sorted(map(repr, rows))
    return state


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def registered(root: Path) -> list[str]:
    """The experiments registered under `root` (none when it has no catalog)."""
    return LineageStore(root / CATALOG).experiments() if (root / CATALOG).exists() else []


def record(case: str, outcome: Outcome, changed: list[str], tmp_path: Path, wrote: bool = False) -> None:
    first = outcome.lines[0] if outcome.lines else "(no stderr)"
    first = first.replace(str(tmp_path.resolve()), "<tmp>").replace(str(tmp_path), "<tmp>")
    MATRIX.append(
        Row(case, outcome.code, first, len(outcome.lines), is_clean_rejection(outcome), bool(changed), wrote)
    )


def assert_rejected(outcome: Outcome, needles: list[str], n_lines: int = 1) -> None:
    """(a), (b), (c): exit 2, `n_lines` lines all `error: `, no traceback, every needle named."""
    shown = f"exit {outcome.code}\nstderr:\n{outcome.err}\nstdout:\n{outcome.out}"
    assert outcome.code == 2, shown
    assert "Traceback" not in outcome.err, shown
    assert outcome.lines and all(line.startswith("error: ") for line in outcome.lines), shown
    assert len(outcome.lines) == n_lines, shown
    for needle in needles:
        assert needle in outcome.err, f"{needle!r} not named\n{shown}"


# --- fixtures ----------------------------------------------------------------------------------------


class RoundStarted(RuntimeError):
    """Raised instead of executing a round: a case whose input was accepted must not run for minutes."""


@pytest.fixture(autouse=True)
def _no_rounds(monkeypatch):
    """`run` with an accepted config would execute real rounds; fail fast instead (it shows as exit 1)."""

    def refuse(instance, data_root, job_name, partition_key, tags=None):
        raise RoundStarted(f"the input was accepted: {job_name} {partition_key} was about to execute")

    # the commands import it from the round runner when they run
    monkeypatch.setattr("pipelines.round_runner.execute_partition", refuse)


@pytest.fixture(scope="module")
def template_root(tmp_path_factory) -> Path:
    """A data root holding one registered experiment, one recorded table and a Dagster instance."""
    root = tmp_path_factory.mktemp("template") / "root"
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CREDITLINE_DATA_ROOT", str(root))
        mp.delenv("DAGSTER_HOME", raising=False)
        code = main(["--data-root", str(root), "register", "--experiment", STORED])
    signal.signal(signal.SIGTERM, previous)
    assert code == 0
    written = write_parquet_atomic(valid_steps(), root / STORED / "r001" / "steps.parquet")
    LineageStore(root / CATALOG).record_artifact(
        ArtifactRecord(STORED, 1, "steps", written.path, written.content_hash, rows=written.rows)
    )
    return root


@pytest.fixture
def root(tmp_path, template_root, monkeypatch) -> Path:
    """A fresh copy of the template data root, named by $CREDITLINE_DATA_ROOT too."""
    copy = tmp_path / "root"
    shutil.copytree(template_root, copy)
    monkeypatch.setenv("CREDITLINE_DATA_ROOT", str(copy))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # get_instance sets it; restored after the test
    return copy


# --- 1. config corruptions: `creditline run --config FILE` -------------------------------------------

# (case, TOML text, needles beyond the file's path, number of problems); {default} is the default name.
CONFIG_CASES = [
    ("rollouts.group_size = 0", "[rollouts]\ngroup_size = 0\n", ["rollouts.group_size = 0", "1..1024"], 1),
    (
        'train.learning_rate = "fast"',
        '[train]\nlearning_rate = "fast"\n',
        ['train.learning_rate = "fast"'],
        1,
    ),
    ("rounds = -3", "rounds = -3\n", ["rounds = -3", "1..10000"], 1),
    (
        'advantages.estimator = "nosuch"',
        '[advantages]\nestimator = "nosuch"\n',
        ['advantages.estimator = "nosuch"', '"grpo"', '"gigpo"'],
        1,
    ),
    ('env.name = "nosuch"', '[env]\nname = "nosuch"\n', ['env.name = "nosuch"', "maze", "import path"], 1),
    ('rubric = "nosuch"', 'rubric = "nosuch"\n', ['rubric = "nosuch"', "env-efficient", "import path"], 1),
    ("rollouts.max_new_tokens = 1e8", "[rollouts]\nmax_new_tokens = 1e8\n", ["rollouts.max_new_tokens"], 1),
    ("unknown top-level key", "colour = 1\n", ["colour = 1", "unknown key"], 1),
    ("unknown key in [rollouts]", "[rollouts]\ngroup_sise = 4\n", ["rollouts.group_sise", "group_size"], 1),
    ("TOML syntax error", 'name = "ok"\nrounds = = 3\n', ["line 2, column", "invalid TOML"], 1),
    ('name = "Bad Name!" in the file', 'name = "Bad Name!"\n', ['name = "Bad Name!"'], 1),
    ("section given as a value", "rollouts = 5\n", ["rollouts = 5", "must be a table"], 1),
    ("seed = true", "seed = true\n", ["seed = true"], 1),
    ("rollouts.temperature = nan", "[rollouts]\ntemperature = nan\n", ["rollouts.temperature = nan"], 1),
    (
        "unknown estimator param",
        '[advantages]\nparams = { mode = "mean_std_norm", gama = 0.9 }\n',
        ["advantages.params", "gama"],
        1,
    ),
    ("env.params.size = 99", "[env.params]\nsize = 99\n", ["env.params", "size"], 1),
    ("env.params.max_steps = -3", "[env.params]\nmax_steps = -3\n", ["env.params", "max_steps"], 1),
    (
        "initial_policy folder missing",
        'initial_policy = "/nonexistent/creditline-policy"\n',
        ["initial_policy", "/nonexistent/creditline-policy"],
        1,
    ),
    (
        "four problems at once",
        'rounds = -3\ncolour = 1\n[rollouts]\ngroup_size = 0\n[train]\nlearning_rate = "fast"\n',
        ["rounds = -3", "colour = 1", "rollouts.group_size = 0", 'train.learning_rate = "fast"'],
        4,
    ),
]


def reject_config(
    capsys, tmp_path: Path, root: Path, case: str, argv: list[str], needles: list[str], n_lines=1
):
    """ARGV on an empty data root (which must stay without a catalog), then on the populated copy
    (whose files and catalog rows must not change): both rejected alike, naming `needles`."""
    empty = tmp_path / "empty-root"
    on_empty = cli("--data-root", str(empty), *argv)
    before = snapshot(root)
    outcome = cli("--data-root", str(root), *argv)
    changed = changes(before, snapshot(root))
    if (empty / CATALOG).exists():
        changed.append(f"{empty.name}/{CATALOG} created, registered: {registered(empty)}")
    record(case, outcome, changed, tmp_path)
    assert_rejected(outcome, needles, n_lines)
    assert changed == []
    assert registered(root) == [STORED]
    assert (on_empty.code, on_empty.lines) == (outcome.code, outcome.lines)


@pytest.mark.parametrize(
    ("case", "text", "needles", "n_lines"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES]
)
def test_a_bad_config_is_rejected_before_anything_is_registered(
    capsys, tmp_path, root, case, text, needles, n_lines
):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    argv = ["run", "--config", str(config)]
    reject_config(capsys, tmp_path, root, f"config: {case}", argv, [str(config), *needles], n_lines)


def test_a_missing_config_file_is_one_line(capsys, tmp_path, root):
    config = tmp_path / "absent.toml"
    argv = ["run", "--config", str(config)]
    reject_config(capsys, tmp_path, root, "config: missing file", argv, [str(config), "no such config file"])


def test_a_config_that_is_not_utf8_is_one_line(capsys, tmp_path, root):
    config = tmp_path / "latin1.toml"
    config.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    reject_config(
        capsys, tmp_path, root, "config: not UTF-8", ["run", "--config", str(config)], [str(config), "UTF-8"]
    )


def test_a_config_path_that_is_a_folder_is_one_line(capsys, tmp_path, root):
    folder = tmp_path / "conf.d"
    folder.mkdir()
    reject_config(capsys, tmp_path, root, "config: a folder", ["run", "--config", str(folder)], [str(folder)])


@pytest.mark.parametrize(
    ("case", "argv", "needles"),
    [
        ("run --experiment 'Bad Name!'", ["run", "--experiment", "Bad Name!"], ['name = "Bad Name!"']),
        ("run --rounds 0", ["run", "--rounds", "0"], ["--rounds 0", "20"]),
        ("run --rounds 99999", ["run", "--rounds", "99999"], ["--rounds 99999", "20"]),
        ("register --experiment 'Bad Name!'", ["register", "--experiment", "Bad Name!"], ["Bad Name!"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_bad_run_argument_is_rejected_before_anything_is_registered(
    capsys, tmp_path, root, case, argv, needles
):
    reject_config(capsys, tmp_path, root, case, argv, needles)


def test_debug_shows_the_traceback_instead(tmp_path, monkeypatch):
    from creditline.config.checks import ConfigError

    config = tmp_path / "bad.toml"
    config.write_text("rounds = -3\n")
    monkeypatch.setenv("CREDITLINE_DATA_ROOT", str(tmp_path / "root"))
    with pytest.raises(ConfigError, match="rounds = -3"):
        main(["--data-root", str(tmp_path / "root"), "--debug", "run", "--config", str(config)])
    assert not (tmp_path / "root").exists()


# --- 2. one field of the default config mutated: `creditline register --config FILE` ----------------


def toml_value(value: Any) -> str:
    """`value` as a TOML value (inline tables for mappings): the test's own tiny writer."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        escaped = "".join(
            "\\" + c if c in '"\\' else f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c
            for c in value
        )
        return f'"{escaped}"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def toml_document(config: dict[str, Any]) -> str:
    return "".join(f"{key} = {toml_value(value)}\n" for key, value in config.items())


def leaf_paths(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            paths += leaf_paths(value, (*prefix, key))
        else:
            paths.append((*prefix, key))
    return paths


DEFAULT_CONFIG = ExperimentConfig().to_dict()
LEAVES = sorted(leaf_paths(DEFAULT_CONFIG))
WRONG_VALUES = st.one_of(
    st.text(max_size=12),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=4)), max_size=3),
)


def test_the_toml_writer_round_trips_the_default_config():
    import tomllib

    assert tomllib.loads(toml_document(DEFAULT_CONFIG)) == DEFAULT_CONFIG


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(path=st.sampled_from(LEAVES), value=WRONG_VALUES)
def test_a_mutated_config_field_registers_or_is_rejected_cleanly(
    capsys, tmp_path_factory, template_root, monkeypatch, path, value
):
    import tomllib

    config = json.loads(json.dumps(DEFAULT_CONFIG))
    parent = config
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    work = tmp_path_factory.mktemp("mutated")
    root = work / "root"
    shutil.copytree(template_root, root)
    monkeypatch.setenv("CREDITLINE_DATA_ROOT", str(root))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    file = work / "mutated.toml"
    file.write_text(toml_document(config), encoding="utf-8")
    assert tomllib.loads(file.read_text(encoding="utf-8"))[path[0]] is not None  # the writer's TOML parses

    before = snapshot(root)
    start = time.perf_counter()
    outcome = cli("--data-root", str(root), "register", "--config", str(file))
    seconds = time.perf_counter() - start
    after = snapshot(root)
    tally(HYPOTHESIS_REGISTER, outcome.code, seconds)
    shown = f"{'.'.join(path)} = {value!r}: exit {outcome.code}\n{outcome.err}"
    assert outcome.code in (0, 2), shown
    assert "Traceback" not in outcome.err, shown
    if outcome.code == 2:
        assert is_clean_rejection(outcome), shown
        assert changes(before, after) == [], shown
    else:
        name = config["name"] if isinstance(config["name"], str) else DEFAULT_NAME
        assert name in registered(root), shown


# --- 3. input-table corruptions: `creditline advantages --estimator grpo --steps IN --out OUT` -------


def valid_steps() -> pd.DataFrame:
    """Two groups of two episodes of three steps; episode_reward is each episode's reward sum."""
    rows = []
    for g in range(2):
        for e in range(2):
            episode = f"e{2 * g + e}"
            rewards = [0.0, 0.5 * e, 1.0 * (g + e)]
            for step, reward in enumerate(rewards):
                rows.append((f"g{g}", episode, step, f"s{step}-{e}", reward, sum(rewards)))
    columns = ["group_id", "episode_id", "step_idx", "anchor_key", "step_reward", "episode_reward"]
    return pd.DataFrame(rows, columns=columns)


def _with(frame: pd.DataFrame, row: int, column: str, value: Any) -> pd.DataFrame:
    frame = frame.copy()
    if isinstance(value, str) and frame[column].dtype != object:
        frame[column] = frame[column].astype(str)
    elif value is None or isinstance(value, float):
        frame[column] = frame[column].astype(object if frame[column].dtype == object else float)
    frame.loc[row, column] = value
    return frame


def _write_steps(path: Path, frame: pd.DataFrame) -> Path:
    write_parquet_atomic(frame, path)
    return path


def _truncated(path: Path) -> Path:
    _write_steps(path, valid_steps())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _text(path: Path) -> Path:
    path.write_text("group_id,episode_id,step_idx\ng0,e0,0\n")
    return path


# (case, how the input is made (None: no file), extra arguments, needles; "{steps}" is the input path)
TABLE_CASES = [
    (
        "missing column anchor_key",
        lambda p: _write_steps(p, valid_steps().drop(columns=["anchor_key"])),
        [],
        ["anchor_key", "missing"],
    ),
    (
        "NaN in step_reward",
        lambda p: _write_steps(p, _with(valid_steps(), 4, "step_reward", float("nan"))),
        [],
        ["'step_reward'", "row 4", "nan"],
    ),
    (
        "inf in episode_reward",
        lambda p: _write_steps(p, _with(valid_steps(), 7, "episode_reward", float("inf"))),
        [],
        ["'episode_reward'", "row 7"],
    ),
    (
        "a string in step_reward",
        lambda p: _write_steps(p, _with(valid_steps(), 4, "step_reward", "oops")),
        [],
        ["'step_reward'", "row 4"],
    ),
    (
        "step_reward stored as text ('0.0', '0.5', ...)",
        lambda p: _write_steps(p, valid_steps().astype({"step_reward": str})),
        [],
        ["'step_reward'", "row 0", "'0.0'"],
    ),
    (
        "duplicate (episode_id, step_idx)",
        lambda p: _write_steps(p, _with(valid_steps(), 2, "step_idx", 1)),
        [],
        ["'step_idx'", "duplicate", "row 2", "'e0'"],
    ),
    (
        "step_idx not contiguous (0, 2)",
        lambda p: _write_steps(p, valid_steps().drop(index=1).reset_index(drop=True)),
        [],
        ["'step_idx'", "expected 1, got 2", "row 1", "'e0'"],
    ),
    (
        "negative step_idx",
        lambda p: _write_steps(p, _with(valid_steps(), 0, "step_idx", -1)),
        [],
        ["'step_idx'", "'e0'"],
    ),
    (
        "fractional step_idx 1.5",
        lambda p: _write_steps(p, _with(valid_steps(), 1, "step_idx", 1.5)),
        [],
        ["'step_idx'", "row 1", "1.5"],
    ),
    (
        "null episode_id",
        lambda p: _write_steps(p, _with(valid_steps(), 3, "episode_id", None)),
        [],
        ["'episode_id'", "row 3"],
    ),
    (
        "episode_reward varies within an episode",
        lambda p: _write_steps(p, _with(valid_steps(), 5, "episode_reward", 123.0)),
        [],
        ["'episode_reward'", "row 5"],
    ),
    (
        "an empty table",
        lambda p: _write_steps(p, valid_steps().iloc[:0]),
        [],
        ["{steps}"],
    ),
    (
        "file truncated to half its bytes",
        _truncated,
        [],
        ["--steps {steps}", "not a readable Parquet file"],
    ),
    ("a path that does not exist", None, [], ["--steps {steps}", "no such file"]),
    (
        "a text file named .parquet",
        _text,
        [],
        ["--steps {steps}", "not a readable Parquet file"],
    ),
    (
        "unknown estimator",
        lambda p: _write_steps(p, valid_steps()),
        ["--estimator", "nosuch"],
        ["'nosuch'", "grpo"],
    ),
    ("--param gamma without =", lambda p: _write_steps(p, valid_steps()), ["--param", "gamma"], ["'gamma'"]),
    (
        "unknown --param name",
        lambda p: _write_steps(p, valid_steps()),
        ["--param", "nosuch=1"],
        ["nosuch", "norm_by_std"],
    ),
    (
        "--param value of the wrong type",
        lambda p: _write_steps(p, valid_steps()),
        ["--param", 'norm_by_std="yes"'],
        ["norm_by_std"],
    ),
    (
        "--param conventions=nosuch",
        lambda p: _write_steps(p, valid_steps()),
        ["--param", "conventions=nosuch"],
        ["conventions", "'nosuch'", "verl"],
    ),
]


@pytest.mark.parametrize(("case", "make", "extra", "needles"), TABLE_CASES, ids=[c[0] for c in TABLE_CASES])
def test_a_bad_steps_table_is_rejected_and_writes_nothing(capsys, tmp_path, root, case, make, extra, needles):
    inputs, out = tmp_path / "inputs", tmp_path / "out" / "advantages.parquet"
    inputs.mkdir()
    out.parent.mkdir()  # --out must name a file in a folder that exists (test_bad_input_limits.py)
    steps = inputs / "steps.parquet"
    if make is not None:
        make(steps)
    estimator = [] if "--estimator" in extra else ["--estimator", "grpo"]
    argv = ["advantages", *estimator, *extra, "--steps", str(steps), "--out", str(out)]
    before = snapshot(root, inputs)
    outcome = cli("--data-root", str(root), *argv)
    changed = changes(before, snapshot(root, inputs))
    record(f"steps: {case}", outcome, changed, tmp_path, wrote=out.exists())
    assert_rejected(outcome, [n.format(steps=steps) for n in needles])
    assert not out.exists()
    assert changed == []


def test_the_valid_steps_table_computes(capsys, tmp_path, root):
    steps, out = _write_steps(tmp_path / "steps.parquet", valid_steps()), tmp_path / "adv.parquet"
    outcome = cli("--data-root", str(root), "advantages", "--estimator", "grpo",
                  "--steps", str(steps), "--out", str(out))  # fmt: skip
    assert outcome.code == 0, outcome.err
    assert len(pd.read_parquet(out)) == len(valid_steps())


CORRUPTIONS = st.one_of(
    st.just(float("nan")),
    st.just(None),
    st.sampled_from([float("inf"), float("-inf")]),
    st.text(max_size=6),
    st.integers(-(10**6), -1),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    row=st.integers(0, len(valid_steps()) - 1),
    column=st.sampled_from(list(valid_steps().columns)),
    value=CORRUPTIONS,
)
def test_a_corrupted_cell_computes_or_is_rejected_cleanly(capsys, tmp_path_factory, root, row, column, value):
    frame = valid_steps()
    if column in ("group_id", "episode_id", "anchor_key") and isinstance(value, int | float):
        value = str(value)  # an id column holds strings: a number becomes another (odd) id
    frame = _with(frame, row, column, value)
    work = tmp_path_factory.mktemp("cell")
    steps, out = _write_steps(work / "steps.parquet", frame), work / "out.parquet"
    start = time.perf_counter()
    outcome = cli("--data-root", str(root), "advantages", "--estimator", "grpo",
                  "--steps", str(steps), "--out", str(out))  # fmt: skip
    tally(HYPOTHESIS_CELL, outcome.code, time.perf_counter() - start)
    shown = f"row {row} {column} = {value!r}: exit {outcome.code}\n{outcome.err}"
    assert outcome.code in (0, 2), shown
    assert "Traceback" not in outcome.err, shown
    assert out.exists() == (outcome.code == 0), shown
    if outcome.code == 2:
        assert is_clean_rejection(outcome), shown
    else:
        assert np.isfinite(pd.read_parquet(out)["advantage"]).all(), shown


# --- 4. arguments naming an experiment that is not there ---------------------------------------------

EXPERIMENT_CASES = [
    ("rescore --experiment nosuch", ["rescore", "--experiment", "nosuch", "--rubric", "env"]),
    ("verify --experiment nosuch", ["verify", "--experiment", "nosuch"]),
    ("report --experiment nosuch", ["report", "--experiment", "nosuch"]),
    ("lineage --experiment nosuch", ["lineage", "--experiment", "nosuch"]),
]


@pytest.mark.parametrize(("case", "argv"), EXPERIMENT_CASES, ids=[c[0] for c in EXPERIMENT_CASES])
def test_an_unknown_experiment_is_named(capsys, tmp_path, root, case, argv):
    empty = tmp_path / "empty-root"
    on_empty = cli("--data-root", str(empty), *argv)
    assert_rejected(on_empty, ["'nosuch'", "no lineage store at"])
    assert not empty.exists()  # a read-only command on a mistyped root creates nothing
    before = snapshot(root)
    outcome = cli("--data-root", str(root), *argv)
    changed = changes(before, snapshot(root))
    record(case, outcome, changed, tmp_path)
    assert_rejected(outcome, ["'nosuch'", str(root / CATALOG), f"registered: {STORED}"])
    assert changed == []


# --- the matrix ----------------------------------------------------------------------------------------


def test_print_matrix(capsys):
    """Every case above with its outcome; `clean`: exit 2 with only `error:` lines."""
    width = max((len(r.case) for r in MATRIX), default=10)
    header = f"{'case':<{width}}  exit  lines  clean  changed  --out  first stderr line"
    lines = [header, "-" * (len(header) + 80)]
    for r in MATRIX:
        first = r.first if len(r.first) <= 140 else r.first[:137] + "..."
        lines.append(
            f"{r.case:<{width}}  {r.code:>4}  {r.lines:>5}  {'yes' if r.clean else 'NO':>5}  "
            f"{'YES' if r.changed else 'no':>7}  {'YES' if r.wrote else 'no':>5}  {first}"
        )
    rejected = sum(r.clean for r in MATRIX)
    changed = sum(r.changed for r in MATRIX)
    wrote = sum(r.wrote for r in MATRIX)
    lines.append(
        f"{len(MATRIX)} malformed inputs, {rejected} rejected with exit 2 and a one-line error, "
        f"{changed} changed stored data, {wrote} wrote their --out file"
    )
    for name, by_code in HYPOTHESIS.items():
        outcomes = ", ".join(
            f"exit {code}: {len(times)} (mean {sum(times) / len(times):.2f} s, max {max(times):.2f} s)"
            for code, times in sorted(by_code.items())
        )
        lines.append(f"hypothesis, {name}: {sum(map(len, by_code.values()))} examples; {outcomes}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
