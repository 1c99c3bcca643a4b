"""Code versions come from the static import closure of an asset's module: deep edits count, others do not."""

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

from assets.code_version import code_version, import_closure

TOY = {
    # an asset-like module outside the package: parsed for imports, not hashed itself
    "toyasset.py": "import json\nfrom toypkg.evaluation import evaluate\nfrom toypkg import plots\n",
    "toypkg/__init__.py": "",
    "toypkg/evaluation.py": "from toypkg.config import Config\n\ndef evaluate():\n    from toypkg import lazy\n",
    "toypkg/config.py": (
        "from typing import TYPE_CHECKING\n\nfrom toypkg.envs import make_env\n\n"
        "if TYPE_CHECKING:\n    from toypkg import typing_only\n"
    ),
    "toypkg/envs/__init__.py": "from .maze import MazeEnv\n\ndef make_env():\n    return MazeEnv()\n",
    "toypkg/envs/maze.py": "from . import base\nfrom ..grid import Grid\n\nclass MazeEnv:\n    size = 5\n",
    "toypkg/envs/base.py": "class Environment: ...\n",
    "toypkg/grid.py": "class Grid: ...\n",
    "toypkg/plots.py": "def plot(): ...\n",
    "toypkg/lazy.py": "X = 1\n",
    "toypkg/typing_only.py": "class Hint: ...\n",
    "toypkg/unrelated.py": "from toypkg.grid import Grid\n",
}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    for name, source in TOY.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def toy_version():
    importlib.invalidate_caches()
    return code_version("toyasset", package="toypkg")


def test_the_closure_follows_absolute_relative_lazy_and_parent_package_imports(toy):
    closure = import_closure(["toyasset"], package="toypkg")
    assert set(closure) == {
        "toypkg",
        "toypkg.evaluation",
        "toypkg.config",
        "toypkg.envs",  # the parent package that `toypkg.envs.maze` runs
        "toypkg.envs.maze",
        "toypkg.envs.base",  # `from . import base`
        "toypkg.grid",  # `from ..grid import Grid`
        "toypkg.plots",  # `from toypkg import plots`: a submodule, not an attribute
        "toypkg.lazy",  # imported inside a function
    }
    assert closure["toypkg.envs.maze"] == toy / "toypkg/envs/maze.py"


@pytest.mark.parametrize(
    "module", ["toypkg/envs/maze.py", "toypkg/grid.py", "toypkg/lazy.py", "toypkg/__init__.py"]
)
def test_editing_a_module_in_the_closure_changes_the_version(toy, module):
    before = toy_version()
    (toy / module).write_text((toy / module).read_text() + "# edited\n")
    assert toy_version() != before


@pytest.mark.parametrize("module", ["toypkg/unrelated.py", "toypkg/typing_only.py"])
def test_editing_a_module_outside_the_closure_keeps_the_version(toy, module):
    before = toy_version()
    (toy / module).write_text((toy / module).read_text() + "# edited\n")
    assert toy_version() == before


def test_a_package_module_given_directly_is_hashed_with_its_parents(toy):
    assert set(import_closure(["toypkg.envs.base"], package="toypkg")) == {"toypkg", "toypkg.envs", "toypkg.envs.base",
                                                                          "toypkg.envs.maze", "toypkg.grid"}  # fmt: skip


def test_the_evaluation_asset_runs_the_environments_through_the_config():
    closure = import_closure(["assets.evaluation"])
    assert {
        "creditline.rollout.evaluation",
        "creditline.policy.models",
        "creditline.config",
        "creditline.envs.maze",
    } <= set(closure)
    assert closure["creditline.envs.maze"] == Path(importlib.import_module("creditline.envs.maze").__file__)


def test_every_asset_module_versions_its_own_closure():
    import assets

    modules = [importlib.import_module(m.name) for m in pkgutil.iter_modules(assets.__path__, "assets.")]
    versioned = [m for m in modules if hasattr(m, "VERSION")]
    assert {"assets.evaluation", "assets.rescore", "assets.rollouts"} <= {m.__name__ for m in versioned}
    for module in versioned:
        assert module.VERSION == code_version(module.__name__), module.__name__


def test_a_rubric_edit_marks_the_scores_stale_and_the_store_does_not_carry_the_rubrics():
    # creditline.store records rubric versions without importing creditline.credit.rubrics at run time, so
    # every asset that only reads or writes the store keeps its version when a rubric is edited
    assert "creditline.credit.rubrics" not in import_closure(["creditline.store"])
    assert "creditline.credit.rubrics" in import_closure(["assets.scores"])
    assert "creditline.credit.rubrics" in import_closure(["assets.rescore"])


def test_an_unknown_module_is_one_clear_error():
    with pytest.raises(ValueError, match="no source file found for module 'creditline.nope'"):
        code_version("creditline.nope")


EVERY_BLOCK = """
import a0
def f():
    import a1
async def g():
    async with x:
        import a2
    async for y in z:
        import a3
class C:
    import a4
    def m(self):
        try:
            import a5
        except ImportError:
            import a6
        else:
            import a7
        finally:
            import a8
for i in r:
    pass
else:
    import a9
while w:
    with v:
        import a10
match k:
    case 1:
        import a11
try:
    pass
except* ValueError:
    import a12
if TYPE_CHECKING:
    import hidden
else:
    import a13
"""


def _every_node_walk(tree):
    """The reference: the imports among all nodes `ast.walk` visits (expressions too), but those under an
    `if TYPE_CHECKING:` body."""
    from assets.code_version import _is_type_checking

    hidden = {id(node) for test in ast.walk(tree) if isinstance(test, ast.If) and _is_type_checking(test.test)
              for statement in test.body for node in ast.walk(statement)}  # fmt: skip
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in hidden]


def test_the_statement_walk_finds_what_a_walk_of_every_node_finds():
    """Imports are statements, so walking statement blocks only finds them all: in every kind of block, and in
    every source file of the project."""
    from assets.code_version import _runtime_imports

    def names(tree):
        return sorted(alias.name for node in _runtime_imports(tree) for alias in node.names)

    assert names(ast.parse(EVERY_BLOCK)) == sorted(f"a{i}" for i in range(14))
    root = Path(__file__).resolve().parents[2]
    files = [p for folder in ("creditline", "assets", "pipelines", "resources", "schemas")
             for p in (root / folder).rglob("*.py")]  # fmt: skip
    assert len(files) > 100
    for path in files:
        tree = ast.parse(path.read_bytes())
        found = {(n.lineno, n.col_offset) for n in _runtime_imports(tree)}
        assert found == {(n.lineno, n.col_offset) for n in _every_node_walk(tree)}, path
