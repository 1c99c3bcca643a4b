"""The blocking checks stop a round before training: a corrupted stored table, a changed parent checkpoint.

A round is run part way (rollouts, scores, advantages recorded), something on disk is then changed
behind the store's back, and the round is run again as `creditline run` would: the stages whose
outputs are recorded are reused, so the stored (now corrupted) table reaches the blocking check,
which fails and stops everything downstream. Nothing is trained, nothing committed.
"""

from pathlib import Path

import dagster as dg
import pytest

from assets import round_key
from creditline.config import from_dict
from creditline.store import LineageStore, read_parquet, write_parquet_atomic
from creditline.store.rounds import round_commits
from pipelines.definitions import ROUND_JOB, make_definitions
from pipelines.round_runner import failure_lines

pytestmark = pytest.mark.slow
TINY = {"rollouts": {"tasks_per_round": 2, "group_size": 3}, "train": {"epochs": 1, "minibatches": 1},
        "eval": {"num_tasks": 4}}  # fmt: skip
BEFORE_TRAINING = [dg.AssetKey(k) for k in ("episodes", "steps", "scores", "advantages")]


def _round(data_root: Path, instance, name: str, round_: int, selection=None):
    key = round_key(name, round_)
    instance.add_dynamic_partitions("rounds", [key])
    job = make_definitions(str(data_root)).resolve_job_def(ROUND_JOB)
    return job.execute_in_process(instance=instance, partition_key=key, raise_on_error=False,
                                  asset_selection=selection)  # fmt: skip


def _failed_checks(result) -> dict[str, str]:
    return {e.event_specific_data.check_name: str(e.event_specific_data.metadata["problem"].value)
            for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.event_specific_data.passed}  # fmt: skip


def test_a_corrupted_stored_table_fails_its_check_and_stops_the_round(tmp_path):
    """A committed round's table is never regenerated: re-running its partition reuses the record, whose
    blocking check fails and stops everything downstream."""
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.register_experiment("blocked", from_dict({**TINY, "name": "blocked"}).to_dict())
    with dg.instance_for_test() as instance:
        assert _round(tmp_path, instance, "blocked", 1).success and sorted(
            round_commits(store, "blocked")
        ) == [1]
        checkpoint = store.artifact("blocked", 1, "checkpoint")
        steps = store.artifact("blocked", 1, "steps")
        table = read_parquet(steps.path)
        write_parquet_atomic(table.iloc[1:], steps.path)  # a valid Parquet file, one row short
        result = _round(tmp_path, instance, "blocked", 1)
        assert not result.success
        failed = _failed_checks(result)
        assert list(failed) == ["steps_stored_and_valid"] and "changed" in failed["steps_stored_and_valid"]
        assert store.artifact("blocked", 1, "checkpoint") == checkpoint  # nothing trained again
        materialized = result.get_asset_materialization_events()
        assert dg.AssetKey("checkpoint") not in {e.asset_key for e in materialized}
        lines = failure_lines(result, debug=False)
        assert lines == [f"check steps_stored_and_valid on steps failed: {failed['steps_stored_and_valid']}"]


def test_a_corrupted_table_of_an_unfinished_round_is_set_aside_and_regenerated(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.register_experiment("aside", from_dict({**TINY, "name": "aside"}).to_dict())
    with dg.instance_for_test() as instance:
        assert _round(tmp_path, instance, "aside", 1, BEFORE_TRAINING).success
        steps = store.artifact("aside", 1, "steps")
        write_parquet_atomic(read_parquet(steps.path).iloc[1:], steps.path)
        assert _round(tmp_path, instance, "aside", 1).success
        assert store.artifact("aside", 1, "steps").content_hash == steps.content_hash  # the same bytes again
        (aside,) = Path(steps.path).parent.glob("steps.parquet.set-aside-*")  # the damaged file, kept
        assert len(read_parquet(aside)) == len(read_parquet(steps.path)) - 1
        assert sorted(round_commits(store, "aside")) == [1]


def test_a_changed_parent_checkpoint_stops_the_next_round_before_training(tmp_path):
    store = LineageStore(tmp_path / "lineage.duckdb")
    store.register_experiment("parent", from_dict({**TINY, "name": "parent"}).to_dict())
    with dg.instance_for_test() as instance:
        assert _round(tmp_path, instance, "parent", 1).success
        assert _round(tmp_path, instance, "parent", 2, BEFORE_TRAINING[:2]).success  # round 2's rollouts
        config = Path(store.artifact("parent", 1, "checkpoint").path) / "config.json"
        config.write_text(config.read_text() + " ")
        result = _round(tmp_path, instance, "parent", 2)
        assert not result.success
        assert store.artifact("parent", 2, "checkpoint") is None and sorted(
            round_commits(store, "parent")
        ) == [1]
        (line,) = failure_lines(result, debug=False)
        assert line.startswith("rollouts: ParentCheckpointError:") and "changed" in line
