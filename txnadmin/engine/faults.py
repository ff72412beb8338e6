"""Engine verbs that put a transaction into the states operators meet on broken clusters, so that `txnadmin
doctor` (and its tests, and a rehearsal) can be shown the real thing rather than a mock.

Each verb does through the coordinator exactly what a broker does on the way into that state and then stops,
as the broker's failure would: nothing here writes a record Pulsar would not write.
"""

from __future__ import annotations

from .coordinator import ABORTING, COMMITTING, OPEN
from .engine import Engine
from ..names import normalize_topic


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


STALLED_TOPIC = "persistent://public/default/txn-stalled-recovery"


def stall_buffer_recovery(engine: Engine, topic: str) -> tuple[int, int]:
    """Give ``topic`` transactional history (one committed transaction), then unload it and load it again with a
    transaction-buffer recovery that starts and never ends: Pulsar's buffer when its snapshot reader blocks
    (apache/pulsar#17040). Returns the committed transaction. Unloading the topic (`pulsar-admin topics unload`,
    which doctor's fix says) or restarting the engine recovers it."""
    txn = engine.begin(owner="fault:stall-buffer-recovery")
    engine.produce(txn, topic, b"stall-buffer-recovery")
    engine.commit(txn)
    engine.stall_topic_recovery(topic)
    return txn


FAULTS = {
    "stuck-open": "3 transactions produced to the first topic and left OPEN with their timeouts lost "
                  "(apache/pulsar#19200): past --txn-timeout-ms nothing aborts them",
    "hold-ending": "1 transaction produced to the first topic and held in COMMITTING, its end never delivered "
                   "(apache/pulsar#23550): a restart of the engine drives it to the end",
    "stall-buffer-recovery": f"[=TOPIC] the transaction buffer of TOPIC (default {STALLED_TOPIC}, which the "
                             "workload leaves alone) starts recovering and never finishes (apache/pulsar#17040): "
                             "unloading the topic or a restart recovers it",
}


def fault_name(spec: str) -> str:
    """``stall-buffer-recovery=TOPIC`` → ``stall-buffer-recovery``; a name that takes no argument keeps its ``=``."""
    name, sep, _ = spec.partition("=")
    return name if sep and name == "stall-buffer-recovery" else spec


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
        elif fault_name(name) == "stall-buffer-recovery":
            stalled = name.partition("=")[2] or STALLED_TOPIC
            txn = stall_buffer_recovery(engine, stalled)
            said.append(f"fault stall-buffer-recovery: {normalize_topic(stalled)} (after ({txn[0]},{txn[1]}) "
                        "committed on it) reloaded with a transaction-buffer recovery that never ends")
        else:
            raise ValueError(f"--fault {name}: use one of {', '.join(FAULTS)}")
    return said
