"""Managed ledgers and cursors on real storage: rollover, deletes, mark-delete, trimming, reopen, stats."""

from __future__ import annotations

import subprocess
import sys

import pytest

from txnadmin.engine.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from txnadmin.engine.position import Position
from txnadmin.engine.storage import LedgerNotFoundError, LedgerStorage


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


@pytest.fixture
def storage(tmp_path):
    st = LedgerStorage.open(tmp_path)
    yield st
    st.close()


def config(clock, **kw):
    base = dict(max_entries_per_ledger=3, min_ledger_rollover_time_ms=0, max_ledger_rollover_time_ms=10**12,
                max_size_per_ledger_bytes=10**9, clock=clock)
    base.update(kw)
    return ManagedLedgerConfig(**base)


def test_rollover_by_entries_and_reads_across_ledgers(storage):
    ml = ManagedLedgerFactory(storage).open("t/ns/persistent/a", config(Clock()))
    positions = [ml.add_entry(f"e{i}".encode()) for i in range(7)]
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2, 0]
    assert len({p.ledger_id for p in positions}) == 3
    got = ml.read_entries(Position(positions[1].ledger_id, 1), 100)
    assert [d for _, d in got] == [f"e{i}".encode() for i in range(1, 7)]
    meta = storage.ledger_metadata(positions[0].ledger_id)
    assert meta.state == "CLOSED" and meta.custom_metadata == {
        "application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": "t/ns/persistent/a"}


def test_min_rollover_time_is_respected_and_max_time_rolls(storage):
    clock = Clock()
    ml = ManagedLedgerFactory(storage).open("x", config(clock, min_ledger_rollover_time_ms=60_000,
                                                          max_ledger_rollover_time_ms=120_000))
    for _i in range(5):
        ml.add_entry(b"x")
    assert len(ml.ledgers()) == 1  # full by count, but younger than the minimum
    clock.now += 60_000
    ml.add_entry(b"y")
    assert len(ml.ledgers()) == 2
    assert not ml.maybe_rollover()
    clock.now += 120_000
    assert ml.maybe_rollover()  # old enough and has entries
    assert len(ml.ledgers()) == 3
    clock.now += 500_000
    assert not ml.maybe_rollover()  # an empty ledger never rolls on time


def test_rollover_by_size(storage):
    ml = ManagedLedgerFactory(storage).open("x", config(Clock(), max_entries_per_ledger=1000,
                                                          max_size_per_ledger_bytes=100))
    for _ in range(3):
        ml.add_entry(b"z" * 60)
    assert len(ml.ledgers()) == 2


def test_cursor_individual_and_batch_index_deletes(storage):
    ml = ManagedLedgerFactory(storage).open("x", config(Clock()))
    cursor = ml.open_cursor("c")
    ps = [ml.add_entry(b"m") for _ in range(6)]
    cursor.delete(ps[1])
    assert cursor.mark_delete_position < ps[0] and cursor.is_deleted(ps[1])
    cursor.delete(ps[0], ack_set=[0b110])  # records 1 and 2 of a 3-record batch not yet deleted
    assert cursor.deleted_batch_indexes(ps[0]) == [0b110] and not cursor.is_deleted(ps[0])
    cursor.delete(ps[0], ack_set=[0b011])  # AND → 0b010
    assert cursor.deleted_batch_indexes(ps[0]) == [0b010]
    cursor.delete(ps[0], ack_set=[0b101])  # AND → empty: the entry is fully deleted
    assert cursor.deleted_batch_indexes(ps[0]) is None
    assert cursor.mark_delete_position == ps[1]  # contiguous prefix
    cursor.delete_many([(ps[3], None), (ps[4], None)])
    assert cursor.mark_delete_position == ps[1]
    assert cursor.stats()["individuallyDeletedMessages"] == f"[({ps[3].ledger_id}:-1..{ps[4].ledger_id}:1]]"
    cursor.delete(ps[2])  # closes the gap across the ledger boundary
    assert cursor.mark_delete_position == ps[4]
    assert cursor.stats()["individuallyDeletedMessages"] == "[]"


def test_trimming_respects_the_slowest_cursor_and_never_the_open_ledger(storage):
    ml = ManagedLedgerFactory(storage).open("x", config(Clock()))
    fast, slow = ml.open_cursor("fast"), ml.open_cursor("slow")
    ps = [ml.add_entry(b"m") for _ in range(9)]
    fast.mark_delete(ps[-1])
    assert ml.trim() == []
    slow.mark_delete(ps[4])
    assert ml.trim() == [ps[0].ledger_id]
    slow.mark_delete(ps[-1])
    assert ml.trim() == [ps[3].ledger_id]
    # the third ledger is full but still the open one: it stays
    assert [l.ledger_id for l in ml.ledgers()] == [ps[8].ledger_id] == [ml.current_ledger_id]
    with pytest.raises(LedgerNotFoundError):  # trimmed: deleted from storage, not merely unreadable
        storage.ledger_metadata(ps[0].ledger_id)


def test_a_pinned_position_blocks_trimming(storage):
    ml = ManagedLedgerFactory(storage).open("x", config(Clock()))
    c = ml.open_cursor("c")
    ps = [ml.add_entry(b"m") for _ in range(12)]
    c.delete_many([(p, None) for p in ps[1:]])
    assert c.mark_delete_position < ps[0]
    assert ml.trim() == []
    c.delete(ps[0])
    assert len(ml.trim()) == 3  # the fourth (full) ledger is still the open one


def test_reopen_restores_ledgers_properties_and_cursor_state(tmp_path):
    st = LedgerStorage.open(tmp_path)
    ml = ManagedLedgerFactory(st).open("x", config(Clock()))
    c = ml.open_cursor("c")
    ps = [ml.add_entry(b"m") for _ in range(5)]
    c.delete(ps[2])
    c.delete(ps[0], ack_set=[6])
    ml.set_properties({"max_local_txn_id": "41"})
    st.close()  # no ml.close(): a crash leaves the last ledger OPEN
    st = LedgerStorage.open(tmp_path)
    ml = ManagedLedgerFactory(st).open("x", config(Clock()))
    c = ml.cursors()["c"]
    assert c.is_deleted(ps[2]) and c.deleted_batch_indexes(ps[0]) == [6]
    assert ml.properties() == {"max_local_txn_id": "41"}
    assert [d for _, d in ml.read_entries(ps[0], 10)] == [b"m"] * 5
    assert ml.current_ledger_id > ps[-1].ledger_id  # a reopen starts a new ledger
    st.close()


def test_internal_stats_shape(storage):
    ml = ManagedLedgerFactory(storage).open("x", config(Clock()))
    ml.open_cursor("transaction.subscription")
    for _ in range(4):
        ml.add_entry(b"abc")
    stats = ml.internal_stats(include_ledger_metadata=True)
    assert list(stats)[:5] == ["entriesAddedCounter", "numberOfEntries", "totalSize", "currentLedgerEntries",
                               "currentLedgerSize"]
    assert stats["numberOfEntries"] == 4 and stats["totalSize"] == 12
    assert stats["currentLedgerEntries"] == 1 and stats["lastConfirmedEntry"] == f"{ml.current_ledger_id}:0"
    assert stats["ledgers"][-1] == {"ledgerId": ml.current_ledger_id, "entries": 0, "size": 0, "offloaded": False,
                                    "underReplicated": False, "metadata": stats["ledgers"][-1]["metadata"]}
    assert stats["ledgers"][0]["entries"] == 3 and "password=OMITTED" in stats["ledgers"][0]["metadata"]
    cursor = stats["cursors"]["transaction.subscription"]
    for key in ("markDeletePosition", "readPosition", "individuallyDeletedMessages",
                "totalNonContiguousDeletedMessagesRange", "numberOfEntriesSinceFirstNotAckedMessage"):
        assert key in cursor
    assert "T" in stats["lastLedgerCreatedTimestamp"] and stats["state"] == "LedgerOpened"


def test_another_process_sees_the_same_ledgers_and_stats(tmp_path):
    st = LedgerStorage.open(tmp_path)
    ml = ManagedLedgerFactory(st).open("pulsar/system/persistent/__transaction_log_0", config(Clock()))
    ml.open_cursor("transaction.subscription").delete(ml.add_entry(b"a"))
    for _ in range(5):
        ml.add_entry(b"bb")
    code = (
        "import json, sys\n"
        "from txnadmin.engine.storage import LedgerStorage\n"
        "from txnadmin.engine.managed_ledger import ManagedLedgerFactory\n"
        "st = LedgerStorage.open(sys.argv[1], read_only=True)\n"
        "ml = ManagedLedgerFactory(st).open_read_only('pulsar/system/persistent/__transaction_log_0')\n"
        "s = ml.internal_stats()\n"
        "print(json.dumps([s['numberOfEntries'], s['totalSize'], [l['ledgerId'] for l in s['ledgers']],"
        " s['cursors']['transaction.subscription']['markDeletePosition']]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    import json

    mine = ml.internal_stats()
    assert json.loads(out.stdout) == [mine["numberOfEntries"], mine["totalSize"],
                                      [l["ledgerId"] for l in mine["ledgers"]],
                                      mine["cursors"]["transaction.subscription"]["markDeletePosition"]]
    st.close()
