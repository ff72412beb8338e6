"""Engine verbs that put a transaction into the states operators meet on broken clusters, so that `txnadmin
doctor` (and its tests, and a rehearsal) can be shown the real thing rather than a mock.

Each verb does through the coordinator exactly what a broker does on the way into that state and then stops,
as the broker's failure would: nothing here writes a record Pulsar would not write.
"""

from __future__ import annotations

from .coordinator import ABORTING, COMMITTING, OPEN
from .engine import Engine


def hold_ending(engine: Engine, txn: tuple[int, int], commit: bool = True) -> None:
    """OPEN → COMMITTING (or ABORTING) in the coordinator's log, and the end never delivered to the topics and
    subscriptions: a coordinator whose transaction-buffer client stalls (apache/pulsar#23550). Reopening the
    coordinator (unloading its transaction_coordinator_assign partition) recovers the state and drives the end."""
    engine.coordinator(txn[0]).update_status(txn[1], COMMITTING if commit else ABORTING, OPEN)
