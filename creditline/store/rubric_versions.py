"""Every rubric version ever registered or scored, kept in the lineage store after the code moves on.

A rubric's version is a hash of its definition (`creditline.credit.rubrics`), so editing a rubric replaces
its version in code. The tables scored with the old version stay on disk and in ``artifacts``; this
table keeps the version itself, with the definition it stood for (criteria, weights, parameters and
source), so the re-score partitions of old versions can be listed, and read, after the code that
defined them is gone. Rows are only ever inserted: the first sighting of a version wins, and
recording it again is a no-op. Each row also keeps the name or import path its rubric was first loaded by
(`source`: a plugin's may be an import path known nowhere else), so a re-score can load it again.

The store does not import `creditline.credit.rubrics` at run time (only for type annotations): every module
that imports `creditline.store` would otherwise carry the rubrics in its code version
(`assets/code_version.py`), and editing a rubric would mark the rollouts stale.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import duckdb

from creditline.ids import canonical_json
from creditline.store.lineage import LineageStore

if TYPE_CHECKING:
    from creditline.credit.rubrics import Rubric, RubricGroup


@dataclass(frozen=True)
class RubricVersionRecord:
    """One rubric version as first recorded."""

    version: str
    """`<rubric name>-<8 hex>`, as `Rubric.version` gives it (also the re-score partition key)."""
    rubric: str
    """The rubric's name when the version was recorded."""
    definition: Mapping[str, Any]
    """What the version hashes: criteria (name, level, weight, params, source) or a group's members."""
    first_seen_at: datetime | None = None
    """When the store first saw the version (naive UTC)."""
    source: str = ""
    """The name or import path the rubric was first loaded by (`creditline.credit.rubric_registry`); empty
    for a version recorded before the store kept it."""


def rubric_definition(rubric: Rubric | RubricGroup) -> dict[str, Any]:
    """A rubric's definition as JSON-serialisable data (a group nests its members' definitions)."""
    members = getattr(rubric, "members", None)  # a RubricGroup (the type is not imported: see above)
    if members is not None:
        return {"name": rubric.name, "members": [rubric_definition(m) for m in members]}
    criteria = getattr(rubric, "criteria", ())
    return {"name": rubric.name, "criteria": [c.definition() for c in criteria]}


def record_rubric_version(
    store: LineageStore, version: str, rubric: str, definition: Mapping[str, Any], source: str = ""
) -> bool:
    """Record ``version`` unless the store already has it; True if it was new."""
    record = RubricVersionRecord(version, rubric, dict(definition), source=source)
    return bool(_insert_absent(store, [record]))


def record_rubrics(store: LineageStore, rubrics: Mapping[str, Rubric | RubricGroup]) -> list[str]:
    """Record the versions of ``rubrics`` (keyed by the name or import path each was loaded by) in one
    transaction; returns those that were new, sorted."""
    records = [
        RubricVersionRecord(r.version, r.name, rubric_definition(r), source=source)
        for source, r in rubrics.items()
    ]
    return _insert_absent(store, records)


def rubric_versions(store: LineageStore) -> list[RubricVersionRecord]:
    """Every recorded rubric version, oldest first (ties by version)."""
    rows = store.transaction(
        lambda con: con.execute(
            "SELECT version, rubric, definition_json, first_seen_at, source FROM rubric_versions "
            "ORDER BY first_seen_at, version"
        ).fetchall()
    )
    return [RubricVersionRecord(v, r, json.loads(d), t, s or "") for v, r, d, t, s in rows]


def _insert_absent(store: LineageStore, records: list[RubricVersionRecord]) -> list[str]:
    now = datetime.now(UTC).replace(tzinfo=None)
    unique = {r.version: r for r in records}

    def work(con: duckdb.DuckDBPyConnection) -> list[str]:
        known = {
            row[0]
            for row in con.execute(
                "SELECT version FROM rubric_versions WHERE list_contains(?, version)", [sorted(unique)]
            ).fetchall()
        }
        new = sorted(set(unique) - known)
        if new:
            con.executemany(
                "INSERT INTO rubric_versions (version, rubric, definition_json, first_seen_at, source) "
                "VALUES (?, ?, ?, ?, ?)",
                [
                    [v, unique[v].rubric, canonical_json(dict(unique[v].definition)), now, unique[v].source]
                    for v in new
                ],
            )
        return new

    return store.transaction(work) if unique else []
