"""`creditline import verifiers` end to end: a round made of verifiers' files, advantages back out, and back in.

Synthetic files in verifiers' shapes (tests/verifiers_files.py), token ids inside the built-in tiny policy's
vocabulary so the imported round trains. Files written by verifiers itself: test_verifiers_real_files.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from verifiers_files import classic_line, classic_run, v1_run, write_lines

from creditline.round import training_rows
from creditline.store import LineageStore, read_parquet
from tests.e2e.cli import creditline

pytestmark = pytest.mark.slow
CONFIG = "tests/tiny_experiment.toml"


def per_token(data_root, experiment, round_=1) -> dict[str, list[float]]:
    """source_ref → the round's per-token advantages."""
    store = LineageStore(data_root / "lineage.duckdb")
    steps = read_parquet(store.artifact(experiment, round_, "steps").path)
    advantages = read_parquet(store.artifact(experiment, round_, "advantages").path)
    rows = training_rows(steps, advantages)
    return {
        ref: [float(v) for v in values]
        for ref, values in zip(rows["source_ref"], rows["completion_advantages"], strict=True)
    }


def test_v1_import_export_reimport_gives_the_same_per_token_advantages(tmp_path):
    data = tmp_path / "data"
    imported = creditline(
        data, "import", "verifiers", str(v1_run(tmp_path / "run")), "--experiment", "v1", "--config", CONFIG
    )
    assert imported.returncode == 0, imported.stderr
    assert "importing 4 v1 rollouts" in imported.stdout and "round   1/2" in imported.stdout
    first = per_token(data, "v1")
    assert any(v != 0.0 for values in first.values() for v in values)  # task k1 has rewards 1 and 0

    out = tmp_path / "back" / "traces.jsonl"
    out.parent.mkdir()
    exported = creditline(data, "export", "--experiment", "v1", "--format", "verifiers-v1", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 4
    for n, line in enumerate(lines, start=1):
        for index, node in enumerate(line["traces"][0]["nodes"]):
            assert node.get("advantages") == first.get(f"{n}:{index}")  # sampled nodes filled, others absent

    # prime-rl's saved-rollout folders; the folder is made (its parent exists)
    rollouts = tmp_path / "rollouts"
    saved = creditline(
        data, "export", "--experiment", "v1", "--format", "prime-rl-rollouts", "--out", str(rollouts)
    )
    assert saved.returncode == 0, saved.stderr
    every = (rollouts / "step_1" / "train" / "all" / "traces.jsonl").read_text().splitlines()
    effective = (rollouts / "step_1" / "train" / "effective" / "traces.jsonl").read_text().splitlines()
    assert every == out.read_text().splitlines() and 0 < len(effective) <= len(every)
    for bad, message in ((out, "is a file; this format writes a folder (give a folder's path)"),
                         (tmp_path / "no" / "such", f"folder {tmp_path / 'no'} does not exist")):  # fmt: skip
        refused = creditline(
            data, "export", "--experiment", "v1", "--format", "prime-rl-rollouts", "--out", str(bad)
        )
        assert refused.returncode == 2 and refused.stderr.strip() == f"error: --out {bad}: {message}"

    again = creditline(data, "import", "verifiers", str(out), "--experiment", "v1-again", "--config", CONFIG)
    assert again.returncode == 0, again.stderr
    assert per_token(data, "v1-again") == first  # the exported advantages come back as presets, unchanged
    store = LineageStore(data / "lineage.duckdb")
    trained = {e: store.artifact(e, 1, "checkpoint").content_hash for e in ("v1", "v1-again")}
    assert trained["v1"] == trained["v1-again"]  # same tokens, same advantages: the very same checkpoint

    lineage = json.loads(creditline(data, "lineage", "--experiment", "v1", "--json").stdout)
    # the round-trip experiment trained the very same checkpoint (same tokens, same advantages), so the
    # lineage of that hash shows both experiments' chains; this one's source is the file it imported
    (source,) = [
        a for a in lineage["artifacts"] if a["kind"] == "source" and a.get("experiment", "v1") == "v1"
    ]
    assert source["detail"]["format"] == "v1" and source["detail"]["files"][0]["name"] == "traces.jsonl"
    verify = creditline(data, "verify", "--experiment", "v1")
    assert verify.returncode == 0 and "0 problem(s)" in verify.stdout, verify.stdout


def test_a_bad_line_stores_nothing_and_names_file_line_and_field(tmp_path):
    data = tmp_path / "data"
    lines = [classic_line(0, "a", 1.0, [[7, 8]]), classic_line(0, "b", 0.0, [[8]])]
    lines[1]["trajectory"][0]["tokens"]["completion_logprobs"] = []
    folder = write_lines(tmp_path / "run" / "results.jsonl", lines).parent
    bad = creditline(data, "import", "verifiers", str(folder), "--experiment", "bad", "--config", CONFIG)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (f"error: {folder}/results.jsonl line 2: trajectory[0].tokens.completion_logprobs: "
                                  "0 values for 1 completion tokens")  # fmt: skip
    assert not (data / "lineage.duckdb").exists() and not (data / "bad").exists()

    foreign = write_lines(tmp_path / "big" / "results.jsonl",
                          [classic_line(0, "a", 1.0, [[7, 99999]]), classic_line(0, "b", 0.0, [[8]])]).parent  # fmt: skip
    refused = creditline(data, "import", "verifiers", str(foreign), "--experiment", "big", "--config", CONFIG)
    assert refused.returncode == 2 and "token id 99999, beyond the policy's vocabulary" in refused.stderr
    assert not data.exists()  # checked against the policy's vocabulary before anything was registered


def tree(root) -> dict[str, str]:
    """Every file under `root` (the catalog included) → the sha256 of its bytes."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def test_a_refused_import_writes_nothing_and_the_corrected_retry_is_imported(tmp_path):
    data = tmp_path / "data"
    one_round = tmp_path / "one_round.toml"  # the tiny experiment, run for one round only
    one_round.write_text(Path(CONFIG).read_text().replace("rounds = 2", "rounds = 1"))
    good = [classic_line(0, "a", 1.0, [[7, 8]]), classic_line(0, "b", 0.0, [[8]])]
    foreign = write_lines(
        tmp_path / "big" / "results.jsonl", [classic_line(0, "a", 1.0, [[7, 99999]]), good[1]]
    )
    refused = creditline(
        data, "import", "verifiers", str(foreign), "--experiment", "e", "--config", one_round
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert not data.exists()
    ok = write_lines(tmp_path / "ok" / "results.jsonl", good)
    retry = creditline(data, "import", "verifiers", str(ok), "--experiment", "e", "--config", one_round)
    assert retry.returncode == 0, retry.stderr  # not "registered with config …; use a new experiment name"
    before = tree(data)
    for name in ("e", "other"):  # the next round of `e`, or a new experiment, on a root in use
        again = creditline(
            data, "import", "verifiers", str(foreign), "--experiment", name, "--config", one_round
        )
        assert again.returncode == 2 and "token id 99999" in again.stderr, again.stderr
        assert tree(data) == before  # byte for byte, the catalog included
    # refusals that need the catalog: every round of `e` run; `e` under another config
    for config, why in (
        (one_round, "has run all 1 rounds of its config"),
        (CONFIG, "is registered with config"),
    ):
        again = creditline(data, "import", "verifiers", str(ok), "--experiment", "e", "--config", config)
        assert again.returncode == 2 and why in again.stderr and again.stderr.count("\n") == 1, again.stderr
        assert tree(data) == before


def test_an_imported_classic_round_rescores_and_importing_again_makes_the_next_round(tmp_path):
    data = tmp_path / "data"
    folder = classic_run(tmp_path / "run")
    assert (
        creditline(
            data, "import", "verifiers", str(folder), "--experiment", "c", "--config", CONFIG
        ).returncode
        == 0
    )
    store = LineageStore(data / "lineage.duckdb")
    scores = read_parquet(store.artifact("c", 1, "scores").path)
    assert {"criterion.source.correct", "criterion.source.num_turns"} <= set(scores.columns)
    rescored = creditline(
        data, "rescore", "--experiment", "c", "--rubric", "env-efficient", "--rounds", "1..1"
    )
    assert rescored.returncode == 0, rescored.stderr
    assert store.artifacts("c", 1, "rescore_advantages")
    again = creditline(data, "import", "verifiers", str(folder), "--experiment", "c", "--config", CONFIG)
    assert again.returncode == 0 and "as c round 2" in again.stdout  # the next round, same files
    assert {a.round for a in store.artifacts("c", kind="checkpoint")} == {
        0,
        1,
        2,
    }  # round 2 trained on round 1's
