"""Keyed logs: the table view (PIP-255 preserver, snapshot logs) and the position-stable segments log."""

from __future__ import annotations

from txnadmin.engine.keyed_log import KeyedLog
from txnadmin.engine.managed_ledger import ManagedLedgerFactory
from txnadmin.engine.storage import LedgerStorage


def test_compaction_keeps_the_latest_values_and_trims_old_ledgers(tmp_path):
    storage = LedgerStorage.open(tmp_path)
    log = KeyedLog(ManagedLedgerFactory(storage), "pulsar/system/persistent/__keyed", compact_every=10)
    first_ledger = log.ledger.current_ledger_id
    for i in range(25):
        log.put(f"k{i % 3}", {"v": i})
    log.put("k2", None)  # tombstone
    assert first_ledger not in [l.ledger_id for l in log.ledger.ledgers()]  # compacted away
    assert dict(log.items()) == {"k0": {"v": 24}, "k1": {"v": 22}}
    log.close()
    storage.close()
    storage = LedgerStorage.open(tmp_path)
    again = KeyedLog(ManagedLedgerFactory(storage), "pulsar/system/persistent/__keyed", compact_every=10)
    assert dict(again.items()) == {"k0": {"v": 24}, "k1": {"v": 22}}
    assert again.entries_read < 26  # reads from the compacted state, not the whole history
    again.close()
    storage.close()


def test_positioned_log_reads_by_position_and_trims_dead_ledgers(tmp_path):
    import pytest

    from txnadmin.engine.keyed_log import PositionedLog
    from txnadmin.engine.managed_ledger import ManagedLedgerConfig

    storage = LedgerStorage.open(tmp_path)
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_ledger_rollover_time_ms=0)
    log = PositionedLog(ManagedLedgerFactory(storage), "t/ns/persistent/__segments", config)
    a0 = log.put("a", {"n": 0})
    b0 = log.put("b", {"n": 0})
    a1 = log.put("a", {"n": 1})  # supersedes a0, which becomes dead
    assert log.read(a1) == ("a", {"n": 1}) and log.read(b0) == ("b", {"n": 0})
    with pytest.raises(KeyError):
        log.read(a0)
    log.put("b", None)  # tombstone: b0 and the tombstone itself are dead
    assert sorted(log.keys()) == ["a"]
    log.ledger.maybe_rollover()
    log.ledger.trim()
    assert a0.ledger_id not in {info.ledger_id for info in log.ledger.ledgers()}  # a ledger of dead entries went
    assert log.read(a1) == ("a", {"n": 1})  # positions of live entries never change
    log.close()
    storage.close()
    storage = LedgerStorage.open(tmp_path)
    again = PositionedLog(ManagedLedgerFactory(storage), "t/ns/persistent/__segments", config)
    assert again.keys() == ["a"] and again.read(a1) == ("a", {"n": 1})
    again.close()
    storage.close()
