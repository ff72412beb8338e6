"""Engine verbs that put a transaction into the states operators meet on broken clusters, so that `txnadmin
doctor` (and its tests, and a rehearsal) can be shown the real thing rather than a mock.

Each verb does through the coordinator exactly what a broker does on the way into that state and then stops,
as the broker's failure would: nothing here writes a record Pulsar would not write.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional, TypeVar

from .coordinator import ABORTING, COMMITTING, OPEN
from .engine import Engine
from ..names import coordinator_assign_partition, coordinator_of_assign_partition, normalize_topic

log = logging.getLogger(__name__)


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
    "stall-coordinator-recovery": "[=ID] coordinator ID (default 0) is unloaded and loaded again with a log replay "
                                  "that does not finish, as after a failover onto a broker replaying a long log: its "
                                  "admin stats answer 404 \"Transaction coordinator not found\" until it is unloaded "
                                  "again (or the engine restarts)",
    "shed": "=SECONDS every SECONDS one topic with pending-ack stores or open transactions and one coordinator are "
            "unloaded, each in turn, as a load manager's bundle shedding does: they reopen with a new "
            "recoverStartTime and a new ledger",
    "rolling-restart": "=SECONDS (an engine of several brokers) every SECONDS the next broker is restarted, in turn: "
                       "its address refuses connections meanwhile, it comes back as a new process, and what it owned "
                       "moves to the others after engineBrokerFailoverDelayMillis",
}

SHED = "shed"
ROLLING_RESTART = "rolling-restart"
STALL_COORDINATOR = "stall-coordinator-recovery"
_TAKES_ARGUMENT = ("stall-buffer-recovery", STALL_COORDINATOR, SHED, ROLLING_RESTART)


def fault_name(spec: str) -> str:
    """``stall-buffer-recovery=TOPIC`` → ``stall-buffer-recovery``, ``shed=5`` → ``shed``; a name that takes no
    argument keeps its ``=``."""
    name, sep, _ = spec.partition("=")
    return name if sep and name in _TAKES_ARGUMENT else spec


def shown(spec: str) -> str:
    """``spec`` as an error line can hold it: quoted and escaped when it has a newline or another control
    character."""
    return spec if spec.isprintable() else repr(spec)


def shed_period(spec: str) -> float:
    """The seconds of ``shed=SECONDS`` or ``rolling-restart=SECONDS`` (finite, more than 0); ValueError saying what
    is wrong, in one line."""
    name, sep, raw = spec.partition("=")
    if not sep or not raw.strip():
        raise ValueError(f"--fault {shown(spec)}: give the period in seconds, e.g. {shown(name)}=5")
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"--fault {shown(spec)}: {raw.strip()!r} is not a number of seconds") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"--fault {shown(spec)}: the period must be a finite number of seconds more than 0")
    return seconds


def stalled_coordinator(spec: str, ids: list[int]) -> int:
    """The ID of ``stall-coordinator-recovery[=ID]`` (0 when not given); ValueError naming what is wrong."""
    raw = spec.partition("=")[2].strip() or "0"
    if not raw.isdigit():
        raise ValueError(f"--fault {shown(spec)}: {raw!r} is not a coordinator id (0, 1, ...)")
    if int(raw) not in ids:
        raise ValueError(f"--fault {shown(spec)}: no coordinator {int(raw)} (this engine has {len(ids)})")
    return int(raw)


@dataclass
class Spared:
    """What the other faults broke, which shedding leaves alone: an unload is their cure, and doctor should still
    find them."""

    topics: set[str] = field(default_factory=set)
    coordinators: set[int] = field(default_factory=set)


_T = TypeVar("_T", str, int)


def _next_after(last: Optional[_T], candidates: list[_T]) -> Optional[_T]:
    """The first of the sorted ``candidates`` after ``last``, wrapping around (None when there are none): the
    rotation goes on in order even as topics come and go."""
    for candidate in candidates:
        if last is None or candidate > last:
            return candidate
    return candidates[0] if candidates else None


class Shedder:
    """Bundle shedding on a running engine (``engine run --fault shed=SECONDS``): every ``period_s`` seconds,
    unload the next topic that has pending-ack stores or open transactions and the next coordinator, through the
    same engine calls as the REST unload (`reload_topic`, `reload_coordinator`), so each reopen is exactly what an
    operator's unload causes. ``say`` gets one line per unload, ``on_failure`` (default ``say``) one per failed
    unload, which is counted while the rotation goes on."""

    def __init__(self, engine: Engine, period_s: float, say: Callable[[str], None],
                 spared: Optional[Spared] = None, on_failure: Optional[Callable[[str], None]] = None,
                 mover: Optional[Callable[[str, Callable[[str], bool]], str]] = None):
        self.engine = engine
        # An engine of several brokers moves the bundle to another broker instead (Cluster.move)
        self.mover = mover
        self.period_s = period_s
        self.say = say
        self.on_failure = on_failure or say
        self.spared = spared or Spared()
        self.topic_unloads = 0
        self.coordinator_unloads = 0
        self.failures = 0
        self._last_topic: Optional[str] = None
        self._last_coordinator: Optional[int] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-shed", daemon=True)

    def start(self) -> "Shedder":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop after the unload in progress, if any; False if it is still running after ``timeout_s``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def counts(self) -> dict:
        return {"periodSeconds": self.period_s, "topicUnloads": self.topic_unloads,
                "coordinatorUnloads": self.coordinator_unloads, "failures": self.failures}

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.period_s):
                self.shed_once()
        except Exception:  # a reporting failure ends shedding, logged (not swallowed); the workload goes on
            log.exception("%s: load shedding stopped on an unexpected error", self.engine.directory)

    def shed_once(self) -> None:
        """One round: the next topic, then the next coordinator."""
        topics = [t for t in self.engine.transactional_topics() if t not in self.spared.topics]
        topic = _next_after(self._last_topic, topics)
        if topic is not None:
            self._last_topic = topic
            if self._unload(topic, lambda: self.mover(topic, self._is_spared) if self.mover else
                            _stores_reopened(self.engine.reload_topic(topic))):
                self.topic_unloads += 1
        if self._stop.is_set():
            return
        ids = [i for i in self.engine.coordinator_ids() if i not in self.spared.coordinators]
        tc_id = _next_after(self._last_coordinator, ids)
        if tc_id is not None:
            self._last_coordinator = tc_id
            partition = coordinator_assign_partition(tc_id)
            if self._unload(partition, lambda: self.mover(partition, self._is_spared) if self.mover else
                            _coordinator_reopened(self.engine, tc_id)):
                self.coordinator_unloads += 1

    def _is_spared(self, name: str) -> bool:
        tc_id = coordinator_of_assign_partition(name)
        return tc_id in self.spared.coordinators if tc_id is not None else name in self.spared.topics

    def _unload(self, name: str, unload: Callable[[], str]) -> bool:
        try:
            what = unload()
        except Exception as exc:  # noqa: BLE001 — reported and counted; the next round tries the next one
            self.failures += 1
            self.on_failure(f"shed: unloading {name} failed ({type(exc).__name__}: {exc}); shedding goes on")
            return False
        self.say(f"shed: unloaded {name} ({what})")
        return True


def _stores_reopened(count: int) -> str:
    return f"{count} pending-ack store{'' if count == 1 else 's'} reopened"


def _coordinator_reopened(engine: Engine, tc_id: int) -> str:
    engine.reload_coordinator(tc_id)
    return f"coordinator {tc_id} reopened"


def inject(engine: Engine, names: list[str], topic: str, timeout_ms: int,
           spared: Optional[Spared] = None) -> list[str]:
    """Apply the named faults (``FAULTS``) on a running engine; one line per fault saying what it did. What each
    broke is added to ``spared`` (see :class:`Spared`). ``shed`` is not a state set once: :class:`Shedder` runs it."""
    spared = spared if spared is not None else Spared()
    said = []
    for name in names:
        if fault_name(name) in (SHED, ROLLING_RESTART):  # run by threads beside the workload, not set once
            continue
        if name == "stuck-open":
            txns = []
            for _ in range(3):
                txn = engine.begin(timeout_ms, owner="fault:stuck-open")
                lose_timeout(engine, txn)  # before anything else, so even a short timeout cannot fire first
                spared.coordinators.add(txn[0])
                engine.produce(txn, topic, b"stuck-open")
                txns.append(txn)
            said.append(f"fault stuck-open: {', '.join(f'({m},{l})' for m, l in txns)} OPEN on {topic}, their "
                        f"{timeout_ms} ms timeouts lost")
        elif name == "hold-ending":
            txn = engine.begin(timeout_ms, owner="fault:hold-ending")
            engine.produce(txn, topic, b"hold-ending")
            spared.coordinators.add(txn[0])
            hold_ending(engine, txn, commit=True)
            said.append(f"fault hold-ending: ({txn[0]},{txn[1]}) held in COMMITTING on {topic}")
        elif fault_name(name) == "stall-buffer-recovery":
            stalled = name.partition("=")[2] or STALLED_TOPIC
            spared.topics.add(normalize_topic(stalled))
            txn = stall_buffer_recovery(engine, stalled)
            said.append(f"fault stall-buffer-recovery: {normalize_topic(stalled)} (after ({txn[0]},{txn[1]}) "
                        "committed on it) reloaded with a transaction-buffer recovery that never ends")
        elif fault_name(name) == STALL_COORDINATOR:
            tc_id = stalled_coordinator(name, engine.coordinator_ids())
            spared.coordinators.add(tc_id)  # shedding would end the stall: an unload is its cure
            engine.stall_coordinator_recovery(tc_id)
            said.append(f"fault stall-coordinator-recovery: coordinator {tc_id} reloaded with a log replay that does "
                        "not finish: its stats answer 404 until it is unloaded again")
        else:
            raise ValueError(f"--fault {name}: use one of {', '.join(FAULTS)}")
    return said
