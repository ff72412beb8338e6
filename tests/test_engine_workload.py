"""The workload through the CLI, dynamic settings from another process, and kill -9 survival."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.engine.engine import Engine
from txnadmin.engine.position import Position
from engine_helpers import wait_served

runner = CliRunner()
TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


def _init(path: Path, *sets: str) -> None:
    args = ["engine", "init", str(path), "-c", "4",
            "--set", "managedLedgerMaxEntriesPerLedger=50", "--set", "managedLedgerMinLedgerRolloverTimeMinutes=0",
            "--set", "transactionPendingAckLogIndexMinLag=10"]
    for s in sets:
        args += ["--set", s]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


def test_init_rejects_bad_settings_and_existing_engines(tmp_path):
    bad = runner.invoke(app, ["engine", "init", str(tmp_path / "e"), "--set", "managedLedgerMaxEntriesPerLedger=lots"])
    assert bad.exit_code == 2 and "managedLedgerMaxEntriesPerLedger" in bad.stderr
    unknown = runner.invoke(app, ["engine", "init", str(tmp_path / "e"), "--set", "noSuchThing=1"])
    assert unknown.exit_code == 2 and "noSuchThing" in unknown.stderr
    _init(tmp_path / "e")
    again = runner.invoke(app, ["engine", "init", str(tmp_path / "e")])
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_run_reports_counters_as_json(tmp_path):
    _init(tmp_path / "e")
    result = runner.invoke(app, ["engine", "run", str(tmp_path / "e"), "--duration", "1.5", "--rate", "100",
                                 "--concurrency", "4", "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["started"] > 20 and out["committed"] > 0 and out["errors"] == 0


def test_run_on_a_missing_engine_exits_3(tmp_path):
    result = runner.invoke(app, ["engine", "run", str(tmp_path / "none"), "--duration", "1"])
    assert result.exit_code == 3 and "engine init" in result.stderr


def test_dynamic_change_from_another_process_reaches_a_running_engine(tmp_path):
    _init(tmp_path / "e")
    engine = Engine(tmp_path / "e")
    try:
        assert engine.config.transactionLogBatchedWriteEnabled is False
        done = subprocess.run(TXNADMIN + ["engine", "set", "transactionLogBatchedWriteEnabled", "true",
                                          "--dir", str(tmp_path / "e")], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        for _ in range(100):  # the maintenance loop polls; give it up to 10 s on a loaded machine
            if engine.config.transactionLogBatchedWriteEnabled:
                break
            time.sleep(0.1)
        assert engine.config.transactionLogBatchedWriteEnabled is True
        # like Pulsar, an open coordinator keeps what it read at open; a reload picks the flag up
        assert engine.coordinator(0).log.writer_config.enabled is False
        before = engine.coordinator(0).log.ledger.current_ledger_id
        engine.reload_coordinator(0)
        assert engine.coordinator(0).log.writer_config.enabled is True
        assert engine.coordinator(0).log.ledger.current_ledger_id > before  # a reopen starts a new ledger
    finally:
        engine.close()


def test_invalid_dynamic_value_is_refused(tmp_path):
    _init(tmp_path / "e")
    result = runner.invoke(app, ["engine", "set", "transactionLogBatchedWriteEnabled", "maybe", "--dir", str(tmp_path / "e")])
    assert result.exit_code == 2 and "Invalid dynamic-config value" in result.stderr
    # only the two switches are dynamic in Pulsar: the thresholds and everything else are read from the file
    for key in ("transactionLogBatchedWriteMaxRecords", "managedLedgerMaxEntriesPerLedger"):
        result = runner.invoke(app, ["engine", "set", key, "3", "--dir", str(tmp_path / "e")])
        assert result.exit_code == 2 and "non-dynamic" in result.stderr


def _run_phase(directory: Path, journal: Path, seconds: float, kill_after: float | None = None) -> None:
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(directory), "--duration", str(seconds), "--rate", "0",
                                        "--concurrency", "8", "--abort-ratio", "0.2", "--journal", str(journal),
                                        "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if kill_after is None:
        out, err = proc.communicate(timeout=seconds + 60)
        assert proc.returncode == 0, err.decode()
        result = json.loads(out)
        assert result["errors"] == 0, result["lastError"]
        return
    time.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _set(directory: Path, name: str, value: str) -> None:
    result = runner.invoke(app, ["engine", "set", name, value, "--dir", str(directory)])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_workload_toggling_batching_survives_kill_9(tmp_path):
    directory, journal = tmp_path / "e", tmp_path / "journal.jsonl"
    _init(directory, "transactionLogBatchedWriteEnabled=true", "transactionPendingAckBatchedWriteEnabled=true")
    phase = float(os.environ.get("TXNADMIN_TEST_PHASE_SECONDS", "4"))
    _run_phase(directory, journal, phase)
    _set(directory, "transactionLogBatchedWriteEnabled", "false")
    _set(directory, "transactionPendingAckBatchedWriteEnabled", "false")
    _run_phase(directory, journal, phase)
    _set(directory, "transactionLogBatchedWriteEnabled", "true")
    _set(directory, "transactionPendingAckBatchedWriteEnabled", "true")
    _run_phase(directory, journal, phase * 10, kill_after=phase)

    committed = [json.loads(line) for line in journal.read_text().splitlines() if line.endswith("}")]
    assert len(committed) > 50
    with Engine(directory, maintenance=False) as engine:
        for item in committed:
            txn = tuple(item["txn"])
            for topic, _pos in item["produced"]:
                buffer = engine.topic(topic, create=False).buffer
                assert not buffer.is_aborted(txn) and txn not in buffer.ongoing
            for topic, sub, pos in item["acked"]:
                cursor = engine.topic(topic, create=False).subscription(sub)
                p = Position.parse(pos)
                assert cursor.is_deleted(p) or p <= cursor.mark_delete_position
        logs = [tc.internal_stats()["transactionLogStats"]["managedLedgerInternalStats"] for tc in engine.coordinators.values()]
        assert any(len(s["ledgers"]) > 1 for s in logs)  # rolled
        assert engine.storage.garbage_bytes() > 0  # and trimmed: deleted ledgers wait for compaction


@pytest.mark.slow
def test_stats_from_a_second_process_while_the_workload_runs(tmp_path):
    directory = tmp_path / "e"
    _init(directory, "transactionLogBatchedWriteEnabled=true")
    # Until stopped (not a fixed duration): on a loaded machine the reads below can outlast any duration chosen
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(directory), "--duration", "0", "--rate", "100",
                                        "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_served(directory)
        seen = []
        for _ in range(3):
            out = subprocess.run(TXNADMIN + ["-u", f"local:{directory}", "transactions", "coordinator-stats", "-o",
                                             "json"], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            internal = subprocess.run(TXNADMIN + ["-u", f"local:{directory}", "transactions",
                                                  "coordinator-internal-stats", "-c", "0", "-o", "json"],
                                      capture_output=True, text=True)
            assert internal.returncode == 0, internal.stderr
            ml = json.loads(internal.stdout)["transactionLogStats"]["managedLedgerInternalStats"]
            seen.append((json.loads(out.stdout), ml))
            time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    sequences = [[s[str(i)]["leastSigBits"] for i in range(4)] for s, _ in seen]
    for earlier, later in zip(sequences, sequences[1:], strict=False):
        assert all(b >= a for a, b in zip(earlier, later, strict=True))  # the live engine only moves forward
    assert sequences[-1] > sequences[0]
    for stats, ml in seen:
        assert all(v["state"] == "Ready" for v in stats.values())
        assert ml["numberOfEntries"] == sum(l["entries"] for l in ml["ledgers"]) + ml["currentLedgerEntries"]


def test_a_failed_ack_hands_its_messages_back(tmp_path):
    """A client whose ack fails (its coordinator reloading) must not leave the messages dispatched for good: the
    subscription's mark-delete would stop behind them and its pending-ack log would never trim (a downgrade `wait`
    that never ends)."""
    import random
    import threading

    from tests.engine_helpers import open_engine
    from txnadmin.engine.coordinator import CoordinatorNotReady
    from txnadmin.engine.ops import run
    from txnadmin.engine.workload import WorkloadSpec, WorkloadStats, _one_transaction

    engine = open_engine(tmp_path / "e")
    try:
        topic = "persistent://public/default/t"
        engine.subscribe(topic, "s")
        txn = engine.begin(60_000)
        engine.produce(txn, topic, b"m")
        engine.commit(txn)

        def refuse(*_args, **_kwargs):  # the workload's ack, as an operation (engine.ack_async) that fails
            raise CoordinatorNotReady("reloading")
            yield

        spec = WorkloadSpec(messages_per_txn=0, acks_per_txn=1)
        real_ack, engine.ack_async = engine.ack_async, refuse
        try:
            with pytest.raises(CoordinatorNotReady):
                run(_one_transaction(engine, spec, random.Random(1), [topic], ["s"], WorkloadStats(),
                                     threading.Lock(), None))
        finally:
            engine.ack_async = real_ack
        assert [m.payload for m in engine.receive(topic, "s", 10)] == [b"m"]
    finally:
        engine.close()
