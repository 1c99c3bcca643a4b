"""The pages a user opens after `make run`, in a real browser (headless Chromium): the Dagster asset pages of a
round (`make ui`) and the experiment's MLflow run (`make mlflow`), as rendered by their own JavaScript.

`chromium --dump-dom` loads a page, lets its scripts run for a virtual time budget and prints the document;
the assertions read its text, as a person reads the page. With `CREDITLINE_SCREENSHOTS=DIR` the test also
saves the pages as PNGs (how docs/img/ was made).
"""

import html
import os
import re
import subprocess
from pathlib import Path

import pytest

from creditline.store import LineageStore
from creditline.store.rounds import tracking_runs
from tests.e2e.cli import creditline
from tests.servers import chromium, dagster_webserver, mlflow_ui

pytestmark = pytest.mark.slow
TINY = Path(__file__).resolve().parents[1] / "tiny_experiment.toml"
EXPERIMENT = "ui-maze"
SCREENSHOTS = os.environ.get("CREDITLINE_SCREENSHOTS")


def browse(url: str, screenshot: str | None = None) -> str:
    """The page's visible text after its scripts ran (and, with `screenshot`, a PNG of it in SCREENSHOTS)."""
    flags = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--virtual-time-budget=20000", "--window-size=1440,1000"]  # fmt: skip
    if screenshot and SCREENSHOTS:
        subprocess.run([*flags, f"--screenshot={Path(SCREENSHOTS) / screenshot}", url], capture_output=True,
                       timeout=180, check=True)  # fmt: skip
    page = subprocess.run(
        [*flags, "--dump-dom", url], capture_output=True, text=True, timeout=180, check=True
    )
    body = re.sub(r"<(style|script)[^>]*>.*?</\1>", " ", page.stdout, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    data_root = tmp_path_factory.mktemp("ui")
    ran = creditline(data_root, "run", "--experiment", EXPERIMENT, "--config", str(TINY))
    assert ran.returncode == 0, ran.stderr
    return data_root


def test_the_dagster_pages_show_the_round_its_checks_and_its_mlflow_run(finished):
    with dagster_webserver(finished) as url:
        summary = browse(f"{url}/assets/round_summary?partition={EXPERIMENT}.r002", "dagster-round.png")
        checks = browse(f"{url}/assets/steps?view=checks")
    assert "Latest materialization" in summary and f"{EXPERIMENT}.r002" in summary  # the partition
    assert "evaluation/success_rate" in summary, summary
    # metadata rows read "key, timestamp, value"; the run's link opens MLflow's model-training view
    link = r"mlflow_run [\w ,:]+ http://127\.0\.0\.1:5000/#/experiments/\d+/runs/\w+\?workflowType=machine_learning"
    assert re.search(link, summary), summary
    assert "Checks (2)" in checks  # the blocking checks on the rollouts, both passed
    for check in ("parent_checkpoint_unchanged", "steps_stored_and_valid"):
        assert f"{check} {check} Succeeded" in checks
    assert "This is a blocking asset check." in checks


def test_the_mlflow_run_opens_in_the_training_view_with_the_curves_first(finished):
    store = LineageStore(finished / "lineage.duckdb")
    experiment_run = tracking_runs(store, EXPERIMENT)[0]
    with mlflow_ui(finished) as url:
        view = "workflowType=machine_learning"
        overview = browse(f"{url}/#/experiments/1/runs/{experiment_run}?{view}", "mlflow-experiment-run.png")
        charts = browse(f"{url}/#/experiments/1/runs/{experiment_run}/model-metrics?{view}")
        experiment = browse(f"{url}/#/experiments/1?{view}")
    assert "Traces 0" not in experiment and "3 matching runs" in experiment  # runs, not the GenAI overview
    metrics = overview[overview.index("Metrics (") :]
    listed = re.findall(r"(\w+/\w+) (-?[\d.e-]+)", metrics)
    assert [key for key, _ in listed[:2]] == ["evaluation/success_rate", "evaluation/mean_return"], listed[:5]
    assert "evaluation (4)" in charts  # the section of the success-rate and return charts
