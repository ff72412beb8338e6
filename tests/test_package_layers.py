"""txnadmin's packages are layered, and each imports only the layers below it (lazy imports inside functions too).

The engine's own modules have their layers in test_engine_layers.py; this is the same rule one level up:

    cli → procedures, server → admin → engine, scan → metrics → codec → names, _fs

``engine`` and ``scan`` sit side by side and never import each other (the scan reads what any bookie wrote; it must
not lean on the engine that wrote these dumps). ``names`` is Pulsar's naming and imports nothing of ours. And no
two modules import each other, directly or round a longer loop.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "txnadmin"

LAYERS = [
    {"names", "_fs", "durations", "__init__"},  # __init__: the package's own metadata (its version), nothing imported
    {"codec"},
    {"metrics"},
    {"engine", "scan"},  # side by side: neither imports the other
    {"admin"},
    {"procedures", "server"},
    {"cli"},
    {"__main__"},  # `python -m txnadmin`: runs the CLI
]
RANK = {unit: rank for rank, group in enumerate(LAYERS) for unit in group}


def _modules(package: Path) -> dict[str, Path]:
    """Dotted name → file, for every module of ours."""
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that ``name`` imports anywhere in its text, lazy imports inside functions included.

    ``from p import m`` counts the module ``p.m`` when there is one, else ``p`` (a name ``p`` defines or re-exports).
    Imports under ``if TYPE_CHECKING:`` never run: they name a type for the checker and are left out.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                   for stmt in block.body for n in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target.split(".")[0] == "txnadmin":
                found.add(target)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = _modules(package)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


@functools.cache  # the four checks below read the same graph of txnadmin: parse it once
def _our_graph() -> dict[str, set[str]]:
    return _graph()


def _unit(module: str) -> str:
    """The layer unit of a module: its top-level package, or the module itself (``names``, ``_fs``, ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} → {t}" for m, targets in graph.items() for t in targets
                  if _unit(t) != _unit(m) and RANK[_unit(t)] >= RANK[_unit(m)])


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    cycles = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(" → ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_every_package_and_module_has_a_layer():
    units = {_unit(m) for m in _our_graph()}
    assert units <= set(RANK), f"give these a layer: {sorted(units - set(RANK))}"


def test_imports_only_go_down():
    assert not _upward(_our_graph())


def test_names_imports_nothing_of_ours():
    assert _our_graph()["txnadmin.names"] == set()


def test_no_import_cycles():
    assert not _cycles(_our_graph())


def test_the_checker_finds_what_it_must_refuse(tmp_path):
    """The rules pass on an empty graph too: show that an upward import (a lazy one) and a cycle are found."""
    pkg = tmp_path / "txnadmin"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "admin").mkdir()
    for init in (pkg / "__init__.py", pkg / "engine" / "__init__.py", pkg / "admin" / "__init__.py"):
        init.write_text("")
    (pkg / "engine" / "a.py").write_text("def f():\n    from ..admin import b\n")
    (pkg / "admin" / "b.py").write_text("from typing import TYPE_CHECKING\nfrom ..engine.a import f\n"
                                        "if TYPE_CHECKING:\n    from ..names import x\n")
    (pkg / "names.py").write_text("")
    graph = _graph(pkg)
    assert graph["txnadmin.engine.a"] == {"txnadmin.admin.b"} and graph["txnadmin.admin.b"] == {"txnadmin.engine.a"}
    assert _upward(graph) == ["txnadmin.engine.a → txnadmin.admin.b"]
    assert _cycles(graph) == ["txnadmin.admin.b → txnadmin.engine.a → txnadmin.admin.b"]
