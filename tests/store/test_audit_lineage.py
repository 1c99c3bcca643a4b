"""The lineage audit lists every node of a checkpoint's chain, recorded or not, and says what disagrees."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from creditline.store import ArtifactRecord, LineageStore
from creditline.store.audit import (
    NO_RECORD,
    NOT_IN_CHAIN,
    UNRECORDED,
    WIDTH,
    AuditEntry,
    lineage_report,
)

Recorded = dict[tuple[int, str], ArtifactRecord]
Sql = Callable[..., list]


def _by_hash(entries: list[AuditEntry]) -> dict[str, AuditEntry]:
    return {e.content_hash: e for e in entries}


def test_a_consistent_chain_matches_back_to_the_initial_policy(
    store: LineageStore, recorded: Recorded
) -> None:
    report = lineage_report(store, "exp")
    assert report is not None and report.round == 2 and report.all_match and report.mismatches == []
    listed = {(e.round, e.kind, e.on_disk) for e in report.entries}
    chain = {
        (r, k, "ok") for r in (1, 2) for k in ("checkpoint", "advantages", "scores", "steps", "episodes")
    }
    assert listed == chain | {(0, "checkpoint", "ok")}  # training is a child of the checkpoint, not a parent
    assert report.entries[0].relation == "audited" and report.entries[0].round == 2
    assert "all files match" in report.as_text()


def test_an_edited_hash_is_listed_as_unrecorded_and_its_row_as_not_in_chain(
    sql: Sql, store: LineageStore, recorded: Recorded
) -> None:
    scores = recorded[1, "scores"]
    edited = "e" * 64
    sql(store, "UPDATE artifacts SET content_hash = ? WHERE content_hash = ?", [edited, scores.content_hash])
    report = lineage_report(store, "exp")
    assert report is not None and not report.all_match
    entries = _by_hash(report.entries)
    unrecorded = entries[scores.content_hash]
    assert (unrecorded.kind, unrecorded.on_disk, unrecorded.relation, unrecorded.round, unrecorded.path) == (
        UNRECORDED,
        NO_RECORD,
        "computed_from",
        1,
        "",
    )
    assert unrecorded.detail == {"reached_from": recorded[1, "advantages"].content_hash[:12]}
    beside = entries[edited]
    assert (beside.kind, beside.round, beside.relation, beside.on_disk) == (
        "scores",
        1,
        NOT_IN_CHAIN,
        "changed",
    )
    # the walk goes on through the unrecorded node: round 1's episodes are still listed and fine
    assert entries[recorded[1, "episodes"].content_hash].on_disk == "ok"
    # the entries' two, then what `verify` finds about the listed artifacts' edges (the edited row's edges)
    assert len(report.mismatches) == 2 + len(report.problems) and report.problems
    assert all(p.startswith(("edge_missing: ", "orphan_edge: ", "dangling: ")) for p in report.problems)
    text = report.as_text()
    assert f"LINEAGE DOES NOT MATCH ({len(report.mismatches)})" in text
    assert f"round 1 unrecorded {scores.content_hash[:12]}: in the chain (computed_from" in text
    assert f"round 1 scores {edited[:12]}: recorded, but the chain points at another scores" in text
    assert "file is changed" in text
    as_dict = report.as_dict()
    assert as_dict["all_match"] is False and len(as_dict["mismatches"]) == len(report.mismatches)


def test_a_deleted_row_is_listed_as_unrecorded(sql: Sql, store: LineageStore, recorded: Recorded) -> None:
    checkpoint = recorded[1, "checkpoint"]
    sql(store, "DELETE FROM artifacts WHERE content_hash = ?", [checkpoint.content_hash])
    report = lineage_report(store, "exp")
    assert report is not None and not report.all_match
    unrecorded = _by_hash(report.entries)[checkpoint.content_hash]
    assert (unrecorded.kind, unrecorded.on_disk, unrecorded.round) == (UNRECORDED, NO_RECORD, 2)
    assert unrecorded.relation in {"initialized_from", "generated_from"}
    assert [e for e in report.entries if e.relation == NOT_IN_CHAIN] == []
    assert {(e.round, e.kind) for e in report.entries} >= {(1, "advantages"), (0, "checkpoint")}


def test_an_edited_audited_checkpoint_shows_its_round_beside_it(
    sql: Sql, store: LineageStore, recorded: Recorded
) -> None:
    sql(
        store,
        "UPDATE artifacts SET content_hash = 'x' WHERE content_hash = ?",
        [recorded[2, "checkpoint"].content_hash],
    )
    report = lineage_report(store, "exp")
    assert report is not None and not report.all_match
    assert (report.entries[0].kind, report.entries[0].on_disk) == ("checkpoint", "changed")
    beside = {e.kind for e in report.entries if e.relation == NOT_IN_CHAIN}
    assert beside == {"advantages", "scores", "steps", "episodes"}


def test_a_changed_file_is_changed(store: LineageStore, recorded: Recorded) -> None:
    Path(recorded[1, "steps"].path).write_bytes(b"tampered")
    report = lineage_report(store, "exp")
    assert report is not None and not report.all_match
    (bad,) = [e for e in report.entries if not e.matches]
    assert (bad.kind, bad.on_disk, bad.round) == ("steps", "changed", 1)
    assert report.mismatches[0] == f"round 1 steps {bad.content_hash[:12]}: file changed ({bad.path})"
    assert all(m.startswith("consumed: exp/") for m in report.mismatches[1:])  # what was made from it


def _artifact_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"  r\d", line)]


def test_the_compact_view_is_one_narrow_line_per_artifact_with_its_derivation_beside_it(
    store: LineageStore, recorded: Recorded
) -> None:
    report = lineage_report(store, "exp")
    assert report is not None
    text = report.as_text()
    lines = text.splitlines()
    assert max(map(len, lines)) <= WIDTH
    assert len(lines) == 2 + len(report.entries) + 1  # title, column names, the artifacts, the verdict
    rows = _artifact_lines(text)
    assert [line.split()[:3] for line in rows] == [
        [f"r{e.round}", e.kind, e.content_hash[:12]] for e in report.entries
    ]
    by_node = {(line.split()[0], line.split()[1]): line for line in rows}
    # each node says how it was derived from its parents: the relation sits beside the derived node
    assert by_node["r2", "checkpoint"].endswith(
        "ok    initialized_from r1 checkpoint; trained_on advantages, steps"
    )
    assert by_node["r2", "advantages"].endswith("computed_from scores, steps")
    assert by_node["r1", "scores"].endswith("scored_from episodes, steps")
    assert by_node["r1", "steps"].endswith("generated_from r0 checkpoint")
    assert by_node["r0", "checkpoint"].endswith("(initial policy)")
    assert lines[-1] == "all files match their recorded hashes"


def test_the_compact_view_of_a_changed_file_stays_narrow(store: LineageStore, recorded: Recorded) -> None:
    Path(recorded[1, "steps"].path).write_bytes(b"tampered")
    report = lineage_report(store, "exp")
    assert report is not None
    text = report.as_text()
    assert max(map(len, text.splitlines())) <= WIDTH
    assert [line for line in _artifact_lines(text) if " CHANGED " in line] == [
        line for line in _artifact_lines(text) if line.split()[:2] == ["r1", "steps"]
    ]
    assert f"LINEAGE DOES NOT MATCH ({len(report.mismatches)}):" in text
    assert recorded[1, "steps"].path in text.replace("\n    ", "")  # a wrapped mismatch line keeps its path


def test_the_wide_view_names_each_parent_by_hash_beside_the_node_derived_from_it(
    store: LineageStore, recorded: Recorded
) -> None:
    report = lineage_report(store, "exp")
    assert report is not None
    lines = report.as_text(wide=True).splitlines()
    advantages = recorded[2, "advantages"]
    at = lines.index(f"  advantages           {advantages.content_hash[:12]}  ok")
    scores, steps = recorded[2, "scores"].content_hash[:12], recorded[2, "steps"].content_hash[:12]
    assert lines[at + 1] == f"      from: computed_from scores {scores}, steps {steps}"
    assert f"      {advantages.path}" in lines[at + 2 : at + 4]  # after its estimator and runs, if any
    assert "round 0  (initial policy)" in lines and lines[-1] == "all files match their recorded hashes"
    assert report.as_dict()["artifacts"][1]["parents"]  # the JSON lists each artifact's parents too
