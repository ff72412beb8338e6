"""The contract between a topic's transaction buffer and the processor that keeps its aborted transactions.

A reader must never see an aborted transaction's messages, so the buffer asks its processor, for every
transactional message, whether that transaction aborted. The processor holds the aborted set (each id
with the position of its abort marker) and persists it in the namespace's snapshot logs, so a topic
need not replay its whole ledger at recovery. Pulsar has two (``AbortedTxnProcessor``):

* :mod:`.single_snapshot_processor`: the whole set in one snapshot per topic (the default);
* :mod:`.segmented_snapshot_processor`: PIP-196's sealed segments plus an index.

``transactionBufferSegmentedSnapshotEnabled`` picks one when the topic opens; the buffer is given it at
construction and never looks behind this protocol.

A snapshot records a max read position: where replay resumes after recovery. Only the buffer knows it
(it depends on the transactions still open), so every method that may write a snapshot takes a
``snapshot_position`` function and calls it only when it does write: an abort that writes nothing costs
no scan of the open transactions.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from .position import Position

Txn = tuple[int, int]  # (most bits: coordinator id, least bits: sequence)
SnapshotPosition = Callable[[], Position]


class AbortedTxnProcessor(Protocol):
    snapshot_type: str  # "Single" or "Segment", as stats show it
    last_snapshot_timestamp: int  # epoch ms of the last snapshot written (0: none since the topic opened)

    # -- the aborted set ----------------------------------------------------------------------
    def put_aborted(self, txn: Txn, marker: Position, snapshot_position: SnapshotPosition) -> None:
        """Remember an aborted transaction and its abort marker (markers arrive in log order; repeats are ignored)."""
        ...

    def is_aborted(self, txn: Txn, read_position: Optional[Position] = None) -> bool:
        """Whether ``txn`` aborted; ``read_position`` (the message's) lets a processor skip what ends before it."""
        ...

    def aborted_count(self) -> int: ...

    def trim_expired(self, first_live_ledger: int, snapshot_position: SnapshotPosition) -> int:
        """Forget transactions whose abort marker's ledger was trimmed from the topic; returns how many went."""
        ...

    # -- persistence ---------------------------------------------------------------------------
    def take_snapshot(self, snapshot_position: SnapshotPosition) -> None: ...

    def recover(self, first_live_ledger: int) -> Optional[Position]:
        """Load the latest snapshot; returns its max read position (replay starts after it), or None if none."""
        ...

    def finish_recovery(self, snapshot_position: SnapshotPosition) -> None:
        """Called once the topic's replay after :meth:`recover` is done."""
        ...

    # -- stats ---------------------------------------------------------------------------------
    def has_snapshot(self) -> bool: ...

    def segment_count(self) -> int: ...

    def segments_stats(self, detailed: bool) -> Optional[dict]:
        """``segmentsStats`` of the buffer's stats (None: the processor has no segments)."""
        ...

    def internal_stats(self, metadata: bool) -> dict:
        """``transactions buffer-snapshot-internal-stats``: the snapshot system topics' managed-ledger stats."""
        ...
