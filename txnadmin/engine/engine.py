"""The embedded engine: one directory, one writer process, Pulsar's transaction components on top.

Layers (imports only go downward): storage → managed ledger → buffered writer → transaction log /
pending-ack store / topic + transaction buffer → coordinator → this module, which plays the broker:
it owns the components, drives end-transaction across them, aborts timed-out transactions,
applies dynamic configuration and rolls/trims ledgers in a maintenance thread.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit
from typing import Any, Callable

from ..names import (
    coordinator_assign_partition, encodes_pending_ack_subscription, normalize_topic, pending_ack_topic,
    subscription_fits_store_name,
)
from .config import EngineConfig, brokers_without_process_start, read_dynamic
from .broker_metrics import ProcessCpu, ScrapeTimeGauges
from .coordinator_service import (  # noqa: F401 (EngineError, NotAcceptable, writer_config: re-exported)
    META_COORDINATORS, CoordinatorService, EngineError, NotAcceptable, NotFound, older_version, writer_config,
)
from .coordinator import (
    ABORTED, ABORTING, COMMITTED, COMMITTING, OPEN, STATUS_NAMES,
    InvalidTxnStatus, TransactionCoordinator, TransactionNotFound, TxnMeta,
)
from .ops import Op, run as run_op
from .managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from .older_brokers import BatchedEntryUnreadable, replayed
from .open_times import OpenTimes
from .pending_ack import PendingAckStore
from .pending_ack_metrics import PendingAckMetrics
from .tb_client_metrics import TransactionBufferClientMetrics
from .position import Position
from .preserver import (
    ABORTED as PRESERVED_ABORTED, COMMITTED as PRESERVED_COMMITTED, TransactionPreserver,
)
from .snapshot_metrics import SnapshotMetrics
from .storage import LedgerStorage
from .aborted_txn_processor import AbortedTxnProcessor
from .segmented_snapshot_processor import SegmentedSnapshotProcessor
from .single_snapshot_processor import SingleSnapshotProcessor
from .tb_snapshot import SnapshotService, segment_capacity
from .topic import Topic
from .writer_metrics import broker_writer_metrics

log = logging.getLogger(__name__)

META_TOPICS = "engine/topics/"
META_PENDING_ACK = "engine/pending-ack/"
META_ENGINE_ID = "engine/id"  # persistent identity: a downgrade checklist refuses another engine's


def _now_ms() -> int:
    return int(time.time() * 1000)


class Engine(CoordinatorService):
    def __init__(self, directory: Path, config: EngineConfig | None = None, *, read_only: bool = False,
                 clock_ms: Callable[[], int] = _now_ms, maintenance: bool = True,
                 host_of: Callable[[str], Any] | None = None):
        # Wall-clock seconds when this open began: /metrics' process_start_time_seconds, so a restart shows as a new
        # process (the broker's JVM start time in Pulsar), whatever the counters say.
        self.started_at = time.time()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config = config or EngineConfig.load(self.directory)
        self.read_only = read_only
        self.clock_ms = clock_ms
        # The broker a component opens on, given its topic (a coordinator: its assign partition): its flags
        # (`config`) and counters (`tc_metrics`, `ack_metrics`, `tb_client_metrics`, `tp_metrics`). One broker: the
        # engine itself; a cluster: the owner.
        self.host_of: Callable[[str], Any] = host_of or (lambda name: self)
        self.storage = LedgerStorage.open(self.directory, read_only=read_only,
                                          entry_log_size_limit=self.config.engineEntryLogSizeLimitBytes)
        self.factory = ManagedLedgerFactory(self.storage)
        self.engine_id = self._engine_id()
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry()
        # Pulsar labels writer metrics with the broker's advertised address: the host, no port.
        broker = urlsplit(self.config.engineBrokerServiceUrl).hostname or "127.0.0.1"
        self.tc_metrics, self.ack_metrics = broker_writer_metrics(self.registry, broker, older_version(self) is None)
        # The coordinators' counters are read from each coordinator at scrape time (ScrapeTimeGauges).
        self.registry.register(ScrapeTimeGauges(self))
        self.tb_client_metrics = TransactionBufferClientMetrics(self.registry)
        if not read_only:  # a stopped engine's view runs no broker: it has no process start to report
            from prometheus_client import Gauge

            # a one-broker engine is broker 0 of engineBrokersWithoutProcessStart
            if 0 not in brokers_without_process_start(self.config.engineBrokersWithoutProcessStart,
                                                      self.config.engineBrokers):
                Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                      registry=self.registry).set(self.started_at)
            self.registry.register(ProcessCpu())
        self.tp_metrics = PendingAckMetrics(self.registry)
        self._lock = threading.RLock()
        self.coordinators: dict[int, TransactionCoordinator] = {}
        # coordinators whose store is still replaying its log: a broker's admin handlers do not find them yet
        self.recovering_coordinators: set[int] = set()
        self.recovery_failures: dict[str, BatchedEntryUnreadable] = {}
        # per coordinator, what its recovery left COMMITTING/ABORTING: driven to the end once every topic and
        # pending-ack store is open too (_finish_recovered)
        self._pending_end: dict[int, list[TxnMeta]] = {}
        # Ends whose marker or pending-ack part failed (say a topic reloading under them), with when they last
        # failed: retried by the maintenance loop (retry_failed_ends), as Pulsar's coordinator retries them.
        self._failed_ends: dict[tuple[int, int], int] = {}
        self.preservers: dict[int, TransactionPreserver] = {}
        self._last_expiry_check = 0
        self.topics: dict[str, Topic] = {}
        self.snapshots = SnapshotService(self.factory, self.ml_config,
                                         shared_reader=self.config.engineTransactionBufferSharedSnapshotReader,
                                         metrics=SnapshotMetrics(self.registry))
        self.stores: dict[tuple[str, str], PendingAckStore] = {}
        # Read-only: stores in the metadata whose log could not be opened. Still listed (as a broker lists a topic it
        # has not loaded) with stats answering 404, so nobody takes them for deleted.
        self.unopened_stores: set[tuple[str, str]] = set()
        # Topics unloaded and not loaded again yet (engineUnloadLeavesTopicUnloaded): topic → the subscriptions whose
        # pending-ack stores closed with it. Still listed, as a broker lists a topic nobody has looked up since.
        self.unloaded_topics: dict[str, list[str]] = {}
        self.opens = OpenTimes(self.storage, read_only)  # each component's recoverStartTime across its opens
        self._next_tc = 0
        self._dynamic_seen = read_dynamic(self.directory)
        self._stop = threading.Event()
        self._maintenance: threading.Thread | None = None
        # Read-only (a stopped engine read for stats): every component is a view replayed from storage, which
        # takes no writes at all; nothing rolls, trims, recovers a pending end or records an open.
        self._open_all()
        self.opens.deferred = False
        if not read_only:
            if maintenance:
                self._maintenance = threading.Thread(target=self._maintain, name="engine-maintenance", daemon=True)
                self._maintenance.start()

    def _engine_id(self) -> str | None:
        """A random id made once per engine directory (None for an old engine opened read-only)."""
        raw = self.storage.meta_get(META_ENGINE_ID)
        if raw is None and not self.read_only:
            import uuid

            raw = uuid.uuid4().hex.encode()
            self.storage.meta_put(META_ENGINE_ID, raw)
        return raw.decode() if raw else None

    # -- configuration ----------------------------------------------------------------------
    def ml_config(self) -> ManagedLedgerConfig:
        return ManagedLedgerConfig(**self.config.ledger_rollover(), clock=lambda: float(self.clock_ms()))

    # -- opening ----------------------------------------------------------------------------
    def _open_all(self) -> None:
        if self.storage.meta_get(META_COORDINATORS) is None and not self.read_only:
            self.storage.meta_put(META_COORDINATORS, str(self.config.transactionCoordinatorCount).encode())
        for tc_id in range(self.coordinator_count()):
            self._viewing(self._open_coordinator, tc_id)
        for key in self.storage.meta_list(META_TOPICS):
            if (raw := self.storage.meta_get(key)) is not None:  # None: deleted since listed
                self._viewing(self._open_topic, json.loads(raw)["topic"])
        for key in self.storage.meta_list(META_PENDING_ACK):
            if (raw := self.storage.meta_get(key)) is not None:
                info = json.loads(raw)
                # recorded under a version that named it, and unnameable under the one claimed now: left unloaded
                if not subscription_fits_store_name(info["subscription"], self.encodes_subscription) or \
                        not self._viewing(self._open_store, info["topic"], info["subscription"]):
                    self.unopened_stores.add((info["topic"], info["subscription"]))
        self.opens.save()  # before any component takes a write (the constructor has not returned yet)
        if not self.read_only:
            for tc_id in list(self.coordinators):
                self._finish_recovered(tc_id)

    def _viewing(self, open_fn, *args) -> bool:
        """Open one component (True if opened); read-only, one whose managed ledger is missing is left unloaded
        (its stats answer 404, which `downgrade` treats as "not loaded", never as done)."""
        if not self.read_only:
            open_fn(*args)
            return True
        from .storage import LedgerNotFoundError

        try:
            open_fn(*args)
        except LedgerNotFoundError:
            return False
        return True

    def _open_topic(self, name: str) -> Topic:
        topic = self._new_topic(normalize_topic(name))
        topic.recover(self.clock_ms)
        self.topics[topic.name] = topic
        return topic

    def _new_topic(self, name: str) -> Topic:
        """A topic object under the current settings, not yet recovered."""
        return Topic(self.factory, name, self.ml_config(), self._aborted_txn_processor(name),
                     snapshot_every=self.config.transactionBufferSnapshotMaxTransactionCount,
                     snapshot_min_ms=self.config.transactionBufferSnapshotMinTimeInMillis)

    def _aborted_txn_processor(self, topic: str) -> AbortedTxnProcessor:
        """The processor ``transactionBufferSegmentedSnapshotEnabled`` selects (read when the topic opens)."""
        config = self.config
        if config.transactionBufferSegmentedSnapshotEnabled:
            return SegmentedSnapshotProcessor(
                topic, self.snapshots, self.clock_ms,
                capacity=segment_capacity(config.transactionBufferSnapshotSegmentSize, topic),
                on_demand=config.engineTransactionBufferSegmentsOnDemand,
                cache_segments=config.engineTransactionBufferSegmentCacheSize)
        return SingleSnapshotProcessor(topic, self.snapshots, self.clock_ms)

    @property
    def version(self) -> str:
        """The claimed broker version, when this engine plays one broker (what a component opening on it reads)."""
        return self.config.engineBrokerVersion

    @property
    def encodes_subscription(self) -> bool:
        """Whether the claimed broker version URL-encodes subscriptions in pending-ack store names (#25727)."""
        return encodes_pending_ack_subscription(self.config.engineBrokerVersion)

    def store_topic(self, topic: str, subscription: str) -> str:
        """The pending-ack store's topic name, as the claimed broker version gives it."""
        return pending_ack_topic(topic, subscription, self.encodes_subscription)

    def _open_store(self, topic: str, subscription: str) -> PendingAckStore:
        if not subscription_fits_store_name(subscription, self.encodes_subscription):
            # Pulsar's TopicName refuses the name (its extra segments read as a v1 name): the store never opens
            raise EngineError(f"Invalid topic name: {pending_ack_topic(topic, subscription)} (before PR #25727, in "
                              f"4.2.2 and 5.0.0, a subscription holding '/' cannot open its pending-ack store; this "
                              f"engine claims {self.config.engineBrokerVersion})")
        host = self.host_of(topic)
        older = older_version(host)
        wc = writer_config(host.config, "pending-ack", older)
        store = PendingAckStore(self.factory, topic, subscription, self.ml_config(), wc, host.ack_metrics,
                                self.config.transactionPendingAckLogIndexMinLag, self.encodes_subscription)
        topic_obj = self.topics.get(topic)
        # Replay checks acks against the subscription, as Pulsar's handle*AckRecover do. A read-only view judges by
        # the subscription's existing cursor too (or the view would report acks the subscription already has), but
        # neither creates the cursor nor re-applies a logged COMMIT to it: both would be writes.
        if topic_obj is None:
            sub = None
        elif self.read_only:
            sub = topic_obj.ledger.cursors().get(subscription)
        else:
            sub = topic_obj.subscription(subscription)
        key = "pending-ack/" + store.store_topic
        replayed(key, f"pending-ack store of {topic} / {subscription}",
                 lambda: store.recover(self.clock_ms, sub, apply_commits=not self.read_only, older=older),
                 self.recovery_failures, None)
        self.opens.opened(key, store)
        self.stores[(topic, subscription)] = store
        return store

    def topic(self, name: str, create: bool = True) -> Topic:
        full = normalize_topic(name)
        # Under the engine lock even when open: a reload holds it, so nobody is handed the topic it is closing.
        with self._lock:
            topic = self.topics.get(full)
            if topic is None and create and self._load_unloaded(full):
                return self.topics[full]  # a client's lookup loads an unloaded topic (as a reconnecting client does)
            if topic is None:
                if not create:
                    raise NotFound(f"Topic not found {full}")
                self._writable()
                self.storage.meta_put(META_TOPICS + full, json.dumps({"topic": full}).encode())
                topic = self._open_topic(full)
            return topic

    def store(self, topic: str, subscription: str, create: bool = True) -> PendingAckStore:
        full = normalize_topic(topic)
        with self._lock:
            store = self.stores.get((full, subscription))
            if store is None and create and self._load_unloaded(full):
                store = self.stores.get((full, subscription))
            if store is None:
                if not create:
                    raise NotFound(f"Topic not found {full}")
                self._writable()
                if not subscription_fits_store_name(subscription, self.encodes_subscription):
                    self._open_store(full, subscription)  # raises, before anything is recorded
                key = META_PENDING_ACK + self.store_topic(full, subscription)
                self.storage.meta_put(key, json.dumps({"topic": full, "subscription": subscription}).encode())
                store = self._open_store(full, subscription)
            return store

    def _writable(self) -> None:
        if self.read_only:
            raise EngineError(f"engine {self.directory} is open read-only")

    # -- transactions (what a Pulsar client does) --------------------------------------------
    def begin(self, timeout_ms: int | None = None, owner: str | None = None, tc_id: int | None = None) -> tuple[int, int]:
        return run_op(self.begin_async(timeout_ms, owner, tc_id))

    def begin_async(self, timeout_ms: int | None = None, owner: str | None = None,
                    tc_id: int | None = None) -> Op:
        """:meth:`begin` as an operation (see :mod:`.ops`): the NEW record queued, then awaited."""
        self._writable()
        with self._lock:
            if tc_id is None:
                tc_id = self._next_tc % len(self.coordinators)
                self._next_tc += 1
        tc = self.coordinator(tc_id)
        meta = yield from tc.new_transaction_async(timeout_ms or self.config.engineDefaultTransactionTimeoutMillis,
                                                   owner)
        return meta.txn_id

    def produce(self, txn: tuple[int, int], topic: str, payload: bytes) -> Position:
        return run_op(self.produce_async(txn, topic, payload))

    def produce_async(self, txn: tuple[int, int], topic: str, payload: bytes) -> Op:
        """A transactional send as an operation for :func:`ops.gather` (a client's ``sendAsync``): the topic's
        ADD_PARTITION durable first (the coordinator must know the partition before it holds a message of the
        transaction), then the message; its result is the message's position."""
        tc = self.coordinator(txn[0])
        t = self.topic(topic)
        meta = tc.get(txn[1])
        # Outside the end lock: a buffer still recovering holds the send (up to the send timeout), and a timeout
        # abort of the same transaction must not wait behind it.
        yield from t.wait_ready_async()
        yield tc.register_partition(txn[1], t.name)
        # Under the transaction's end lock: a message is queued before the end's marker or not at all. One
        # published after an abort (say by the timeout) would sit in the buffer as ongoing forever and hold
        # every reader of the topic at its max read position. Only the queueing is under the lock.
        with meta.end_lock:
            _require_open(meta)
            wait = t.publish_async(payload, txn)
        return (yield wait)

    def publish(self, topic: str, payload: bytes) -> Position:
        return self.topic(topic).publish(payload)

    def subscribe(self, topic: str, subscription: str) -> None:
        self.topic(topic).subscription(subscription)

    def receive(self, topic: str, subscription: str, max_messages: int = 100):
        """Committed messages for a consumer, without those another open transaction has acked."""
        t = self.topic(topic)
        messages = t.receive(subscription, max_messages)
        store = self.stores.get((t.name, subscription))
        if store is None:
            return messages
        return [m for m in messages if not store.is_held(m.position)]

    def redeliver(self, topic: str, subscription: str) -> None:
        """A consumer's redeliverUnacknowledgedMessages: dispatch again from the mark-delete position (messages an
        open transaction holds stay filtered out by :meth:`receive`)."""
        self.topic(topic).redeliver(subscription)

    def ack(self, txn: tuple[int, int], topic: str, subscription: str,
            positions: list[Position | tuple[Position, list[int] | None, int | None]], cumulative: bool = False) -> None:
        run_op(self.ack_async(txn, topic, subscription, positions, cumulative))

    def ack_async(self, txn: tuple[int, int], topic: str, subscription: str,
                  positions: list[Position | tuple[Position, list[int] | None, int | None]],
                  cumulative: bool = False) -> Op:
        """A transactional ack as an operation for :func:`ops.gather` (a client's ``acknowledgeAsync``): the
        subscription's ADD_SUBSCRIPTION durable first, then the pending-ack store's ACK record."""
        tc = self.coordinator(txn[0])
        t = self.topic(topic)
        meta = tc.get(txn[1])
        items = [p if isinstance(p, tuple) else (p, None, None) for p in positions]
        yield tc.register_subscription(txn[1], t.name, subscription)
        with meta.end_lock:  # as in produce: an ack queued after the end would stay pending in the store forever
            _require_open(meta)
            wait = self.store(t.name, subscription).ack_async(txn, items, cumulative, t.subscription(subscription))
        yield wait

    def commit(self, txn: tuple[int, int], client_name: str | None = None) -> str:
        return self.end_transaction(txn, commit=True, client_name=client_name)

    def abort(self, txn: tuple[int, int], client_name: str | None = None) -> str:
        return self.end_transaction(txn, commit=False, client_name=client_name)

    def commit_async(self, txn: tuple[int, int], client_name: str | None = None) -> Op:
        return self.end_transaction_async(txn, commit=True, client_name=client_name)

    def abort_async(self, txn: tuple[int, int], client_name: str | None = None) -> Op:
        return self.end_transaction_async(txn, commit=False, client_name=client_name)

    def end_transaction(self, txn: tuple[int, int], commit: bool, client_name: str | None = None) -> str:
        """OPEN → COMMITTING/ABORTING, markers and pending-ack ends everywhere, then the terminal state.

        Returns the final status. With a client name and the PIP-255 preserver on, a retry of an
        already-ended transaction answers with its outcome instead of "not found".
        """
        return run_op(self.end_transaction_async(txn, commit, client_name))

    def end_transaction_async(self, txn: tuple[int, int], commit: bool, client_name: str | None = None) -> Op:
        """:meth:`end_transaction` as an operation (see :mod:`.ops`). The transaction's end lock is held across its
        waits, as the blocking call holds it: run by a driver, no other operation of that driver may end or use the
        same transaction meanwhile (a client's operations on one transaction come one after another)."""
        tc = self.coordinator(txn[0])
        preserver = self.preservers.get(txn[0])
        try:
            meta = tc.get(txn[1])
        except TransactionNotFound:
            preserved = preserver.lookup(txn, client_name) if (preserver and client_name) else None
            if preserved is None:
                raise
            wanted = PRESERVED_COMMITTED if commit else PRESERVED_ABORTED
            if preserved.status != wanted:
                raise InvalidTxnStatus(
                    f"Transaction ({txn[0]},{txn[1]}) is already {preserved.status.lower()}; cannot "
                    f"{'commit' if commit else 'abort'} it"
                ) from None
            return preserved.status
        target, final = (COMMITTING, COMMITTED) if commit else (ABORTING, ABORTED)
        with meta.end_lock:
            if meta.status == final:
                return STATUS_NAMES[final]  # a concurrent end of the same kind finished it
            if meta.status == OPEN:
                yield from tc.update_status_async(txn[1], target, OPEN)
            elif meta.status != target:
                raise InvalidTxnStatus(
                    f"Expect Txn {meta} to be in OPEN status but it is in {meta.status_name} status"
                )
            if preserver and client_name:
                # Durable before the final record: a crash after this point still answers retries right.
                preserver.preserve(client_name, txn, PRESERVED_COMMITTED if commit else PRESERVED_ABORTED)
            try:
                yield from self._drive_end_async(tc, meta, commit)
            except Exception:
                with self._lock:
                    self._failed_ends[txn] = self.clock_ms()
                raise
        with self._lock:
            self._failed_ends.pop(txn, None)
        return STATUS_NAMES[final]

    def _drive_end(self, tc: TransactionCoordinator, meta: TxnMeta, commit: bool) -> None:
        run_op(self._drive_end_async(tc, meta, commit))

    def _drive_end_async(self, tc: TransactionCoordinator, meta: TxnMeta, commit: bool) -> Op:
        txn = meta.txn_id
        # The coordinator's broker sends the ends (its transaction-buffer client counts them); each store's counts
        client = self.host_of(coordinator_assign_partition(tc.tc_id)).tb_client_metrics
        # Every marker and every pending-ack end is written at once and then awaited, as Pulsar's broker sends
        # them all and waits for all: one group commit instead of one sync per topic and subscription.
        # Each end sent is one transaction-buffer client request (Pulsar records markers and subscription ends alike).
        waits: list[tuple] = []
        failure: BaseException | None = None
        sent = [(topic, None) for topic in list(meta.produced_partitions)] + list(meta.acked_partitions)
        for topic, sub in sent:
            started = time.perf_counter_ns()
            client.sent()
            try:
                with self._lock:  # a delete of the topic or subscription comes wholly before or after the queueing
                    t = self._end_destination(topic, sub)
                    if t is not None and sub is None:
                        waits.append((topic, None, None, started, t.end_transaction_async(txn, commit)))
                    elif t is not None and sub is not None:
                        waits.append((topic, t, sub, started, self.store(t.name, sub).end_async(
                            txn, commit, t.subscription(sub))))
            except Exception:
                client.answered(topic, commit, False, time.perf_counter_ns() - started)
                for _ in waits:  # sent, but nobody will wait for their answers now
                    client.unwatched()
                raise
            if t is None:
                # Pulsar's broker answers an end on a topic or subscription that no longer exists with success and
                # touches nothing (PR #11304): the end is done there, and what was deleted stays deleted.
                log.info("transaction %s: %s no longer exists, nothing to end there", txn,
                         topic if sub is None else f"subscription {sub} of {topic}")
                client.answered(topic, commit, True, time.perf_counter_ns() - started)
        for topic, t, sub, started, finish in waits:
            try:
                yield finish
            except Exception as exc:  # noqa: BLE001 — wait for the others too, then raise the first failure
                failure = failure or exc
                nanos = time.perf_counter_ns() - started
                client.answered(topic, commit, False, nanos)
                if t is not None:
                    self.host_of(t.name).tp_metrics.record_end(t.name, sub, commit, False, nanos)
                continue
            nanos = time.perf_counter_ns() - started
            client.answered(topic, commit, True, nanos)
            if t is not None:
                self.host_of(t.name).tp_metrics.record_end(t.name, sub, commit, True, nanos)
                if not commit:
                    t.redeliver(sub)
        if failure is not None:
            raise failure
        yield from tc.update_status_async(meta.seq, COMMITTED if commit else ABORTED,
                                          COMMITTING if commit else ABORTING)

    def _end_destination(self, topic: str, sub: str | None) -> Topic | None:
        """The open topic an end of ``topic`` (or of its subscription ``sub``) goes to, or None when the topic or
        the subscription no longer exists (deleted after the transaction used it). Under the engine lock."""
        full = normalize_topic(topic)
        self._load_unloaded(full)  # the coordinator's end reaches the topic through a lookup, which loads it
        t = self.topics.get(full)
        if t is None or (sub is not None and t.ledger.cursor_named(sub) is None):
            return None
        return t

    # -- operator actions --------------------------------------------------------------------
    def _topic_to_delete_from(self, full: str):
        """The open topic a delete acts on (under the engine lock); refuses a read-only engine and unknown topics."""
        self._writable()
        self._load_unloaded(full)  # Pulsar's delete looks the topic up first, which loads it
        owner = self.topics.get(full)
        if owner is None:
            raise NotFound(f"Topic not found {full}")
        return owner

    def delete_subscription(self, topic: str, subscription: str) -> None:
        """Delete a subscription and its pending-ack store (its managed ledger and every ledger of it)."""
        full = normalize_topic(topic)
        with self._lock:
            owner = self._topic_to_delete_from(full)
            if subscription not in owner.subscriptions() and (full, subscription) not in self.stores:
                raise NotFound("Subscription not found")
            self._drop_store(full, subscription)
            owner.ledger.delete_cursor(subscription)

    def delete_topic(self, topic: str) -> None:
        """Delete a topic with its subscriptions and their pending-ack stores (as `topics delete -f` does)."""
        full = normalize_topic(topic)
        with self._lock:
            owner = self._topic_to_delete_from(full)
            for key in [k for k in self.stores if k[0] == full]:
                self._drop_store(*key)
            self.topics.pop(full).close()
            self.factory.delete(owner.ledger.name)
            self.storage.meta_delete(META_TOPICS + full)

    def _drop_store(self, topic: str, subscription: str) -> None:
        store = self.stores.pop((topic, subscription), None)
        if store is not None:
            store.close()
            self.factory.delete(store.name)
        name = self.store_topic(topic, subscription)
        self.storage.meta_put_many({META_PENDING_ACK + name: None, self.opens.forget("pending-ack/" + name): None})

    def reload_topic(self, topic: str) -> int:
        """Unload a topic: its transaction buffer and pending-ack stores reopen (and re-read batch flags). Returns how
        many pending-ack stores reopened."""
        full = normalize_topic(topic)
        with self._lock:
            if full not in self.topics:
                raise NotFound(f"Topic not found {full}")
            stores = [k for k in self.stores if k[0] == full]
            for key in stores:
                self.stores.pop(key).close()
                self._open_store(*key)
            self.topics.pop(full).close()
            self._open_topic(full)
            return len(stores)

    def unload_topic(self, topic: str) -> int:
        """An operator's unload (`topics unload`, or a bundle move): by default the topic loads again at once
        (:meth:`reload_topic`); with ``engineUnloadLeavesTopicUnloaded`` it stays closed, as on Pulsar, until
        something looks it up (:meth:`close_topic`). Returns how many pending-ack stores closed or reopened."""
        if self.config.engineUnloadLeavesTopicUnloaded:
            return self.close_topic(topic)
        return self.reload_topic(topic)

    def close_topic(self, topic: str) -> int:
        """Unload a topic and leave it unloaded, with its pending-ack stores closed: Pulsar loads a topic again only
        when something looks it up (a client, an end reaching it, the v2 topic stats; :meth:`load_topic`). Meanwhile
        the transactions endpoints answer 404 "Topic not found" for it. Returns how many stores closed."""
        full = normalize_topic(topic)
        with self._lock:
            self._writable()
            if full in self.unloaded_topics:
                return 0  # already unloaded: nothing open to close
            if full not in self.topics:
                raise NotFound(f"Topic not found {full}")
            subs = self._close_with_stores(full)
            self.unloaded_topics[full] = subs
            return len(subs)

    def _close_with_stores(self, full: str) -> list[str]:
        """Close an open topic and its pending-ack stores (under the engine lock); the stores' subscriptions."""
        subs = [sub for name, sub in self.stores if name == full]
        for sub in subs:
            self.stores.pop((full, sub)).close()
        self.topics.pop(full).close()
        return subs

    def load_topic(self, topic: str) -> bool:
        """Load a topic left unloaded (what Pulsar's getTopicIfExists does on its owner): it and its pending-ack
        stores reopen, with new recoverStartTimes. False when it was not unloaded (loaded, or unknown)."""
        with self._lock:
            return self._load_unloaded(normalize_topic(topic))

    def _load_unloaded(self, full: str) -> bool:
        """Under the engine lock."""
        subs = self.unloaded_topics.pop(full, None)
        if subs is None:
            return False
        self._open_topic(full)
        for sub in subs:  # after the topic: each store replays against its reloaded subscription
            self._open_store(full, sub)
        return True

    def transactional_topics(self) -> list[str]:
        """Loaded topics with a pending-ack store or an ongoing transaction, sorted: what bundle shedding moves
        among those that matter to transactions (``engine run --fault shed``)."""
        with self._lock:
            names = {topic for topic, _ in self.stores if topic in self.topics}
            names.update(name for name, t in self.topics.items() if t.buffer.ongoing)
        return sorted(names)

    def stall_topic_recovery(self, topic: str) -> None:
        """Unload a topic and load it again with a transaction-buffer recovery that starts and never ends (the
        `engine run --fault stall-buffer-recovery` verb; see :meth:`Topic.start_stalled_recovery`). Unloading it
        again (:meth:`reload_topic`) recovers it for real."""
        full = normalize_topic(topic)
        with self._lock:
            self._writable()
            if full not in self.topics:
                raise NotFound(f"Topic not found {full}")
            subs = self._close_with_stores(full)
            stalled = self._new_topic(full)
            stalled.start_stalled_recovery(self.clock_ms)
            self.topics[full] = stalled
            for sub in subs:  # their pending-ack stores recover as usual, on the reloaded topic's cursors
                self._open_store(full, sub)

    def apply_dynamic_config(self) -> bool:
        """Pick up `update-dynamic-config` changes. Like Pulsar, open stores keep the flag they read at open."""
        values = read_dynamic(self.directory)
        if values == self._dynamic_seen:
            return False
        self._dynamic_seen = values
        fresh = EngineConfig.load(self.directory)
        for key in EngineConfig.DYNAMIC_KEYS:
            setattr(self.config, key, getattr(fresh, key))
        return True

    def maintenance_tick(self, sweep_ledgers: bool = True) -> None:
        self.abort_timed_out()
        self.retry_failed_ends()
        now = self.clock_ms()
        if self.preservers and now - self._last_expiry_check >= self.config.transactionMetaExpireCheckIntervalInSecond * 1000:
            self._last_expiry_check = now
            self.expire_preserved()
        self.apply_dynamic_config()
        if sweep_ledgers:  # about once a second: both visit every topic, and an engine may hold tens of thousands
            self.snapshot_transaction_buffers(now)
            self.sweep_ledgers()

    def snapshot_transaction_buffers(self, now: int | None = None) -> int:
        """Timed transaction-buffer snapshots: topics with changes, past the minimum interval."""
        now = self.clock_ms() if now is None else now
        with self._lock:
            topics = list(self.topics.values())
        return sum(1 for t in topics if t.snapshot_tick(now))

    def sweep_ledgers(self) -> None:
        """Roll over full ledgers and trim consumed ones; each managed ledger takes only its own lock."""
        with self._lock:
            mls = self._managed_ledgers()
            stores = [(store, self.topics.get(key[0]), key[1]) for key, store in self.stores.items()]
        trimmed = set()
        for ml in mls:
            if ml is None:
                # Topics (and the subscriptions' lazily applied commits) are flushed by now: each store's log may
                # drop what its subscription's persisted mark-delete covers, as Pulsar's clearUselessLogData does.
                for store, topic, subscription in stores:
                    cursor = topic.ledger.cursor_named(subscription) if topic is not None else None
                    if cursor is not None:
                        store.clear_useless_log_data(cursor.persisted_mark_delete_position)
                continue
            ml.flush_cursors()
            ml.maybe_rollover()
            if ml.trim():
                trimmed.add(ml.name)
        with self._lock:
            topics = [t for t in self.topics.values() if t.ledger.name in trimmed]
        # Topic ledgers are trimmed only here, so this is where aborted ids whose marker ledger went are
        # forgotten (segments tombstoned); Pulsar checks after every marker because its deletes are asynchronous.
        for topic in topics:
            topic.trim_expired_aborts()

    def tc_records_written(self) -> int:
        return sum(tc.log.records_written for tc in self.coordinators.values())

    def _managed_ledgers(self) -> list:
        """Every managed ledger, topics before pending-ack stores, with None between them (see sweep_ledgers): a
        subscription's cursor is persisted before its store's log is cleaned behind it."""
        mls: list = [tc.log.ledger for tc in self.coordinators.values()]
        mls += [t.ledger for t in self.topics.values()]
        mls.append(None)
        mls += [s.ledger for s in self.stores.values()]
        mls += self.snapshots.managed_ledgers()
        return mls

    def _maintain(self) -> None:
        interval = self.config.engineTimeoutCheckIntervalMillis / 1000
        ticks = 0
        failing: str | None = None  # the failure being repeated, logged once (the loop ticks ten times a second)
        while not self._stop.wait(interval):
            ticks += 1
            try:
                # Timeouts every tick (Pulsar: a 100 ms wheel); the ledger sweep about once a second, since
                # it visits every managed ledger and an engine may hold tens of thousands.
                self.maintenance_tick(sweep_ledgers=ticks % max(1, round(1 / interval)) == 0)
            except Exception as exc:  # keep the broker loop alive; the next tick retries
                if repr(exc) != failing:
                    log.exception("%s: engine maintenance failed (timeouts, snapshots, ledger rollover and trim "
                                  "wait for the next tick, which retries)", self.directory)
                    failing = repr(exc)
                else:
                    log.debug("%s: engine maintenance failed again: %r", self.directory, exc)
            else:
                if failing is not None:
                    log.info("%s: engine maintenance works again", self.directory)
                    failing = None

    def close(self) -> None:
        self._stop.set()
        if self._maintenance:
            self._maintenance.join(timeout=5)
        with self._lock:
            for tc in self.coordinators.values():
                tc.close()
            for preserver in self.preservers.values():
                preserver.close()
            for store in self.stores.values():
                store.close()
            for topic in self.topics.values():
                topic.close()
            self.snapshots.close()
        self.storage.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _require_open(meta: TxnMeta) -> None:
    if meta.status != OPEN:
        raise InvalidTxnStatus(f"Expect Txn {meta} to be in OPEN status but it is in {meta.status_name} status")
