"""The layers import one way: pipelines → assets → resources | schemas → creditline.

Checked on the source (AST), so a lazy import inside a function counts too.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "creditline": {
        "dagster",
        "dagster_webserver",
        "dagster_graphql",
        "dagster_pipes",
        "dagster_postgres",
        "mlflow",
        "pipelines",
        "assets",
        "resources",
        "schemas",
    },
    "schemas": {"dagster", "mlflow", "pipelines", "assets", "resources"},
    "resources": {"pipelines", "assets", "schemas"},
    "assets": {"pipelines"},
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_flow_one_way(layer):
    files = sorted((ROOT / layer).rglob("*.py"))
    assert files, f"no python files in {layer}/"
    offenders = {str(f.relative_to(ROOT)): sorted(imported_roots(f) & FORBIDDEN[layer]) for f in files}
    assert {f: bad for f, bad in offenders.items() if bad} == {}


def test_the_contract_checker_sees_violations(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import dagster\n    from mlflow import MlflowClient\n")
    assert imported_roots(bad) == {"dagster", "mlflow"}
