"""The coordinator-service role of a broker (Pulsar's ``TransactionMetadataStoreService``): it opens, reloads and
scales the coordinators, aborts timed-out transactions and drives again the ends that failed part-way.

:class:`Engine` takes the role by inheriting :class:`CoordinatorService`, which works on the engine's own state
(its coordinators, preservers, lock and storage); kept apart so the broker module stays about the broker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..names import coordinator_assign_partition, reads_batched_entries
from .buffered_writer import BufferedWriterConfig
from .config import EngineConfig
from .coordinator import ABORTING, COMMITTING, CoordinatorError, TransactionCoordinator
from .older_brokers import BatchedEntryUnreadable, replayed
from .preserver import TransactionPreserver, preserver_log_name
from .transaction_log import TransactionLog

if TYPE_CHECKING:
    import threading
    from typing import Any, Callable

    from .coordinator import TxnMeta
    from .managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
    from .open_times import OpenTimes
    from .storage import LedgerStorage
    from .writer_metrics import BufferedWriterMetrics

log = logging.getLogger(__name__)

META_COORDINATORS = "engine/coordinators"


class EngineError(Exception):
    """Base of the engine's own errors; the admin layer (admin/local.py) maps each to an HTTP status."""


class NotFound(EngineError):
    """No such coordinator, topic, subscription or store."""


class NotAcceptable(EngineError):
    """A request the engine refuses as it stands (e.g. scaling coordinators down)."""


def older_version(host: Any) -> str | None:
    """The version of ``host`` (a broker, or a one-broker engine) when it lacks PIP-160's reader and writer."""
    version = host.version
    return None if reads_batched_entries(version) else version


def writer_config(config: EngineConfig, component: str, older: str | None = None) -> BufferedWriterConfig:
    """The buffered writer's settings on a broker with ``config``; a broker older than PIP-160 (``older``) has no
    batching writer whatever its configuration says."""
    prefix = "transactionLogBatchedWrite" if component == "tc" else "transactionPendingAckBatchedWrite"
    return BufferedWriterConfig(
        enabled=getattr(config, prefix + "Enabled") and older is None,
        max_records=getattr(config, prefix + "MaxRecords"),
        max_size=getattr(config, prefix + "MaxSize"),
        max_delay_ms=getattr(config, prefix + "MaxDelayInMillis"),
        key_prefix=prefix,  # so a pending-ack writer's error names the pending-ack key, not the coordinator's
    )


class CoordinatorService:
    """The coordinators of one engine; mixed into :class:`~txnadmin.engine.engine.Engine`, whose attributes it uses."""

    # What the engine provides (set in Engine.__init__), declared for mypy.
    coordinators: dict[int, TransactionCoordinator]
    recovering_coordinators: set[int]
    recovery_failures: dict[str, BatchedEntryUnreadable]  # "tc/N" or "pending-ack/<store topic>" -> why it failed
    preservers: dict[int, TransactionPreserver]
    _pending_end: dict[int, list[TxnMeta]]
    _failed_ends: dict[tuple[int, int], int]
    if TYPE_CHECKING:  # the rest of the engine this role works with
        _lock: threading.RLock
        clock_ms: Callable[[], int]
        config: EngineConfig
        factory: ManagedLedgerFactory
        storage: LedgerStorage
        read_only: bool
        tc_metrics: BufferedWriterMetrics
        host_of: Callable[[str], Any]
        opens: OpenTimes

        def ml_config(self) -> ManagedLedgerConfig: ...
        def _writable(self) -> None: ...
        def _drive_end(self, tc: TransactionCoordinator, meta: TxnMeta, commit: bool) -> None: ...
        def end_transaction(self, txn: tuple[int, int], commit: bool, client_name: str | None = None) -> str: ...

    def coordinator_count(self) -> int:
        raw = self.storage.meta_get(META_COORDINATORS)
        return int(raw) if raw else self.config.transactionCoordinatorCount

    def _open_coordinator(self, tc_id: int) -> TransactionCoordinator:
        host = self.host_of(coordinator_assign_partition(tc_id))
        older = older_version(host)
        wc = writer_config(host.config, "tc", older)
        txn_log = TransactionLog(self.factory, tc_id, self.ml_config(), wc, host.tc_metrics)
        tc = TransactionCoordinator(tc_id, txn_log, self.clock_ms)
        if self.config.transactionMetaPersistCount > 0 and not (self.read_only and not self.factory.exists(
                preserver_log_name(tc_id))):
            old = self.preservers.pop(tc_id, None)
            if old:
                old.close()
            self.preservers[tc_id] = TransactionPreserver(
                self.factory, tc_id, per_client=self.config.transactionMetaPersistCount,
                retention_ms=int(self.config.transactionMetaPersistTimeInHour * 3_600_000),
                max_total=self.config.engineTransactionMetaPersistMaxTotal, clock_ms=self.clock_ms,
                ml_config=self.ml_config())
        key = f"tc/{tc_id}"
        # A failed replay keeps the store out of the admin handlers' map (loaded_coordinator): 404 until a broker
        # that can read the entry opens it (an upgrade of this one, or a move to another), as in Pulsar 2.10
        self._pending_end[tc_id] = replayed(key, f"transaction coordinator {tc_id}", lambda: tc.recover(older),
                                            self.recovery_failures, [])
        self.opens.opened(key, tc)
        self.coordinators[tc_id] = tc
        return tc

    def _finish_recovered(self, tc_id: int) -> None:
        tc = self.coordinators[tc_id]
        for meta in self._pending_end.pop(tc_id, []):
            self._drive_end(tc, meta, commit=meta.status == COMMITTING)

    def coordinator_ids(self) -> list[int]:
        with self._lock:
            return sorted(self.coordinators)

    def coordinator(self, tc_id: int) -> TransactionCoordinator:
        tc = self.coordinators.get(tc_id)
        if tc is None:
            raise NotFound(f"Transaction coordinator not found! coordinator id : {tc_id}")
        return tc

    def loaded_coordinator(self, tc_id: int) -> TransactionCoordinator:
        """The coordinator as a broker's admin handlers find it: a store enters their map only once it has replayed
        its log, so while it recovers (after a failover) its stats answer 404 like a coordinator that is not there."""
        if tc_id in self.recovering_coordinators or f"tc/{tc_id}" in self.recovery_failures:
            raise NotFound(f"Transaction coordinator not found! coordinator id : {tc_id}")
        return self.coordinator(tc_id)

    def retry_failed_ends(self, now_ms: int | None = None) -> int:
        """Drive again each end that failed part-way, a second after it failed; returns how many finished.

        Pulsar's TransactionMetadataStoreService does the same (a retry timer, endTransactionRetryIntervalTime =
        1 s): a transaction left COMMITTING or ABORTING keeps its acks held in the pending-ack stores, so its
        subscriptions' mark-delete and the stores' logs could never move past it (a downgrade `wait` that never
        ends). An end its client is still driving (its end lock held) is left to the client."""
        now = self.clock_ms() if now_ms is None else now_ms
        with self._lock:
            due = [txn for txn, failed_at in self._failed_ends.items() if now - failed_at >= 1000]
        finished = 0
        for txn in due:
            tc = self.coordinators.get(txn[0])
            meta = tc.txns.get(txn[1]) if tc is not None else None
            if tc is None or meta is None or meta.status not in (COMMITTING, ABORTING):
                with self._lock:  # ended meanwhile (its client retried, or a reload's recovery drove it)
                    self._failed_ends.pop(txn, None)
                continue
            if not meta.end_lock.acquire(blocking=False):
                continue
            try:
                if meta.status not in (COMMITTING, ABORTING):
                    continue
                self._drive_end(tc, meta, commit=meta.status == COMMITTING)
            except Exception as exc:  # noqa: BLE001 (kept for the next tick and logged, as Pulsar's retry timer does)
                log.warning("ending transaction %s failed again, retrying in a second: %s", txn, exc)
                with self._lock:
                    self._failed_ends[txn] = now
                continue
            finally:
                meta.end_lock.release()
            with self._lock:
                self._failed_ends.pop(txn, None)
            finished += 1
        return finished

    def reload_coordinator(self, tc_id: int) -> None:
        """Close and reopen a coordinator, as unloading its transaction_coordinator_assign partition does."""
        with self._lock:
            self.coordinator(tc_id).close()
            # Pulsar puts the store in the map its admin handlers read once the replay ends: 404 until then
            self.recovering_coordinators.add(tc_id)
            self._open_coordinator(tc_id)
            self.recovering_coordinators.discard(tc_id)
            self._finish_recovered(tc_id)

    def stall_coordinator_recovery(self, tc_id: int) -> None:
        """Unload a coordinator and load it again with a log replay that has not finished (a failover onto a broker
        replaying a long log; the `engine run --fault stall-coordinator-recovery` verb): its admin stats answer 404
        until :meth:`finish_coordinator_recovery`, or another unload (:meth:`reload_coordinator`). Only the admin
        view waits: the engine keeps serving its transactions."""
        with self._lock:
            self._writable()
            self.reload_coordinator(tc_id)
            self.recovering_coordinators.add(tc_id)

    def finish_coordinator_recovery(self, tc_id: int) -> None:
        """The stalled replay ends: the store enters the admin handlers' map, with the recoverStartTime of the
        open that started the replay."""
        with self._lock:
            self.recovering_coordinators.discard(tc_id)

    def scale_coordinators(self, replicas: int) -> None:
        with self._lock:
            current = self.coordinator_count()
            if replicas <= current:
                raise NotAcceptable("Number of transaction coordinators must be more than current")
            self.storage.meta_put(META_COORDINATORS, str(replicas).encode())
            for tc_id in range(current, replicas):
                self._open_coordinator(tc_id)

    def abort_timed_out(self) -> list[tuple[int, int]]:
        aborted = []
        for tc in list(self.coordinators.values()):
            for seq in tc.expired():
                try:
                    self.end_transaction((tc.tc_id, seq), commit=False)
                    aborted.append((tc.tc_id, seq))
                    tc.counters.timed_out()
                except CoordinatorError:
                    pass  # ended meanwhile by its client
        return aborted

    def expire_preserved(self) -> int:
        return sum(p.expire() for p in self.preservers.values())
