"""`bench/learning.py --quick`: the learning table's smoke run, as a user would start it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "learning.py"
pytestmark = pytest.mark.slow


def _command(out: Path, *more: str) -> list[str]:
    return [sys.executable, str(BENCH), "--quick", "--tasks", "shaped-maze", "single-turn", "--estimators",
            "grpo", "gigpo", "--out", str(out), *more]  # fmt: skip


def _bench(out: Path, *more: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CREDITLINE_FAULT": fault} if fault else None  # SIGKILL at that failpoint
    return subprocess.run(_command(out, *more), capture_output=True, text=True, timeout=600, env=env)


def test_quick_run_files_each_run_as_it_ends_resumes_after_a_kill_and_reuses_them(tmp_path):
    root = tmp_path / "data"
    # started as a background job of a script is (SIGINT ignored): SIGTERM must still stop it between rounds
    killed = subprocess.Popen(_command(tmp_path, "--data-root", str(root)), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
    first_run = tmp_path / "runs" / "shaped-maze-grpo-s0.json"
    deadline = time.monotonic() + 300
    while not first_run.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    killed.send_signal(signal.SIGTERM)  # while the task's second run plays
    killed.wait(timeout=120)
    filed = first_run.read_text()
    # killed (SIGKILL) with the next run's result complete under its temporary name: nothing is filed for it,
    # and the file on record is untouched (a plain write would have left a truncated file in its place)
    second_run = tmp_path / "runs" / "shaped-maze-gigpo-s0.json"
    crashed = _bench(tmp_path, "--data-root", str(root), fault=f"write:{second_run.name}")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert not second_run.exists() and first_run.read_text() == filed
    assert any(p.name.startswith(f".{second_run.name}.tmp-") for p in second_run.parent.iterdir())
    first = _bench(tmp_path, "--data-root", str(root))
    assert f"removed {second_run.parent}/.{second_run.name}.tmp-" in first.stdout, first.stdout
    assert first.returncode == 0, first.stderr[-3000:]
    # the run filed before the kill is not played again; the task's other run is, in the same data root
    assert "compare bench-shaped-maze: grpo" not in first.stdout, first.stdout
    assert "compare bench-shaped-maze: gigpo" in first.stdout, first.stdout
    assert first_run.read_text() == filed
    # each task's runs were a `creditline compare` of their own: experiments of Dagster rounds in the data root
    compared = json.loads((root / "comparisons" / "bench-single-turn" / "runs.json").read_text())
    assert sorted(r["experiment"] for r in compared) == [
        "bench-single-turn-gigpo-s0",
        "bench-single-turn-grpo-s0",
    ]
    rows = [
        line
        for line in (tmp_path / "learning.md").read_text().splitlines()
        if line.startswith("| ") and "---" not in line
    ]
    assert len(rows) == 1 + 4  # header + 2 tasks × 2 estimators
    assert (tmp_path / "learning.png").read_bytes().startswith(b"\x89PNG")
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())  # the killed write's temporary file removed
    assert runs == ["shaped-maze-gigpo-s0.json", "shaped-maze-grpo-s0.json", "single-turn-gigpo-s0.json",
                    "single-turn-grpo-s0.json"]  # fmt: skip
    saved = json.loads((tmp_path / "runs" / "shaped-maze-gigpo-s0.json").read_text())
    assert (
        len(saved["success"]) == 3 and saved["episodes"] == 2 * 4 * 4
    )  # initial + 2 rounds; 2 × 4 tasks × 4
    second = _bench(tmp_path)  # every run is on file: nothing is played again
    assert second.returncode == 0 and "compare bench-" not in second.stdout, second.stdout
    assert json.loads((tmp_path / "runs" / "shaped-maze-gigpo-s0.json").read_text()) == saved


def test_branched_estimators_spend_half_the_tasks_on_continuations_and_igpo_needs_a_gold_answer():
    sys.path.insert(0, str(BENCH.parent))
    import learning

    from creditline.config.checks import ConfigError

    branched = learning.task_config("sparse-maze", "mc_branch", 0, quick=False)
    plain = learning.task_config("sparse-maze", "grpo", 0, quick=False)
    assert branched.branching.points == "entropy" and branched.branching.token_budget == 4096
    assert branched.rollouts.tasks_per_round * 2 == plain.rollouts.tasks_per_round == 64
    assert learning.task_config("lookup", "igpo", 0, quick=False).advantages.estimator == "igpo"
    with pytest.raises(ConfigError, match="needs tasks with a gold answer"):
        learning.task_config("sparse-maze", "igpo", 0, quick=False)
    # a run on file from before branching and the sample filter existed keeps its key
    saved = json.loads((BENCH.parent / "results" / "runs" / "sparse-maze-grpo-s0.json").read_text())
    assert learning.run_key(plain) == saved["config_hash"]


def test_the_credit_dial_tasks_change_one_dial_each_around_the_middle_and_warm_start():
    sys.path.insert(0, str(BENCH.parent))
    import learning

    middle = learning.task_config("dial-h8-d2", "gigpo", 0, quick=False)
    assert middle.env.name == "credit_dial" and middle.warm_start.episodes > 0
    # each task is one dial away from its neighbour: the middle, or the digit rule's tasks for theirs
    neighbour = {"dial-h8-d4-digit": "dial-h8-d2-digit", "dial-h8-d2-digit-shown": "dial-h8-d2-digit",
                 "dial-h8-d4-digit-shown": "dial-h8-d4-digit"}  # fmt: skip
    for task in learning.DIAL_TASKS:
        params = learning.task_config(task, "grpo", 0, quick=False).env.params
        base = learning.task_config(neighbour.get(task, "dial-h8-d2"), "grpo", 0, quick=False).env.params
        changed = {k for k in {*params, *base} if params.get(k) != base.get(k)}
        assert len(changed) == (task != "dial-h8-d2"), (task, changed)
    # the other tasks' runs on file keep their keys (the warm start section is the default there)
    saved = json.loads((BENCH.parent / "results" / "runs" / "shaped-maze-gigpo-s0.json").read_text())
    assert (
        learning.run_key(learning.task_config("shaped-maze", "gigpo", 0, quick=False)) == saved["config_hash"]
    )


def test_a_run_file_that_is_not_a_filed_run_is_refused_in_one_line_naming_it(tmp_path):
    sys.path.insert(0, str(BENCH.parent))
    import learning

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"config_hash": "abc", "success": [0.5]}))
    assert learning.read_run(good)["config_hash"] == "abc"
    for name, text in [("cut.json", '{"config_hash": "ab'), ("list.json", "[1, 2]"), ("none.json", "{}")]:
        bad = tmp_path / name
        bad.write_text(text)
        with pytest.raises(SystemExit) as refused:
            learning.read_run(bad)
        message = str(refused.value)
        assert (
            message.startswith(f"{bad}: not a filed run") and "delete it" in message and "\n" not in message
        )
