"""A damaged metadata.db is refused (never written to, never silently re-created), and the recovery steps the error
gives bring the engine back with its data: checked through the CLI on a real engine directory."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def built_engine(tmp_path_factory):
    """One engine with a workload's data and two open transactions, built once (the workload runs 1.5 s); each test
    damages its own copy."""
    directory = tmp_path_factory.mktemp("built") / "engine"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TXNADMIN_HOME", str(directory.parent / "home"))
        assert runner.invoke(app, ["engine", "init", str(directory), "-c", "2"]).exit_code == 0
        run = runner.invoke(app, ["engine", "run", str(directory), "--duration", "1.5", "--rate", "300", "-o", "json"])
        assert run.exit_code == 0, run.output
        for produce in ("t1=a", "t2=b"):
            begin = runner.invoke(app, ["engine", "txn", "begin", "--dir", str(directory), "--produce", produce])
            assert begin.exit_code == 0, begin.output
    return directory


@pytest.fixture
def engine(built_engine, tmp_path, monkeypatch):
    directory = tmp_path / "engine"
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    shutil.copytree(built_engine, directory)
    return directory


def _state(directory):
    """What an operator reads from the engine: open transactions and each coordinator log's ledgers and entries."""
    base = ["-u", f"local:{directory}", "transactions"]
    listed = runner.invoke(app, [*base, "list", "-o", "json"])
    assert listed.exit_code == 0, listed.output
    logs = []
    for tc in (0, 1):
        result = runner.invoke(app, [*base, "coordinator-internal-stats", "-c", str(tc), "-o", "json"])
        assert result.exit_code == 0, result.output
        ml = json.loads(result.stdout)["transactionLogStats"]["managedLedgerInternalStats"]
        # every open rolls a new, empty ledger: compare the ledgers that hold entries
        logs.append((ml["numberOfEntries"], [(l["ledgerId"], l["entries"]) for l in ml["ledgers"] if l["entries"]]))
    return sorted(r["txnId"] for r in json.loads(listed.stdout)), logs


def _damage_table(db, table):
    """Overwrite the root page of ``table`` with garbage, as a torn write or a bad disk would."""
    conn = sqlite3.connect(db)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    conn.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(bytes([0xA5]) * page_size)


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_damaged_index_is_refused_and_recovery_keeps_every_entry(engine):
    before = _state(engine)
    assert before[0], "the fixture leaves open transactions"
    db = engine / "metadata.db"
    _damage_table(db, "entries")
    damaged = _digest(db)

    read = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "list"])
    assert read.exit_code == 1 and "damaged" in read.stderr and f"txnadmin engine recover {engine}" in read.stderr
    write = runner.invoke(app, ["engine", "txn", "begin", "--dir", str(engine), "--produce", "t1=x"])
    assert write.exit_code != 0 and "Traceback" not in write.output
    own = runner.invoke(app, ["-u", f"local:{engine}", "downgrade", "status", "--state", str(engine / "s.json")])
    assert own.exit_code in (1, 3) and "Traceback" not in own.output
    assert _digest(db) == damaged  # nothing wrote to it

    recovered = runner.invoke(app, ["engine", "recover", str(engine), "-o", "json"])
    assert recovered.exit_code == 0, recovered.output
    report = json.loads(recovered.stdout)
    assert report["lost"] == [] and report["rebuiltFromEntryLogs"]["entries"] > 0
    kept = [p for p in engine.glob("metadata.db.damaged-*") if not p.name.endswith(("-wal", "-shm"))]
    assert [_digest(p) for p in kept] == [damaged]  # the damaged file is kept as it was
    assert _state(engine) == before
    again = runner.invoke(app, ["engine", "txn", "begin", "--dir", str(engine), "--produce", "t1=y"])
    assert again.exit_code == 0, again.output


def test_an_empty_metadata_db_beside_entry_logs_is_not_recreated(engine):
    db = engine / "metadata.db"
    for extra in ("metadata.db-wal", "metadata.db-shm"):
        (engine / extra).unlink(missing_ok=True)
    db.write_bytes(b"")
    result = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "coordinators-list"])
    assert result.exit_code == 1 and "empty file beside existing entry logs" in result.stderr
    assert "move it away" not in result.stderr and db.stat().st_size == 0
    recovered = runner.invoke(app, ["engine", "recover", str(engine)])
    assert recovered.exit_code == 1 and "lost: kv" in recovered.stdout  # says honestly what cannot come back
    assert "re-indexed" in recovered.stdout


def test_a_zeroed_metadata_db_names_the_recovery(engine):
    db = engine / "metadata.db"
    for extra in ("metadata.db-wal", "metadata.db-shm"):
        (engine / extra).unlink(missing_ok=True)
    db.write_bytes(b"\0" * db.stat().st_size)
    result = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "coordinators-list"])
    assert result.exit_code == 1 and "damaged" in result.stderr and "engine recover" in result.stderr


def test_recover_refuses_an_engine_in_use_and_needs_a_directory(engine, tmp_path):
    assert runner.invoke(app, ["engine", "recover"]).exit_code == 2  # never an implicit default
    missing = runner.invoke(app, ["engine", "recover", str(tmp_path / "nothing")])
    assert missing.exit_code == 3 and "missing" in missing.stderr


def test_recover_leaves_a_sound_metadata_db_alone_unless_forced(engine):
    before = (engine / "metadata.db").read_bytes()
    result = runner.invoke(app, ["engine", "recover", str(engine)])
    assert result.exit_code == 0 and "nothing to recover" in result.stdout, result.output
    assert (engine / "metadata.db").read_bytes() == before and not list(engine.glob("metadata.db.damaged-*"))
    forced = runner.invoke(app, ["engine", "recover", str(engine), "--force", "-o", "json"])
    assert forced.exit_code == 0 and json.loads(forced.stdout)["lost"] == [], forced.output
    assert list(engine.glob("metadata.db.damaged-*"))
    listed = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "coordinators-list"])
    assert listed.exit_code == 0, listed.output
