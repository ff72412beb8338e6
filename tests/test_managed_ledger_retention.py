"""Retention on trimming: consumed ledgers stay while inside the retention time and size quota, as in Pulsar."""

from __future__ import annotations

from txnadmin.engine.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from txnadmin.engine.storage import LedgerStorage


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def open_ml(tmp_path, clock, **kw):
    st = LedgerStorage.open(tmp_path)
    cfg = ManagedLedgerConfig(max_entries_per_ledger=2, min_ledger_rollover_time_ms=0, clock=clock, **kw)
    return st, ManagedLedgerFactory(st).open("r", cfg)


def consume_six(ml):
    c = ml.open_cursor("c")
    ps = [ml.add_entry(b"x" * 10) for _ in range(6)]
    ml.add_entry(b"x" * 10)  # rolls: the three full ledgers are closed
    c.mark_delete(ps[-1])
    return ps


def test_retention_time_keeps_consumed_ledgers_until_they_expire(tmp_path):
    clock = Clock()
    st, ml = open_ml(tmp_path, clock, retention_time_ms=60_000, retention_size_bytes=-1)
    try:
        ps = consume_six(ml)
        assert ml.trim() == []
        clock.now += 60_001
        assert ml.trim() == [ps[0].ledger_id, ps[2].ledger_id, ps[4].ledger_id]
    finally:
        st.close()


def test_retention_size_keeps_the_newest_consumed_ledgers_within_quota(tmp_path):
    clock = Clock()
    st, ml = open_ml(tmp_path, clock, retention_time_ms=-1, retention_size_bytes=30)
    try:
        ps = consume_six(ml)
        # 70 bytes in all: the oldest two ledgers go, leaving 30 bytes
        assert ml.trim() == [ps[0].ledger_id, ps[2].ledger_id]
    finally:
        st.close()


def test_infinite_retention_trims_nothing(tmp_path):
    clock = Clock()
    st, ml = open_ml(tmp_path, clock, retention_time_ms=-1, retention_size_bytes=-1)
    try:
        consume_six(ml)
        clock.now += 10**9
        assert ml.trim() == []
    finally:
        st.close()
