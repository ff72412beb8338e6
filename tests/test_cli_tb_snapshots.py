"""Segmented transaction-buffer snapshots through the CLI, on the embedded engine and over a real server."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from serve_helpers import serving
from txnadmin.cli.main import app
from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine

TOPIC = "persistent://public/default/ledger"
runner = CliRunner()


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    base = tmp_path_factory.mktemp("tbseg")
    src = base / "seed"
    config = EngineConfig()
    config.transactionCoordinatorCount = 1
    config.transactionBufferSegmentedSnapshotEnabled = True
    config.transactionBufferSnapshotSegmentSize = 8 + len(TOPIC) + 3 * 3  # three ids per segment
    config.save(src)
    engine = Engine(src, EngineConfig.load(src), maintenance=False)
    # A subscription that reads nothing keeps the topic's ledgers: without one, a served engine's sweep may trim
    # them (as a broker trims a topic without cursors) and forget the aborts mid-test.
    engine.subscribe(TOPIC, "idle")
    aborted = []
    for _i in range(8):
        txn = engine.begin(60_000)
        engine.produce(txn, TOPIC, b"x")
        engine.abort(txn)
        aborted.append(txn)
    engine.close()
    shutil.copytree(src, base / "remote")
    with serving(base / "remote", base / "home") as (url, token):
        yield {"local": ["-u", f"local:{src}"], "http": ["-u", url, "--auth-params", f"token:{token}"],
               "aborted": aborted, "home": base / "home"}


def run_json(targets, backend, *args):
    result = runner.invoke(app, targets[backend] + ["transactions", *args, "-o", "json"],
                           env={"TXNADMIN_HOME": str(targets["home"])})
    assert result.exit_code == 0, (backend, result.output)
    return json.loads(result.stdout)


@pytest.mark.parametrize("backend", ["local", "http"])
def test_segment_stats_and_internal_stats(targets, backend):
    plain = run_json(targets, backend, "transaction-buffer-stats", "-t", TOPIC)
    assert plain["snapshotType"] == "Segment" and plain["totalAbortedTransactions"] == 8
    assert plain["segmentsStats"] == {"segmentsSize": 2, "currentSegmentCapacity": 3, "unsealedAbortTxnIDSize": 2,
                                      "lastTookSnapshotSegmentTimestamp": 0}
    detailed = run_json(targets, backend, "transaction-buffer-stats", "-t", TOPIC, "--segment-stats")
    last = targets["aborted"][2]
    assert detailed["segmentsStats"]["segmentStats"][0]["lastTxnID"] == f"({last[0]},{last[1]})"
    assert [s["persistentPosition"].count(":") for s in detailed["segmentsStats"]["segmentStats"]] == [1, 1]
    internal = run_json(targets, backend, "buffer-snapshot-internal-stats", "-t", TOPIC)
    assert list(internal) == ["snapshotType", "segmentInternalStats", "segmentIndexInternalStats"]
    assert internal["segmentInternalStats"]["managedLedgerName"].endswith("__transaction_buffer_snapshot_segments")
    assert internal["segmentInternalStats"]["managedLedgerInternalStats"]["numberOfEntries"] == 2
    assert internal["segmentIndexInternalStats"]["managedLedgerName"].endswith("__transaction_buffer_snapshot_indexes")
    most, least = map(str, targets["aborted"][0])
    assert run_json(targets, backend, "transaction-in-buffer-stats", "-m", most, "-l", least, "-t", TOPIC) == {
        "aborted": True}


def test_operator_switches_an_engine_to_segmented_snapshots(tmp_path):
    """engine init → engine run (single snapshots) → init --exist-ok --set …Enabled=true → stats show segments."""
    home = {"TXNADMIN_HOME": str(tmp_path / "home")}
    engine_dir = str(tmp_path / "e")

    def cli(*args):
        result = runner.invoke(app, list(args), env=home)
        assert result.exit_code == 0, result.output
        return result.stdout

    cli("engine", "init", engine_dir, "-c", "2", "--set", "transactionBufferSnapshotMaxTransactionCount=5")
    cli("engine", "run", engine_dir, "--duration", "1", "--rate", "0", "--abort-ratio", "0.5", "-o", "json")
    topic = "persistent://public/default/txn-topic-0"
    before = json.loads(cli("-u", f"local:{engine_dir}", "transactions", "transaction-buffer-stats", "-t", topic,
                            "-o", "json"))
    assert before["snapshotType"] == "Single" and before["totalAbortedTransactions"] > 0
    single = json.loads(cli("-u", f"local:{engine_dir}", "transactions", "buffer-snapshot-internal-stats", "-t", topic,
                            "-o", "json"))
    assert single["snapshotType"] == "Single"
    out = cli("engine", "init", engine_dir, "--exist-ok", "--set", "transactionBufferSegmentedSnapshotEnabled=true",
              "--set", f"transactionBufferSnapshotSegmentSize={8 + len(topic) + 3 * 4}")
    assert "(2 coordinators)" in out  # an existing engine keeps its coordinators
    after = json.loads(cli("-u", f"local:{engine_dir}", "transactions", "transaction-buffer-stats", "-t", topic,
                           "-s", "-o", "json"))
    assert after["snapshotType"] == "Segment"
    assert after["totalAbortedTransactions"] == before["totalAbortedTransactions"]
    segments = after["segmentsStats"]
    assert segments["currentSegmentCapacity"] == 4
    assert segments["segmentsSize"] == before["totalAbortedTransactions"] // 4 == len(segments["segmentStats"])
    assert segments["unsealedAbortTxnIDSize"] == before["totalAbortedTransactions"] % 4
