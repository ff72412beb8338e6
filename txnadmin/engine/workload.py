"""A transactional workload on the engine: produce, consume-and-ack, commit/abort/time out.

Each worker runs transactions like a Pulsar client does (begin → produce → receive+ack in the txn
→ commit, abort, or walk away and let the coordinator time it out). Deterministic per seed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from .ops import Op, Sleep, drive, gather_op
from .engine import Engine
from .coordinator import CoordinatorNotReady
from .pending_ack import PendingAckConflict

log = logging.getLogger(__name__)

# Driver threads for the clients (see run_workload). One: the engine's Python work runs under one interpreter lock
# anyway, and every extra driver adds lock hand-offs between them. Measured in-process at 256 clients (batching on,
# alternating): 1 driver 2,464/2,799/2,745 txn/s against 4 drivers' 2,213/2,356/1,772, at 0.36-0.41 against
# 0.44-0.60 ms CPU per transaction; at 64 clients 2,248/2,138 against 1,905/1,848. A client's slow synchronous
# step (a read from disk, a buffer snapshot) holds the others for its duration; a wait that can be long is a parked
# operation instead (a send to an Initializing buffer, every durable write).
DEFAULT_DRIVERS = 1


@dataclass
class WorkloadSpec:
    rate: float = 200.0  # transactions per second, all workers together (0 = unlimited)
    concurrency: int = 8
    duration_s: float = 10.0
    topics: int = 2
    subscriptions: int = 2
    messages_per_txn: int = 2
    acks_per_txn: int = 2
    abort_ratio: float = 0.1
    timeout_ratio: float = 0.0
    txn_timeout_ms: int = 10_000
    message_bytes: int = 100
    seed: int = 1
    namespace: str = "public/default"
    drivers: int = 0  # threads the clients are spread over (0: DEFAULT_DRIVERS)
    client_version: Optional[str] = None  # set: each client is a producer on every topic, reporting this version

    def topic_names(self) -> list[str]:
        return [f"persistent://{self.namespace}/txn-topic-{i}" for i in range(self.topics)]

    def subscription_names(self) -> list[str]:
        return [f"sub-{i}" for i in range(self.subscriptions)]


@dataclass
class WorkloadStats:
    started: int = 0
    committed: int = 0
    aborted: int = 0
    left_open: int = 0
    produced: int = 0
    acked: int = 0
    errors: int = 0
    conflicts: int = 0
    last_error: str = ""
    committed_ids: list[tuple[int, int]] = field(default_factory=list)
    acked_positions: list[tuple[str, str, str]] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_json(self) -> dict:
        return {"started": self.started, "committed": self.committed, "aborted": self.aborted,
                "leftOpen": self.left_open, "produced": self.produced, "acked": self.acked,
                "conflicts": self.conflicts, "errors": self.errors, "lastError": self.last_error,
                "elapsedSeconds": round(self.elapsed_s, 3),
                "txnPerSecond": round(self.started / self.elapsed_s, 1) if self.elapsed_s else 0.0}


class _RateLimiter:
    def __init__(self, rate: float):
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def reserve(self) -> float:
        """Take the next start slot; the seconds to wait for it (0: start now)."""
        if not self.interval:
            return 0.0
        with self.lock:
            slot = max(self.next, time.monotonic())
            self.next = slot + self.interval
        return slot - time.monotonic()


def run_workload(engine: Engine, spec: WorkloadSpec, stop: Optional[threading.Event] = None,
                 on_progress: Optional[Callable[[WorkloadStats], None]] = None,
                 on_commit: Optional[Callable[[tuple[int, int], list, list], None]] = None) -> WorkloadStats:
    """Run until ``spec.duration_s`` passes or ``stop`` is set; returns the counters.

    ``on_commit(txn, produced, acked)`` is called after each successful commit (the CLI journals it so a
    kill -9 can be checked afterwards).

    Each client is an operation (:mod:`.ops`) running its transactions one after another; the clients are spread
    over a few driver threads (:func:`ops.drive`), each resuming whichever of its clients' writes became durable.
    A thread per client cost a lock wake-up and a GIL hand-off per durable step: at 256 clients the interpreter
    spent more time switching threads than running transactions.
    """
    stop = stop or threading.Event()
    stats = WorkloadStats()
    lock = threading.Lock()
    topics = spec.topic_names()
    subs = spec.subscription_names()
    for name in topics:
        for s in subs:
            engine.subscribe(name, s)
    limiter = _RateLimiter(spec.rate)
    deadline = time.monotonic() + spec.duration_s if spec.duration_s > 0 else float("inf")
    start = time.monotonic()

    def running() -> bool:
        return time.monotonic() < deadline and not stop.is_set()

    def client(index: int) -> Op:
        rng = random.Random(spec.seed * 1000 + index)
        while running():
            delay = limiter.reserve()
            if delay > 0:
                yield from _pause(delay, running)
                if not running():
                    break
            try:
                yield from _one_transaction(engine, spec, rng, topics, subs, stats, lock, on_commit)
            except Exception as exc:  # noqa: BLE001 — counted in stats.errors, as a client sees it and moves on
                with lock:
                    stats.errors += 1
                    stats.last_error = f"{type(exc).__name__}: {exc}"
                yield from _pause(0.01, running)

    producers = [f"workload-{i}" for i in range(spec.concurrency)] if spec.client_version else []
    for name in topics:
        for producer in producers:
            engine.topic(name).attach_producer(producer, spec.client_version or "")
    drivers = max(1, min(spec.drivers or DEFAULT_DRIVERS, spec.concurrency))
    clients = [client(i) for i in range(spec.concurrency)]
    threads = [threading.Thread(target=_drive, args=(clients[i::drivers],), daemon=True, name=f"workload-{i}")
               for i in range(drivers)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=0.25)
        stats.elapsed_s = time.monotonic() - start
        if on_progress:
            on_progress(stats)
        if stop.is_set():
            deadline = 0
    stats.elapsed_s = time.monotonic() - start
    for name in topics:  # the clients close: their producers leave the topics' stats
        for producer in producers:
            engine.topic(name).detach_producer(producer)
    return stats


def _drive(clients: list[Op]) -> None:
    for outcome in drive(clients):
        if isinstance(outcome, BaseException):  # a client's loop catches its transactions' errors: a bug
            log.error("a workload client stopped on an unexpected error", exc_info=outcome)


def _pause(seconds: float, running: Callable[[], bool]) -> Op:
    """Sleep ``seconds`` without holding the driver, in short steps so a stop is seen within 0.1 s."""
    until = time.monotonic() + seconds
    while running():
        left = until - time.monotonic()
        if left <= 0:
            return
        yield Sleep(min(left, 0.1))


def _one_transaction(engine, spec, rng, topics, subs, stats, lock, on_commit) -> Op:
    txn = yield from engine.begin_async(spec.txn_timeout_ms, owner="workload")
    with lock:
        stats.started += 1
    try:
        yield from _use_transaction(engine, spec, rng, topics, subs, stats, lock, on_commit, txn)
    except Exception as exc:
        # As a client application does: a failed step aborts the transaction instead of leaving it open (holding
        # its log records and acks) until its timeout. A coordinator being reloaded answers "not ready" until it
        # has recovered; Pulsar's client retries then, and so does this, for up to two seconds.
        for _attempt in range(20):
            try:
                yield from engine.abort_async(txn)
                break
            except CoordinatorNotReady:
                yield Sleep(0.1)
            except Exception as abort_exc:  # noqa: BLE001 — noted on the error re-raised below (ended meanwhile?)
                exc.add_note(f"aborting {txn} after the error failed too: {abort_exc}")
                break
        else:
            exc.add_note(f"aborting {txn} after the error failed: its coordinator stayed not ready; it will time out")
        raise exc


def _use_transaction(engine, spec, rng, topics, subs, stats, lock, on_commit, txn) -> Op:
    # one call instead of a generator of 64 (the generator cost about 3 % of the engine's CPU at 64 clients)
    payload = rng.randbytes(min(spec.message_bytes, 64)) * max(1, spec.message_bytes // 64)
    # As a Pulsar client with sendAsync / acknowledgeAsync: every send and the ack are issued at once and waited
    # for together before the commit (which waits for them, as the client's commit does), instead of one durable
    # wait after another.
    targets = [rng.choice(topics) for _ in range(spec.messages_per_txn)]
    pending = [engine.produce_async(txn, topic, payload) for topic in targets]
    messages, topic, sub = [], None, None
    if spec.acks_per_txn:
        topic, sub = rng.choice(topics), rng.choice(subs)
        messages = engine.receive(topic, sub, spec.acks_per_txn)
        if messages:
            pending.append(engine.ack_async(txn, topic, sub, [m.position for m in messages]))
    results = yield from gather_op(pending)
    sent = results[:len(targets)]
    with lock:
        stats.produced += sum(1 for r in sent if not isinstance(r, BaseException))
    acked = []
    if messages:
        outcome = results[-1]
        if isinstance(outcome, PendingAckConflict):
            # A redelivered message another transaction already holds: give up like a client would.
            yield from engine.abort_async(txn)
            with lock:
                stats.conflicts += 1
                stats.aborted += 1
            return
        if isinstance(outcome, BaseException):
            # The ack never reached the store (say its coordinator was reloading), so no abort will hand these
            # messages back: ask for them again, as a client's redeliverUnacknowledgedMessages does. Without
            # this the subscription's mark-delete stops behind them for good and its pending-ack log never trims.
            engine.redeliver(topic, sub)
            raise outcome
        acked = [(topic, sub, str(m.position)) for m in messages]
    for result in sent:
        if isinstance(result, BaseException):
            raise result
    produced = [(t, str(pos)) for t, pos in zip(targets, sent, strict=True)]
    roll = rng.random()
    if roll < spec.timeout_ratio:
        with lock:
            stats.left_open += 1
        return
    if roll < spec.timeout_ratio + spec.abort_ratio:
        yield from engine.abort_async(txn)
        with lock:
            stats.aborted += 1
        return
    yield from engine.commit_async(txn)
    with lock:
        stats.committed += 1
        stats.acked += len(acked)
    if on_commit:
        on_commit(txn, produced, acked)
