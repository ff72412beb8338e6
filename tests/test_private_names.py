"""A module's private names stay in it: other modules use public methods and functions (issue #18, item 5).

Two checks over the package's source: no ``from txnadmin.x import _name`` of anything but a private module,
and no ``self.thing._name`` unless this module itself defines ``_name`` (a helper reaching into its own
module's object is fine; reaching into another module's object is what the public method is for).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "txnadmin"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "pb" not in path.relative_to(PACKAGE).parts[:-1]:  # generated protobuf code
            yield path, ast.parse(path.read_text())


def _resolve(path: Path, node: ast.ImportFrom) -> Path | None:
    """The package directory or module file a relative or txnadmin import names (None: outside txnadmin)."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
    elif node.module and node.module.split(".")[0] == "txnadmin":
        base = PACKAGE.parent
    else:
        return None
    for part in (node.module or "").split("."):
        if part:
            base = base / part
    return base


def _is_module(target: Path, name: str) -> bool:
    return (target / f"{name}.py").is_file() or (target / name / "__init__.py").is_file()


def test_no_private_name_is_imported_from_another_module():
    wrong = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(path, node)
            if target is None:
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not name.startswith("__") and not _is_module(target, name):
                    wrong.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {name} from {node.module}")
    assert not wrong, wrong


def _defined_privates(tree: ast.AST) -> set[str]:
    """Private names this module defines: functions, classes, module names and attributes it sets on ``self``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {n for n in names if n.startswith("_")}


def test_no_module_reaches_into_another_modules_objects():
    wrong = []
    for path, tree in _modules():
        own = _defined_privates(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            inner = node.value  # self.<thing>._private
            if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "self" \
                    and node.attr not in own:
                wrong.append(f"{path.relative_to(PACKAGE)}:{node.lineno} uses self.{inner.attr}.{node.attr}")
    assert not wrong, wrong


def test_the_checks_see_what_they_are_meant_to(tmp_path):
    """The two rules catch the cases this issue fixed (so they cannot pass by looking at nothing)."""
    owner = ast.parse("class C:\n    def f(self):\n        self._max_local_txn_id = 1\n")
    assert "_max_local_txn_id" in _defined_privates(owner)
    reach = ast.parse("class C:\n    def f(self):\n        self.log._max_local_txn_id = 1\n")
    assert "_max_local_txn_id" not in _defined_privates(reach)  # writing another object's private defines nothing
    assert "_persist_cursor" not in _defined_privates(ast.parse("self.ledger._persist_cursor(self)\n"))
    assert _is_module(PACKAGE, "_fs") and not _is_module(PACKAGE / "engine", "_render")
