"""The facts that need a broker's answer have one rule each, in ClusterView (admin/cluster.py), and one reader of
Prometheus text (metrics/exposition.py): no other module walks namespaces, parses an exposition, or asks a broker
for its list, configuration, metrics or version on its own (issue 25). Copies of these rules drifted before: three
namespace walks, three exposition parsers, and a doctor that judged one broker's version for the whole cluster.

An AST scan of txnadmin/, as test_package_layers.py does for imports. Exempt are the modules that implement these
admin calls (a class defining the method: the protocol, HttpAdmin, LocalAdmin, ClusterView itself), the server,
which serves them on Pulsar's paths, and the two homes of the rules.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "txnadmin"

WALK = {"list_tenants", "list_namespaces", "list_topics"}  # the namespace walk: ClusterView.namespaces()/topics()
BROKER = {"active_brokers", "broker_runtime_config", "broker_metrics_text", "broker_version", "broker_versions"}
PARSER_MODULE = "prometheus_client.parser"
PARSER_NAME = "text_string_to_metric_families"
VIEW_HOME = "admin/cluster.py"
EXPOSITION_HOME = "metrics/exposition.py"


def _defined_methods(tree: ast.AST) -> set[str]:
    return {item.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _receiver(node: ast.expr) -> str:
    """The last name of what an attribute is read on: ``view`` for ``session.view.x``, ``admin`` for ``admin.x``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def violations(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("server/") or "/pb/" in f"/{rel}":
            continue  # the server serves the admin calls on Pulsar's paths; pb is generated code
        tree = ast.parse(path.read_text())
        implemented = _defined_methods(tree)
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr not in implemented:
                if node.attr in WALK and rel != VIEW_HOME:
                    found.append(f"{where} walks namespaces ({node.attr}): use ClusterView.namespaces()/topics()")
                elif node.attr in BROKER and rel != VIEW_HOME and not _receiver(node.value).endswith("view"):
                    found.append(f"{where} asks a broker itself ({node.attr}): use ClusterView's {node.attr}")
            elif rel != EXPOSITION_HOME and isinstance(node, (ast.Import, ast.ImportFrom)):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                names = {alias.name for alias in node.names}
                if module == PARSER_MODULE or PARSER_MODULE in names or PARSER_NAME in names:
                    found.append(f"{where} parses Prometheus text itself: use metrics.exposition.parse_exposition")
    return found


def test_only_cluster_view_walks_namespaces_asks_brokers_and_only_exposition_parses_metrics():
    assert not violations(), "\n".join(violations())


def test_the_scan_finds_what_it_must_refuse(tmp_path):
    """It passes on an empty tree too: show that each kind of copy is found, and what is allowed is not."""
    pkg = tmp_path / "txnadmin"
    for sub in ("procedures", "admin", "metrics", "server"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "procedures" / "copy.py").write_text(
        "def f(admin, view, session):\n"
        "    tenants = admin.list_tenants()\n"  # a walk of its own
        "    fn = admin.list_topics\n"  # passed as a callable: still a walk
        "    admin.broker_version('b:8080')\n"  # a broker asked without the view
        "    session.view.active_brokers()\n"  # through a view: allowed
        "    view.broker_versions()\n"  # allowed
        "    from prometheus_client.parser import text_string_to_metric_families\n")
    (pkg / "admin" / "impl.py").write_text(
        "class Impl:\n    def list_topics(self, ns):\n        return self.list_topics(ns)\n"
        "    def broker_version(self, b):\n        return self.broker_version(b)\n")
    (pkg / "admin" / "cluster.py").write_text("def f(self):\n    return self.admin.list_tenants()\n")
    (pkg / "metrics" / "exposition.py").write_text("from prometheus_client.parser import text_string_to_metric_families\n")
    (pkg / "metrics" / "other.py").write_text("import prometheus_client.parser\n")
    (pkg / "server" / "app.py").write_text("def route(admin):\n    return admin.list_tenants()\n")
    found = violations(pkg)
    assert sorted(line.split(" ", 1)[0] for line in found) == [
        "metrics/other.py:1", "procedures/copy.py:2", "procedures/copy.py:3", "procedures/copy.py:4",
        "procedures/copy.py:7"], found
