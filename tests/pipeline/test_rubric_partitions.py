"""Every rubric version ever scored stays a re-score partition: the store remembers it, the sync adds it."""

import dagster as dg
import pytest

from assets import RESCORE, round_key
from creditline.config import from_dict
from creditline.credit.rubric_registry import loadable_rubrics, rubric_by_version
from creditline.credit.rubrics import RUBRICS
from creditline.store import LineageStore, record_rubric_version, rubric_definition, rubric_versions
from pipelines.definitions import RESCORE_JOB, ROUND_JOB, make_definitions
from pipelines.rubric_partitions import sync_rubric_partitions

GONE = "env-0ld0ld00"  # a version scored in the past whose definition is no longer in code
CODE = sorted(r.version for r in loadable_rubrics().values())  # the built-ins and the plugins' (countdown's)
TINY = {"rollouts": {"tasks_per_round": 2, "group_size": 2}, "train": {"epochs": 1, "minibatches": 1},
        "eval": {"num_tasks": 2}}  # fmt: skip


@pytest.fixture
def store(tmp_path):
    return LineageStore(tmp_path / "lineage.duckdb")


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def rubric_keys(instance):
    return set(instance.get_dynamic_partitions("rubric_versions"))


def test_a_version_no_longer_in_code_and_the_code_versions_all_become_partitions(store, instance):
    assert record_rubric_version(store, GONE, "env", {"name": "env", "criteria": []})
    added = sync_rubric_partitions(instance, store)
    assert added == sorted([GONE, *CODE])
    assert rubric_keys(instance) == {GONE, *CODE}
    instance.add_dynamic_partitions("rounds", [round_key("exp", 1)])
    keys = {
        k.keys_by_dimension["rubric"] for k in RESCORE.get_partition_keys(dynamic_partitions_store=instance)
    }
    assert keys == {GONE, *CODE}


def test_syncing_twice_adds_nothing_the_second_time(store, instance):
    assert sync_rubric_partitions(instance, store) == CODE
    assert sync_rubric_partitions(instance, store) == []
    assert sorted(instance.get_dynamic_partitions("rubric_versions")) == CODE


def test_the_sync_records_the_code_versions_with_their_definitions(store, instance):
    sync_rubric_partitions(instance, store)
    recorded = {r.version: r for r in rubric_versions(store)}
    assert sorted(recorded) == CODE
    for name, rubric in loadable_rubrics().items():
        assert recorded[rubric.version].rubric == rubric.name
        assert recorded[rubric.version].source == name
        assert recorded[rubric.version].definition == rubric_definition(rubric)
    for rubric in RUBRICS.values():
        assert "def env_reward" in recorded[rubric.version].definition["criteria"][0]["source"]


def test_recording_a_version_again_keeps_its_first_sighting(store):
    assert record_rubric_version(store, GONE, "env", {"name": "env", "criteria": []})
    (first,) = rubric_versions(store)
    assert not record_rubric_version(store, GONE, "env-renamed", {"other": 1})
    assert rubric_versions(store) == [first]


def test_a_version_no_longer_in_code_is_one_clear_error():
    with pytest.raises(ValueError, match=f"rubric version {GONE} was scored before but is no longer defined in code "
                                         r"\(creditline/credit/rubrics.py, a registered plugin, or the import path "
                                         r"it was recorded with\); its stored partitions stay readable"):  # fmt: skip
        rubric_by_version(GONE)


def test_re_scoring_a_version_no_longer_in_code_fails_with_that_line(tmp_path, store, instance):
    record_rubric_version(store, GONE, "env", {"name": "env", "criteria": []})
    sync_rubric_partitions(instance, store)
    instance.add_dynamic_partitions("rounds", [round_key("exp", 1)])
    job = make_definitions(str(tmp_path)).resolve_job_def(RESCORE_JOB)
    key = dg.MultiPartitionKey({"round": round_key("exp", 1), "rubric": GONE})
    result = job.execute_in_process(instance=instance, partition_key=key, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "rescored_scores"
    error = failure.event_specific_data.error
    messages = []
    while error is not None:
        messages.append(error.message)
        error = error.cause
    assert any(m.startswith(f"ValueError: rubric version {GONE} was scored before") for m in messages), (
        messages
    )


def test_scores_and_rescored_scores_record_the_version_they_scored_with(tmp_path, store, instance):
    name, training, other = "rubric-sync", RUBRICS["env"].version, RUBRICS["env-efficient"].version
    store.register_experiment(name, from_dict({**TINY, "name": name}).to_dict())
    instance.add_dynamic_partitions("rounds", [round_key(name, 1)])
    defs = make_definitions(str(tmp_path))
    round_ = defs.resolve_job_def(ROUND_JOB).execute_in_process(
        instance=instance, partition_key=round_key(name, 1),
        asset_selection=[dg.AssetKey("episodes"), dg.AssetKey("steps"), dg.AssetKey("scores")],
    )  # fmt: skip
    assert round_.success
    assert [r.version for r in rubric_versions(store)] == [training]  # the round's scores, before any sync
    sync_rubric_partitions(instance, store)
    key = dg.MultiPartitionKey({"round": round_key(name, 1), "rubric": other})
    rescored = defs.resolve_job_def(RESCORE_JOB).execute_in_process(
        instance=instance, partition_key=key, asset_selection=[dg.AssetKey("rescored_scores")]
    )
    assert rescored.success
    assert store.artifact(name, 1, "rescore_scores", other).meta["rubric_version"] == other
    assert {r.version for r in rubric_versions(store)} == set(CODE)
