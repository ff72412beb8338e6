"""The transaction buffer sees its processor only through the AbortedTxnProcessor protocol, and both fit it."""

from __future__ import annotations

import inspect

import pytest

from txnadmin.engine.aborted_txn_processor import AbortedTxnProcessor
from txnadmin.engine.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from txnadmin.engine.position import Position
from txnadmin.engine.segmented_snapshot_processor import SegmentedSnapshotProcessor
from txnadmin.engine.single_snapshot_processor import SingleSnapshotProcessor
from txnadmin.engine.storage import LedgerStorage
from txnadmin.engine.tb_snapshot import SnapshotService
from txnadmin.engine.topic import Topic

METHODS = {n for n, v in vars(AbortedTxnProcessor).items() if callable(v) and not n.startswith("_")}
ATTRIBUTES = set(AbortedTxnProcessor.__annotations__)


@pytest.mark.parametrize("cls", [SingleSnapshotProcessor, SegmentedSnapshotProcessor])
def test_both_processors_implement_the_protocol(cls, tmp_path):
    assert METHODS >= {"put_aborted", "is_aborted", "take_snapshot", "recover", "trim_expired"}
    for name in sorted(METHODS):
        assert callable(getattr(cls, name, None)), (cls.__name__, name)
        proto = list(inspect.signature(getattr(AbortedTxnProcessor, name)).parameters)
        impl = list(inspect.signature(getattr(cls, name)).parameters)
        assert impl == proto, (cls.__name__, name)
    storage = LedgerStorage.open(tmp_path)
    service = SnapshotService(ManagedLedgerFactory(storage), ManagedLedgerConfig)
    extra = {"capacity": 4} if cls is SegmentedSnapshotProcessor else {}
    processor = cls("persistent://public/default/t", service, lambda: 0, **extra)
    assert ATTRIBUTES == {"snapshot_type", "last_snapshot_timestamp"}
    assert isinstance(processor.snapshot_type, str) and processor.last_snapshot_timestamp == 0
    storage.close()


class RecordingProcessor:
    """A processor of our own: the topic must work with anything that keeps the protocol."""

    snapshot_type = "Recording"

    def __init__(self):
        self.last_snapshot_timestamp = 0
        self.aborted: dict = {}
        self.calls: list[tuple] = []

    def put_aborted(self, txn, marker, snapshot_position):
        self.aborted[txn] = marker
        self.calls.append(("put_aborted", txn, snapshot_position()))

    def is_aborted(self, txn, read_position=None):
        return txn in self.aborted

    def aborted_count(self):
        return len(self.aborted)

    def trim_expired(self, first_live_ledger, snapshot_position):
        return 0

    def take_snapshot(self, snapshot_position):
        self.calls.append(("take_snapshot", snapshot_position()))

    def recover(self, first_live_ledger):
        self.calls.append(("recover", first_live_ledger))
        return None

    def finish_recovery(self, snapshot_position):
        self.calls.append(("finish_recovery",))

    def has_snapshot(self):
        return False

    def segment_count(self):
        return 0

    def segments_stats(self, detailed):
        return None

    def internal_stats(self, metadata):
        return {}


def test_a_topic_works_with_any_processor_given_at_construction(tmp_path):
    storage = LedgerStorage.open(tmp_path)
    processor = RecordingProcessor()
    topic = Topic(ManagedLedgerFactory(storage), "t", ManagedLedgerConfig(), processor, snapshot_every=1)
    assert topic.buffer.processor is processor
    topic.recover(lambda: 1)
    topic.subscription("sub")  # a new subscription starts at the end: open it before anything is published
    kept, dropped, later = (0, 1), (0, 2), (0, 3)
    topic.publish(b"kept", kept)
    topic.publish(b"dropped", dropped)
    topic.publish(b"later", later)  # still open: snapshots may only say replay resumes before it
    topic.end_transaction(kept, commit=True)
    abort_marker = topic.end_transaction(dropped, commit=False)
    assert [m.payload for m in topic.receive("sub", 10)] == [b"kept"]
    ledger = abort_marker.ledger_id
    before_dropped, before_later = Position(ledger, 0), Position(ledger, 1)  # messages at entries 0, 1, 2
    assert processor.aborted == {dropped: abort_marker}
    assert processor.calls == [
        ("recover", topic.ledger.first_ledger_id), ("finish_recovery",),
        ("take_snapshot", before_dropped),  # snapshot_every=1: after the commit marker, `dropped` still open
        ("put_aborted", dropped, before_later), ("take_snapshot", before_later),
    ]
    assert topic.buffer_stats()["snapshotType"] == "Recording"
    topic.close()
    storage.close()
