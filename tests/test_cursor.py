"""Cursor semantics on real storage: Java long[] ack sets, where a new cursor starts, and state after SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from txnadmin.engine.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from txnadmin.engine.position import Position
from txnadmin.engine.storage import LedgerStorage


@pytest.fixture
def storage(tmp_path):
    st = LedgerStorage.open(tmp_path)
    yield st
    st.close()


def small(**kw):
    base = dict(max_entries_per_ledger=2, min_ledger_rollover_time_ms=0, clock=lambda: 1_000_000.0)
    base.update(kw)
    return ManagedLedgerConfig(**base)


def test_ack_sets_are_signed_java_words_and_trailing_zero_words_drop(storage):
    ml = ManagedLedgerFactory(storage).open("t", small(max_entries_per_ledger=100))
    c = ml.open_cursor("c")
    p = ml.add_entry(b"batch of 128")
    top_bit = -(1 << 63)  # bit 63 of word 0 as Java's long holds it
    c.delete(p, ack_set=[top_bit | 1, 0b1])
    c.delete(p, ack_set=[top_bit, -1])  # AND keeps bit 63 of word 0 and bit 0 of word 1
    assert c.deleted_batch_indexes(p) == [top_bit, 1]
    c.delete(p, ack_set=[-1, 0])  # word 1 becomes zero and is dropped
    assert c.deleted_batch_indexes(p) == [top_bit]
    assert not c.is_deleted(p)
    c.delete(p)  # no ack set: the whole entry goes
    assert c.is_deleted(p) and c.deleted_batch_indexes(p) is None
    assert c.mark_delete_position == p


def test_an_empty_ack_set_deletes_the_entry(storage):
    ml = ManagedLedgerFactory(storage).open("t", small())
    c = ml.open_cursor("c")
    p = ml.add_entry(b"m")
    c.delete(p, ack_set=[])
    assert c.is_deleted(p) and c.mark_delete_position == p


def test_a_new_cursor_starts_at_the_end_and_an_existing_one_keeps_its_place(storage):
    factory = ManagedLedgerFactory(storage)
    ml = factory.open("t", small())
    first = [ml.add_entry(b"m") for _ in range(3)]
    late = ml.open_cursor("late")
    assert late.mark_delete_position == first[-1]
    assert ml.open_cursor("late") is late
    more = [ml.add_entry(b"m") for _ in range(3)]
    assert late.read_position == more[0]
    assert late.stats()["numberOfEntriesSinceFirstNotAckedMessage"] == 3


def test_mark_delete_forgets_individual_deletes_behind_it(storage):
    ml = ManagedLedgerFactory(storage).open("t", small())
    c = ml.open_cursor("c")
    ps = [ml.add_entry(b"m") for _ in range(7)]
    c.delete_many([(ps[2], None), (ps[5], [0b10])])
    assert c.stats()["totalNonContiguousDeletedMessagesRange"] == 1
    c.mark_delete(ps[5])
    assert c.mark_delete_position == ps[5]
    assert c.stats()["individuallyDeletedMessages"] == "[]"
    assert c.deleted_batch_indexes(ps[5]) is None
    assert c.read_position == ps[6]


CHILD = """
import os, sys
from txnadmin.engine.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from txnadmin.engine.storage import LedgerStorage
st = LedgerStorage.open(sys.argv[1])
ml = ManagedLedgerFactory(st).open("t", ManagedLedgerConfig(max_entries_per_ledger=4, min_ledger_rollover_time_ms=0))
c = ml.open_cursor("c")
ps = [ml.add_entry(b"m%d" % i) for i in range(10)]
c.delete_many([(ps[0], None), (ps[1], None), (ps[6], None), (ps[8], [0b101])])
ml.set_properties({"max_local_txn_id": "41"})
print(",".join(str(p) for p in ps), flush=True)
os.kill(os.getpid(), 9)
"""


def test_cursor_and_properties_survive_sigkill(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    ps = [Position.parse(t) for t in proc.stdout.strip().split(",")]
    st = LedgerStorage.open(tmp_path)
    try:
        ml = ManagedLedgerFactory(st).open("t")
        c = ml.cursors()["c"]
        assert c.mark_delete_position == ps[1]
        assert c.is_deleted(ps[6]) and not c.is_deleted(ps[7])
        assert c.deleted_batch_indexes(ps[8]) == [0b101]
        assert ml.properties()["max_local_txn_id"] == "41"
        assert [d for _, d in ml.read_entries(ps[0], 20)] == [b"m%d" % i for i in range(10)]
    finally:
        st.close()
