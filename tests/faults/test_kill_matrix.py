"""The fault matrix: SIGKILL `creditline run` at every stage boundary and mid-write, then run it again.

Each case runs two tiny rounds with `CREDITLINE_FAULT=<failpoint>:<n>` (creditline/faults.py), so the
process kills itself (SIGKILL: no cleanup, no `finally`) at that point of round 1 or 2. Then a plain
`creditline run` on the same data root must, without any help:
- finish every round (commit points for rounds 1 and 2, evaluations for rounds 0, 1, 2),
- produce exactly the checkpoints of an uninterrupted run (same content hashes: nothing skipped,
  nothing trained twice),
- leave `creditline verify` clean (files, edges both ways, round commits, MLflow runs) and no temp file,
- record the killed attempt as a FAILED Dagster run, and leave no MLflow run RUNNING.
The killed runs are processes of their own (one at a time), forked from a server that has imported the
libraries once (`tests/faults/preloaded.py`: 11 s of CPU for a kill in round 2 instead of 22); the re-runs, `verify`
and the reference runs are `creditline` in the test's process (`tests.e2e.cli.creditline`, on one torch thread
as the killed processes), beside the next killed run: a re-run is the command's own code either way, and an
in-process call saves the seconds of imports a process pays. The matrix is printed at the end.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import torch

from creditline.store.orphans import find_orphans
from tests.e2e.cli import creditline
from tests.faults.preloaded import PreloadedCli

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
EXPERIMENT = "faults"

CHECKPOINT_UNCOMMITTED = "checkpoint: its folder's record written, the training table's not (round 2)"
REWARD_MODEL_UNCOMMITTED = "reward model: its record written, its values' not (round 1)"
UNCOMMITTED = {CHECKPOINT_UNCOMMITTED: (2, "checkpoint"), REWARD_MODEL_UNCOMMITTED: (1, "reward_model")}
"""Cases killed inside a stage's records transaction, after the record of the named (round, kind) was written:
none of the stage's records may be in the catalog after the kill (`LineageStore.session(atomic=True)`)."""

# (case, failpoint spec). Round 1 writes the initial policy folder and evaluates it too, so the n-th hit
# of some failpoints falls in round 1 or 2 as the comment says. tiny_experiment.toml: 2 updates a round.
CASES = [
    ("rollouts: mid-write of episodes (round 1)", "write:episodes.parquet:1"),
    ("boundary rollouts → scores (round 2)", "recorded:rollouts:2"),
    ("scores: mid-write (round 2)", "write:scores.parquet:2"),
    ("scores: inside the lineage transaction (round 1)", "lineage:scores:1"),
    ("advantages: mid-write (round 1)", "write:advantages.parquet:1"),
    ("boundary advantages → training (round 2)", "recorded:advantages:2"),
    ("training: after an update (round 2)", "train:update:3"),
    ("checkpoint: folder complete, not renamed (round 1)", "write:policy:2"),
    (CHECKPOINT_UNCOMMITTED, "lineage:training:2"),
    ("evaluation: mid-write (round 1, the initial policy's)", "write:evaluation.parquet:1"),
    ("MLflow logging of training (round 1)", "mlflow:checkpoint:1"),
    ("MLflow logging of evaluation (round 2)", "mlflow:evaluation:2"),
    ("commit point: runs closed, commit not written (round 1)", "commit:round:1"),
]
PRIME = Path(__file__).resolve().parents[1] / "tiny_prime_experiment.toml"
PRIME_CASES = [  # the step-reward model's two artifacts (estimator prime), against a prime reference run
    ("reward model: folder complete, not renamed (round 2)", "write:reward_model:2"),
    (REWARD_MODEL_UNCOMMITTED, "after:reward_model:1"),
]


@dataclass
class Outcome:
    killed_rc: int = 0
    rerun_rc: int = 0
    rerun_stdout: str = ""
    rerun_stderr: str = ""
    verify_rc: int = 0
    verify_out: str = ""
    temp_after_kill: int = 0
    temp_after_rerun: list[str] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    evaluated: list[int] = field(default_factory=list)
    checkpoints: dict[int, str] = field(default_factory=dict)
    failed_runs: int = 0
    running_mlflow: int = 0
    recorded_after_kill: list[tuple[int, str]] = field(default_factory=list)
    """(round, kind) of every artifact in the catalog right after the kill."""


def _temp_files(data_root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(data_root)) for p in data_root.rglob("*") if ".tmp-" in p.name or ".old-" in p.name
    )


def _state(data_root: Path, outcome: Outcome) -> Outcome:
    if not (data_root / "lineage.duckdb").exists():  # nothing was ever recorded: the problems say why
        return outcome
    with duckdb.connect(str(data_root / "lineage.duckdb"), read_only=True) as con:
        outcome.committed = [r[0] for r in con.execute(
            "SELECT round FROM round_commits WHERE experiment = ? ORDER BY round", [EXPERIMENT]).fetchall()]  # fmt: skip
        outcome.evaluated = [r[0] for r in con.execute(
            "SELECT round FROM evaluations WHERE experiment = ? ORDER BY round", [EXPERIMENT]).fetchall()]  # fmt: skip
        outcome.checkpoints = dict(con.execute(
            "SELECT round, content_hash FROM artifacts WHERE experiment = ? AND kind = 'checkpoint' AND variant = ''",
            [EXPERIMENT]).fetchall())  # fmt: skip
    instance = dg.DagsterInstance.from_config(str(data_root / "dagster_home"))
    outcome.failed_runs = len(instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE])))
    instance.dispose()
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{data_root / 'mlflow.db'}")
    experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    outcome.running_mlflow = len(
        client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'")
    )
    return outcome


def _kill(cli: PreloadedCli, data_root: Path, fault: str, config: Path) -> Outcome:
    killed = cli.killed_at(data_root, fault, *_run(config))
    outcome = Outcome(killed_rc=killed.returncode, temp_after_kill=len(_temp_files(data_root)))
    if (data_root / "lineage.duckdb").exists():
        with duckdb.connect(str(data_root / "lineage.duckdb"), read_only=True) as con:
            outcome.recorded_after_kill = con.execute(
                "SELECT round, kind FROM artifacts WHERE experiment = ? ORDER BY ALL", [EXPERIMENT]).fetchall()  # fmt: skip
    return outcome


def _run(config: Path) -> tuple[str, ...]:
    return ("run", "--experiment", EXPERIMENT, "--config", str(config))


def _recover(data_root: Path, outcome: Outcome, config: Path) -> Outcome:
    """A plain re-run and `verify` in this process (on one thread, as the killed process ran), then the state."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rerun = creditline(data_root, *_run(config))
        verify = creditline(data_root, "verify", "--experiment", EXPERIMENT)
    finally:
        torch.set_num_threads(threads)
    outcome.rerun_rc, outcome.rerun_stdout, outcome.rerun_stderr = (
        rerun.returncode,
        rerun.stdout,
        rerun.stderr,
    )
    outcome.verify_rc, outcome.verify_out = verify.returncode, verify.stdout + verify.stderr
    outcome.temp_after_rerun = _temp_files(data_root) + [str(o.path) for o in find_orphans(data_root)]
    return _state(data_root, outcome)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory, kill_matrix_rows, preloaded_cli) -> tuple[Outcome, dict[str, Outcome]]:
    """Every case and an uninterrupted reference run: each killed process runs beside the re-run of the one before."""
    cases = [(name, fault, TINY) for name, fault in CASES] + [
        (name, fault, PRIME) for name, fault in PRIME_CASES
    ]
    roots = {name: tmp_path_factory.mktemp("kill") for name, _, _ in cases}
    with ThreadPoolExecutor(max_workers=1) as pool:
        killed = {
            name: pool.submit(_kill, preloaded_cli, roots[name], fault, config)
            for name, fault, config in cases
        }
        references = {which: _recover(tmp_path_factory.mktemp("reference"), Outcome(), config)
                      for which, config in (("tiny", TINY), ("prime", PRIME))}  # fmt: skip
        outcomes = {name: _recover(roots[name], killed[name].result(), config) for name, _, config in cases}
    for name, fault, config in cases:
        ok = _problems(references["prime" if config == PRIME else "tiny"], outcomes[name])
        kill_matrix_rows.append((name, fault, outcomes[name].killed_rc, outcomes[name].temp_after_kill,
                                 "; ".join(ok) if ok else "recovered"))  # fmt: skip
    return references, outcomes


def _problems(reference: Outcome, outcome: Outcome) -> list[str]:
    """What a case got wrong, in words (empty: it recovered completely)."""
    checks = [
        (outcome.killed_rc == -9, f"first run exited {outcome.killed_rc}, not by SIGKILL"),
        (outcome.rerun_rc == 0, f"re-run exited {outcome.rerun_rc}: {outcome.rerun_stderr[-300:]}"),
        (outcome.verify_rc == 0, f"verify: {outcome.verify_out[-300:]}"),
        (not outcome.temp_after_rerun, f"temp files left: {outcome.temp_after_rerun}"),
        (outcome.committed == [1, 2], f"committed rounds {outcome.committed}"),
        (outcome.evaluated == [0, 1, 2], f"evaluated rounds {outcome.evaluated}"),
        (outcome.checkpoints == reference.checkpoints, "checkpoints differ from the uninterrupted run"),
        (outcome.failed_runs == 1, f"{outcome.failed_runs} failed Dagster runs, expected the killed one"),
        (outcome.running_mlflow == 0, f"{outcome.running_mlflow} MLflow runs left RUNNING"),
    ]
    return [message for ok, message in checks if not ok]


@pytest.mark.parametrize("which", ["tiny", "prime"])
def test_the_uninterrupted_reference_run_is_clean(matrix, which):
    reference = matrix[0][which]
    assert reference.rerun_rc == 0, reference.rerun_stderr[-2000:]
    assert reference.verify_rc == 0, reference.verify_out
    assert reference.committed == [1, 2] and reference.evaluated == [0, 1, 2]
    assert sorted(reference.checkpoints) == [1, 2] and reference.running_mlflow == 0


@pytest.mark.parametrize("case", [name for name, _ in [*CASES, *PRIME_CASES]])
def test_a_killed_run_is_completed_by_a_plain_rerun(matrix, case):
    references, outcomes = matrix
    outcome = outcomes[case]
    assert _problems(references["prime" if case in dict(PRIME_CASES) else "tiny"], outcome) == []
    assert "cleaned up dagster run" in outcome.rerun_stdout  # the dead run was reclaimed, and said so


@pytest.mark.parametrize("case", list(UNCOMMITTED))
def test_a_stage_killed_inside_its_records_leaves_none_of_them(matrix, case):
    """The kill came after one of the stage's records was written and before the others: the catalog holds none
    of them, and what the round recorded before the stage is there."""
    recorded = matrix[1][case].recorded_after_kill
    round_, kind = UNCOMMITTED[case]
    assert (round_, kind) not in recorded and (round_, "steps") in recorded, recorded
