"""The downgrade package is a stack of proof rules: each module imports only the modules below it (lazy imports too).

The same rule as test_package_layers.py, one package down. To add a module: give it its place in ORDER.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

from test_package_layers import _graph, _our_graph

DOWNGRADE = "txnadmin.procedures.downgrade"
# Lowest first; ``__init__`` (the package itself) sits above them all and re-exports the public surface.
ORDER = ["report", "checklist", "watch", "target", "logs", "evidence", "reopen", "recording", "poll", "guard",
         "waiting", "verification", "rolling"]


def _place(module: str) -> int:
    """A module's place in ORDER; the package itself comes after every module."""
    return len(ORDER) if module == DOWNGRADE else ORDER.index(module.removeprefix(DOWNGRADE + "."))


def _upward(graph: dict[str, set[str]]) -> list[str]:
    ours = {m: {t for t in targets if t == DOWNGRADE or t.startswith(DOWNGRADE + ".")}
            for m, targets in graph.items() if m.startswith(DOWNGRADE + ".")}
    return sorted(f"{m} → {t}" for m, targets in ours.items() for t in targets if _place(t) >= _place(m))


def test_every_module_of_the_package_has_a_place():
    modules = {m.removeprefix(DOWNGRADE + ".") for m in _our_graph() if m.startswith(DOWNGRADE + ".")}
    assert modules == set(ORDER), f"place these: {sorted(modules - set(ORDER))}; gone: {sorted(set(ORDER) - modules)}"


def test_each_module_imports_only_the_modules_below_it():
    assert not _upward(_our_graph())


def test_the_checker_finds_what_it_must_refuse(tmp_path):
    """Show that an upward import is found, a lazy one and one of the package itself included."""
    pkg = tmp_path / "txnadmin"
    down = pkg / "procedures" / "downgrade"
    down.mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "procedures" / "__init__.py"):
        init.write_text("")
    (down / "__init__.py").write_text("from .verification import verify\n")
    (down / "report.py").write_text("def f():\n    from .target import g\n")  # lazy, upward
    (down / "target.py").write_text("from .report import f\n")  # downward: allowed
    (down / "verification.py").write_text("from . import Waiting\nfrom .report import f\n")  # the package: upward
    assert _upward(_graph(pkg)) == [f"{DOWNGRADE}.report → {DOWNGRADE}.target",
                                    f"{DOWNGRADE}.verification → {DOWNGRADE}"]


def test_every_public_name_is_what_its_home_defines():
    """Each name of ``__all__`` is the object of its module (never a module that shares its name: ``wait``)."""
    import txnadmin.procedures.downgrade as downgrade

    for name in downgrade.__all__:
        value = getattr(downgrade, name)
        assert not inspect.ismodule(value), name
        assert value is getattr(sys.modules[f"{DOWNGRADE}.{downgrade._HOMES[name]}"], name), name


def test_the_cli_starts_without_the_admin_layer():
    """The CLI reads the checklist's constants at start-up; the rest of the package is imported when a command runs."""
    code = ("import sys, txnadmin.cli.main; print(sorted(m for m in sys.modules if m.startswith('txnadmin.admin') "
            f"or m.startswith('{DOWNGRADE}.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([f"{DOWNGRADE}.checklist", f"{DOWNGRADE}.report"])
