"""The round's MLflow run when its first stage records it in its own records session (`unrecorded`): a run
left unrecorded by a killed process is found again by its tag, and the run recorded first wins, reopened."""

from __future__ import annotations

import pytest

import resources.tracker as tracker_module
from creditline.config import from_dict
from creditline.store.rounds import record_tracking_run, tracking_run_id
from resources import LineageResource, TrackerResource


@pytest.fixture
def experiment(tmp_path):
    lineage = LineageResource(data_root=str(tmp_path))
    config = from_dict({"name": "delta"}).to_dict()
    lineage.store().register_experiment("delta", config)
    return lineage.store(), TrackerResource(data_root=str(tmp_path)), config


def _new_process(monkeypatch) -> None:
    """What a process that did not create the runs knows of them: nothing."""
    for cache in ("_RUN_IDS", "_EXPERIMENT_OF", "_LOGGED"):
        monkeypatch.setattr(tracker_module, cache, {})
    monkeypatch.setattr(tracker_module, "_CHECKED", set())


def test_a_run_left_unrecorded_is_found_by_its_tag_and_recorded_once(experiment, monkeypatch):
    store, tracker, config = experiment
    unrecorded: list[str] = []
    created = tracker.round_run(store, "delta", 1, config, unrecorded)
    assert unrecorded == [created] and tracking_run_id(store, "delta", 1) is None  # killed here, say
    _new_process(monkeypatch)
    assert tracker.round_run(store, "delta", 1, config) == created
    assert tracking_run_id(store, "delta", 1) == created
    client = tracker.client()
    tagged = client.search_runs(
        [client.get_experiment_by_name("delta").experiment_id],
        filter_string=f"tags.`{tracker_module.ROUND_TAG}` = '1'",
    )
    assert [run.info.run_id for run in tagged] == [created]


def test_the_run_recorded_first_is_the_rounds_reopened_and_the_other_closed(experiment):
    """Another process recorded its own run while this one's stage computed, and closed it FAILED since (its
    stage failed): this stage logs to that run, reopened, and closes its own."""
    store, tracker, config = experiment
    unrecorded: list[str] = []
    mine = tracker.round_run(store, "delta", 1, config, unrecorded)
    client = tracker.client()
    theirs = client.create_run(client.get_experiment_by_name("delta").experiment_id).info.run_id
    record_tracking_run(store, "delta", 1, theirs)
    client.set_terminated(theirs, "FAILED")
    recorded = tracker.record_round_run(store, "delta", 1, mine)
    assert recorded == theirs and tracking_run_id(store, "delta", 1) == theirs
    assert tracker.settle_round_run(store, "delta", 1, config, mine, recorded) == theirs
    assert tracker.status(theirs) == "RUNNING" and tracker.status(mine) == "KILLED"
    assert tracker.round_run(store, "delta", 1, config) == theirs


def test_a_run_recorded_in_records_that_were_rolled_back_is_recorded_by_the_next_attempt(experiment):
    """The stage's records (the round's run among them) are one transaction: when it rolls back, this process
    must not take the run for recorded; the next attempt of the stage records it."""
    store, tracker, config = experiment
    unrecorded: list[str] = []
    created = tracker.round_run(store, "delta", 1, config, unrecorded)
    with pytest.raises(RuntimeError), store.session(atomic=True):
        assert tracker.record_round_run(store, "delta", 1, created) == created
        raise RuntimeError("a later record failed")
    assert tracking_run_id(store, "delta", 1) is None
    again: list[str] = []
    assert tracker.round_run(store, "delta", 1, config, again) == created and again == [created]
    with store.session(atomic=True):
        recorded = tracker.record_round_run(store, "delta", 1, created)
    assert tracker.settle_round_run(store, "delta", 1, config, created, recorded) == created
    assert tracking_run_id(store, "delta", 1) == created
