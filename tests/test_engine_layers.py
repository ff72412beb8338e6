"""The engine is layered like Pulsar, and each layer imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "txnadmin" / "engine"

LAYERS = [
    {"position", "ackset", "config", "writer_metrics", "snapshot_metrics", "pending_ack_metrics", "coordinator_metrics",
     "tb_client_metrics", "completion", "ops", "storage", "open_times"},
    {"managed_ledger", "cursor"},  # one layer: a cursor belongs to its managed ledger
    {"buffered_writer", "keyed_log", "aborted_txn_processor", "older_brokers"},  # positions only; older: 2.10 reads
    {"transaction_log", "pending_ack", "tb_snapshot", "preserver", "topic"},
    {"single_snapshot_processor", "segmented_snapshot_processor"},  # over tb_snapshot's service
    {"coordinator"},
    {"coordinator_service", "broker_metrics"},  # the broker's coordinator role (mixed into Engine), its /metrics
    {"engine"},
    {"stats", "manage", "observe", "workload", "faults"},
]
RANK = {module: rank for rank, group in enumerate(LAYERS) for module in group}


def _relative_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_engine_module_has_a_layer():
    modules = {p.stem for p in ENGINE.glob("*.py") if p.stem != "__init__"}
    assert modules <= set(RANK), f"give these a layer: {sorted(modules - set(RANK))}"


def test_imports_only_go_down():
    wrong = []
    for path in ENGINE.glob("*.py"):
        if path.stem == "__init__":
            continue
        for target in _relative_imports(path):
            same_group = RANK[target] == RANK[path.stem] and RANK[path.stem] == 1
            if RANK[target] >= RANK[path.stem] and not same_group:
                wrong.append(f"{path.stem} → {target}")
    assert not wrong, wrong


def test_the_cluster_room_sits_on_the_broker_layers_and_nothing_below_reaches_up_to_it():
    """engine/cluster/ (brokers, bundles, ownership) imports the engine's modules up to the broker (never the
    stats, workload or fault floors above it), and no engine module imports the cluster: the engine asks it through
    the ``host_of`` callback it is opened with."""
    ceiling = RANK["engine"]
    wrong = []
    for path in (ENGINE / "cluster").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module:
                target = node.module.split(".")[0]
                if RANK.get(target, len(LAYERS)) > ceiling:
                    wrong.append(f"cluster/{path.stem} → {target}")
    for path in ENGINE.glob("*.py"):
        if "cluster" in _relative_imports(path):
            wrong.append(f"{path.stem} → cluster")
    assert not wrong, wrong
