"""The keyed compacted log (used by the PIP-255 preserver): latest value per key survives compaction and reopen."""

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
