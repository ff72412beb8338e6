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


def lose_timeout(engine: Engine, txn: tuple[int, int]) -> None:
    """The coordinator forgets when ``txn`` times out, so nothing aborts it: the state apache/pulsar#19200 left
    after a coordinator recovery (timed-out transactions never end, the max read position freezes). The record
    in the log is untouched; reopening the coordinator (a restart, or unloading its assign partition) arms the
    timeout again from the log, and the next maintenance tick aborts it."""
    engine.coordinator(txn[0]).forget_timeout(txn[1])


FAULTS = {
    "stuck-open": "3 transactions produced to the first topic and left OPEN with their timeouts lost "
                  "(apache/pulsar#19200): past --txn-timeout-ms nothing aborts them",
    "hold-ending": "1 transaction produced to the first topic and held in COMMITTING, its end never delivered "
                   "(apache/pulsar#23550): a restart of the engine drives it to the end",
}


def inject(engine: Engine, names: list[str], topic: str, timeout_ms: int) -> list[str]:
    """Apply the named faults (``FAULTS``) on a running engine; one line per fault saying what it did."""
    said = []
    for name in names:
        if name == "stuck-open":
            txns = []
            for _ in range(3):
                txn = engine.begin(timeout_ms, owner="fault:stuck-open")
                lose_timeout(engine, txn)  # before anything else, so even a short timeout cannot fire first
                engine.produce(txn, topic, b"stuck-open")
                txns.append(txn)
            said.append(f"fault stuck-open: {', '.join(f'({m},{l})' for m, l in txns)} OPEN on {topic}, their "
                        f"{timeout_ms} ms timeouts lost")
        elif name == "hold-ending":
            txn = engine.begin(timeout_ms, owner="fault:hold-ending")
            engine.produce(txn, topic, b"hold-ending")
            hold_ending(engine, txn, commit=True)
            said.append(f"fault hold-ending: ({txn[0]},{txn[1]}) held in COMMITTING on {topic}")
        else:
            raise ValueError(f"--fault {name}: use one of {', '.join(FAULTS)}")
    return said
