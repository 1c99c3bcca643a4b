"""The layers import one way: pipelines → assets → resources | schemas → creditline; inside the core, the
estimators, the store and the environments import only what their contracts name (`PACKAGES`).

Checked on the source (AST), so a lazy import inside a function counts too.
"""

import ast
import sys
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


# Inside the core, what each package may import besides the standard library: its third-party packages and
# the creditline modules it builds on (a lazy import inside a function counts). The estimators stay pure
# numpy/pandas (no torch: `creditline advantages` starts in a fraction of a second and they run anywhere); the
# store never imports a model library; the environments import nothing but themselves (and the
# plugin loader, `creditline.plugins`).
PACKAGES = {
    "creditline/credit/advantages": (
        {"numpy", "pandas", "pyarrow"},
        {
            "creditline.credit.advantages",
            "creditline.errors",
            "creditline.ids",
            "creditline.config.param_kinds",
        },
    ),
    "creditline/store": (
        {"duckdb", "duckdb_extension_postgres_scanner", "fsspec", "pandas", "pyarrow"},
        {
            "creditline.store",
            "creditline.config.deployment",
            "creditline.errors",
            "creditline.faults",
            "creditline.ids",
            "creditline.liveness",
            "creditline.credit.rubrics",
        },
    ),  # fmt: skip
    "creditline/envs": (set(), {"creditline.envs", "creditline.plugins"}),
}


def imported_modules(path: Path) -> set[str]:
    """Absolute module names `path` imports (relative imports are inside its own package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def outside_contract(module: str, third_party: set[str], core: set[str]) -> bool:
    root = module.split(".")[0]
    if root == "creditline":
        return not any(module == allowed or module.startswith(allowed + ".") for allowed in core)
    return root not in sys.stdlib_module_names and root != "__future__" and root not in third_party


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_each_core_package_imports_only_what_its_contract_names(package):
    third_party, core = PACKAGES[package]
    offenders = {
        str(f.relative_to(ROOT)): sorted(
            m for m in imported_modules(f) if outside_contract(m, third_party, core)
        )
        for f in sorted((ROOT / package).rglob("*.py"))
    }
    assert {f: bad for f, bad in offenders.items() if bad} == {}


def test_the_package_contract_sees_a_model_library_in_the_estimators():
    third_party, core = PACKAGES["creditline/credit/advantages"]
    assert outside_contract("torch.nn", third_party, core)
    assert outside_contract("creditline.policy.models", third_party, core)
    assert not outside_contract("creditline.credit.advantages.table", third_party, core)
    assert not outside_contract("collections.abc", third_party, core)


# The stage packages: what each must never import (other stages' packages and the store), so a stage's code
# is read, tested and reused on its own (a lazy import inside a function counts).
STAGE_FORBIDDEN = {
    "creditline/rollout": {"creditline.store", "creditline.train", "creditline.credit", "creditline.interop",
                           "creditline.serve"},
    "creditline/train": {"creditline.store", "creditline.credit", "creditline.interop", "creditline.serve"},
    "creditline/credit": {"creditline.store", "creditline.interop", "creditline.serve"},
    "creditline/serve": {"creditline.store", "creditline.train", "creditline.credit", "creditline.interop"},
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(STAGE_FORBIDDEN))
def test_a_stage_package_imports_no_other_stage_it_must_not(package):
    def forbidden(module: str) -> bool:
        return any(module == bad or module.startswith(bad + ".") for bad in STAGE_FORBIDDEN[package])

    offenders = {
        str(f.relative_to(ROOT)): sorted(m for m in imported_modules(f) if forbidden(m))
        for f in sorted((ROOT / package).rglob("*.py"))
    }
    assert {f: bad for f, bad in offenders.items() if bad} == {}
