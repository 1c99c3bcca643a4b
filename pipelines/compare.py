"""`creditline compare`: estimators × seeds on one experiment config, as Dagster runs; a table and a picture.

Each (estimator, seed) is an experiment of its own, `<name>-<estimator>-s<seed>`: the config with that
estimator and that seed (the estimator's default parameters; the config's own estimator keeps its
parameters), registered and run round by round as `creditline run` runs an experiment, each round a Dagster
run of the `round` job tagged `creditline/comparison=<name>`, with its full lineage. Registered, the members
are the round sensor's too: the sweep shows in the UI (Runs, filtered by the tag), and a member left
unfinished is completed by the sensor, a backfill of its rounds, or `compare` again (committed rounds are
never run twice). Every member plays the same tasks per round and samples per task, so the rollout budget is
equal; what each used (episodes, sampled tokens, continuations of a branching estimator included) is counted
from its stored tables and shown beside its success.

Then, in `<data_root>/comparisons/<name>/`:

    table.md     per estimator: final held-out success and mean success over the rounds (the area under
                 the learning curve), each ± 95 % CI over seeds; rounds to +0.30; budget
    curves.png   held-out success by round, mean and 95 % CI band per estimator
    runs.json    the per-run results both are made from (`creditline.comparison`)

and an MLflow experiment `compare-<name>`: a run per member (its curve at step = round, its budget) and one
holding the table and the picture, so that MLflow's run comparison covers the sweep.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from creditline.comparison import plot, table
from creditline.config import AdvantageSettings, ExperimentConfig
from creditline.errors import CreditlineError
from creditline.store import LineageStore, read_parquet, write_bytes_atomic
from creditline.store.rounds import round_commits

COMPARISON_TAG = "creditline/comparison"
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


class CompareError(CreditlineError, ValueError):
    """A comparison asked for something its config cannot give (an unknown estimator, a bad name)."""


def member_configs(
    config: ExperimentConfig, name: str, estimators: list[str], seeds: int, rounds: int
) -> dict[tuple[str, int], ExperimentConfig]:
    """(estimator, seed) → the member experiment's config (`config` with that estimator and seed)."""
    from creditline.credit.advantages import available

    if not NAME.fullmatch(name):
        raise CompareError(f"--name {name!r}: lower-case letters, digits, '-' and '_', at most 63")
    unknown = [e for e in estimators if e not in available()]
    if unknown or not estimators:
        raise CompareError(
            f"--estimators {','.join(estimators)}: {', '.join(unknown) or 'none given'} not among the "
            f"registered estimators ({', '.join(available())})"
        )
    if not 1 <= seeds <= 64:
        raise CompareError(f"--seeds {seeds}: between 1 and 64")
    members = {}
    for estimator in dict.fromkeys(estimators):
        settings = (
            config.advantages
            if estimator == config.advantages.estimator
            else AdvantageSettings(estimator, {})
        )
        for seed in range(seeds):
            member = f"{name}-{estimator}-s{seed}".replace("_", "-")
            members[(estimator, seed)] = replace(
                config, name=member, seed=seed, rounds=rounds, advantages=settings
            )
    return members


def member_result(store: LineageStore, config: ExperimentConfig, seconds: float) -> dict:
    """What one finished member shows in the table: held-out success from round 0 on, and its budget."""
    evaluations = {e.round: e.success_rate for e in store.evaluations(config.name)}
    episodes = tokens = 0
    for record in store.artifacts(config.name, kind="steps"):
        if record.variant == "":
            steps = read_parquet(record.path)
            tokens += int(steps["completion_ids"].map(len).sum())
            episodes += int(steps["episode_id"].nunique())
    return {
        "success": [evaluations[r] for r in range(config.rounds + 1)],
        "seconds": seconds,
        "episodes": episodes,
        "tokens": tokens,
    }


def round_seconds(instance, store: LineageStore, experiment: str) -> float:
    """Wall time of the experiment's committed rounds: each commit's Dagster run, start to end."""
    total = 0.0
    for commit in round_commits(store, experiment).values():
        record = instance.get_run_record_by_id(commit.dagster_run_id)
        if record is not None and record.start_time and record.end_time:
            total += record.end_time - record.start_time
    return total


def write_results(data_root: str, name: str, members, results, estimators: list[str]) -> tuple[Path, str]:
    """The table, the picture and the per-run results under `comparisons/<name>/`, and the MLflow comparison;
    (the folder, the table's Markdown)."""
    folder = Path(data_root) / "comparisons" / name
    markdown = table(results)
    write_bytes_atomic(markdown.encode(), folder / "table.md")
    write_bytes_atomic(plot(results, estimators), folder / "curves.png")
    rows = [
        {"estimator": e, "seed": s, "experiment": members[(e, s)].name, **result}
        for (_, e, s), result in results.items()
    ]
    write_bytes_atomic(json.dumps(rows, indent=2).encode(), folder / "runs.json")
    log_comparison(data_root, name, members, results, folder)
    return folder, markdown


def log_comparison(data_root: str, name: str, members, results, folder: Path) -> None:
    """The sweep as an MLflow experiment `compare-<name>`: a run per member (held-out success at step = round,
    its budget), created once and reused, and a run with the table and the picture."""
    from resources import deployed_resources

    tracker = deployed_resources(data_root)["tracker"]
    client = tracker.client()
    experiment = f"compare-{name}"
    experiment_id = tracker.experiment_id(client, experiment)
    existing = {r.info.run_name: r.info.run_id for r in client.search_runs([experiment_id], max_results=1000)}
    for (estimator, seed), member in members.items():
        result = results[(name, estimator, seed)]
        run_name = member.name
        if run_name in existing:
            continue
        run_id = client.create_run(
            experiment_id,
            run_name=run_name,
            tags={"creditline.experiment": member.name, "estimator": estimator, "seed": str(seed)},
        ).info.run_id
        client.log_param(run_id, "estimator", estimator)
        client.log_param(run_id, "seed", seed)
        for round_, success in enumerate(result["success"]):
            client.log_metric(run_id, "heldout_success", success, step=round_)
        for key in ("episodes", "tokens", "seconds"):
            client.log_metric(run_id, key, float(result[key]))
        client.set_terminated(run_id, "FINISHED")
    title = f"{name}: table"
    summary = existing.get(title) or client.create_run(experiment_id, run_name=title).info.run_id
    client.log_artifact(summary, str(folder / "table.md"))
    client.log_artifact(summary, str(folder / "curves.png"))
    client.set_terminated(summary, "FINISHED")
