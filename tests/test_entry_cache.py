"""The managed ledger's entry cache: tail reads skip storage, and what it serves is exactly what storage holds."""

from __future__ import annotations

import pytest

from txnadmin.engine.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from txnadmin.engine.position import Position
from txnadmin.engine.storage import LedgerClosedError, LedgerStorage


@pytest.fixture
def storage(tmp_path):
    st = LedgerStorage.open(tmp_path / "s")
    yield st
    st.close()


def test_a_tail_read_is_served_from_the_cache(storage, monkeypatch):
    ml = ManagedLedgerFactory(storage).open("t/ns/persistent/a")
    positions = [ml.add_entry(b"entry %d" % i) for i in range(5)]

    def no_storage(*args):
        raise AssertionError("read from storage although cached")

    monkeypatch.setattr(storage, "read_entries", no_storage)
    assert ml.read_entries(positions[0], 10) == [(p, b"entry %d" % i) for i, p in enumerate(positions)]


def test_evicted_entries_come_from_storage_in_order(storage):
    factory = ManagedLedgerFactory(storage, entry_cache_bytes=40)  # room for the last five 8-byte entries
    ml = factory.open("t/ns/persistent/a", ManagedLedgerConfig(max_entries_per_ledger=7, min_ledger_rollover_time_ms=0))
    positions = [ml.add_entry(b"entry %02d" % i) for i in range(20)]
    assert len({p.ledger_id for p in positions}) == 3  # the reads cross ledger ends too
    cached = {p for p in positions if factory.entry_cache.get(p.ledger_id, p.entry_id) is not None}
    assert cached == set(positions[-5:])
    got = ml.read_entries(positions[2], 100)
    assert got == [(p, b"entry %02d" % i) for i, p in enumerate(positions) if i >= 2]
    assert got == [(p, storage.read_entry(p.ledger_id, p.entry_id)) for p, _ in got]


def test_a_refused_add_is_not_cached(storage):
    factory = ManagedLedgerFactory(storage)
    ml = factory.open("t/ns/persistent/a")
    pos = ml.add_entry(b"kept")
    storage.close_ledger(pos.ledger_id)  # closed under the managed ledger: the next add fails
    with pytest.raises(LedgerClosedError):
        ml.add_entry(b"refused")
    assert factory.entry_cache.get(pos.ledger_id, pos.entry_id + 1) is None
    assert ml.read_entries(Position(pos.ledger_id, 0), 10) == [(pos, b"kept")]
