"""`LocalAdmin`: the TransactionsAdmin protocol on the embedded engine."""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Self

from ..names import coordinator_of_assign_partition, normalize_topic
from .protocol import AdminError, Json, NotFoundError, TargetUnreachableError, TxnId, UnexpectedServerError

if TYPE_CHECKING:
    from ..engine.engine import Engine


@functools.cache
def _engine_statuses() -> tuple[tuple[type[BaseException], int], ...]:
    """Each engine error and the status Pulsar's REST API answers the same condition with.

    The first row that matches wins, so a subclass comes before its base. An exception not listed here is a bug
    and goes on as it is: turning every KeyError into 404 and every ValueError into 412 hid bugs as answers.
    Built on first use so an HTTP-only command never imports the engine."""
    from ..engine.config import ConfigError
    from ..engine.coordinator import CoordinatorError, CoordinatorNotReady, InvalidTxnStatus, TransactionNotFound
    from ..engine.engine import EngineError, NotAcceptable, NotFound
    from ..engine.pending_ack import PendingAckConflict, PendingAckNotAllowed, PendingAckNotReady
    from ..engine.stats import NotReady
    from ..engine.tb_snapshot import SnapshotError

    return (
        (TransactionNotFound, 404),  # CoordinatorException.TransactionNotFoundException
        (InvalidTxnStatus, 409),  # InvalidTxnStatusException: Conflict
        (CoordinatorNotReady, 503),  # a coordinator not loaded (yet): Service Unavailable
        (CoordinatorError, 500),
        (NotFound, 404),  # no such coordinator, topic, subscription or pending-ack store
        (NotAcceptable, 406),  # scale-transactionCoordinators below the current count
        (NotReady, 503),  # ServiceUnitNotReadyException: a pending-ack store still loading
        (EngineError, 500),
        (PendingAckConflict, 409),  # TransactionConflictException
        (PendingAckNotAllowed, 405),  # NotAllowedException
        (PendingAckNotReady, 503),  # a pending-ack handle that has not replayed its log
        (SnapshotError, 500),
        (ConfigError, 412),  # POST /brokers/configuration: Invalid dynamic-config value
    )


def _engine_error_types() -> tuple[type[BaseException], ...]:
    return tuple(kind for kind, _ in _engine_statuses())


def engine_error_status(exc: BaseException) -> Optional[int]:
    """The status for an engine error (see :func:`_engine_statuses`), or None when it is not one."""
    for kind, status in _engine_statuses():
        if isinstance(exc, kind):
            return status
    return None


def open_engine(directory: Path, **options: Any) -> Engine:
    """Open the engine in ``directory`` (``options`` as :class:`Engine` takes them); any failure to open it is a
    TargetUnreachableError naming the directory.

    Locked, damaged or unreadable files are the engine's own errors, said in one line. Anything else (a bug, or
    damage nobody foresaw) is chained as the error's cause, so `--debug` can still show where it came from."""
    from ..engine.engine import Engine
    from ..engine.storage import EngineLockedError, StorageError

    said: tuple[type[BaseException], ...] = (*_engine_error_types(), StorageError, OSError)
    try:
        return Engine(directory, **options)
    except EngineLockedError as exc:
        raise TargetUnreachableError(_held_by_another(directory, exc.holder)) from None
    except said as exc:
        text = str(exc)  # the storage's errors name the directory already: say it once
        raise TargetUnreachableError(text if text.startswith(str(directory)) else f"{directory}: {text}") from None
    except Exception as exc:  # whatever else stops the open: one line, its traceback kept as the cause
        raise TargetUnreachableError(
            f"{directory}: cannot open the engine: unexpected {type(exc).__name__}"
            + (f" ({' '.join(str(exc).split())})" if str(exc).strip() else "")) from exc


def _held_by_another(directory: Path, holder: Optional[str]) -> str:
    """A second writer refused: who holds the directory, and the commands that work meanwhile. An engine that
    serves its admin API (`engine run`, `serve`) is reached through it with -u local:DIR; no read-only view opens
    beside a writer (it could read a half-written state), so that is not offered."""
    import shlex

    by = f"process {holder}" if holder and holder != "unknown" else "another process"
    if running_server(directory) is None:
        return f"{directory}: already open for writing by {by}; stop it, or wait for it to end"
    local = shlex.quote(f"local:{directory}")
    return (f"{directory}: already open for writing by {by}, which serves its admin API: stop it first, or go "
            f"through it with -u {local} (e.g. `txnadmin -u {local} transactions list`)")


def running_server(engine_dir: Path) -> Optional[tuple[str, Optional[str]]]:
    """`txnadmin serve` / `engine run` record their loopback URL in the engine dir while they hold it."""
    import json

    path = engine_dir / "server.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    pid = info.get("pid")
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return None
    return info["url"], info.get("token")


def _topic_name(name: str) -> str:
    """The full topic name. A name that does not parse is answered 412, as Pulsar's REST API answers an invalid
    topic: the one ValueError the seam expects, mapped here rather than every ValueError everywhere."""
    try:
        return normalize_topic(name)
    except ValueError as exc:
        raise AdminError(str(exc), 412) from None


def _admin_errors(fn):
    """Engine errors become AdminError with the status Pulsar's REST API would answer (404 as NotFoundError)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _engine_error_types() as exc:  # an except clause is evaluated only once something was raised
            status = engine_error_status(exc)
            if status is None:  # not reached: caught because a row matched; a bug goes on as it is
                raise
            if status == 404:
                raise NotFoundError(str(exc)) from None
            if _unmapped_in_pulsar(exc):
                raise UnexpectedServerError(str(exc)) from None
            raise AdminError(str(exc), status) from None

    return wrapper


def _unmapped_in_pulsar(exc: BaseException) -> bool:
    """An error Pulsar's REST layer maps to no status (its broker meets it as a NullPointerException): a
    plain-text 500 there, UnexpectedServerError here."""
    from ..engine.stats import SubscriptionGone

    return isinstance(exc, SubscriptionGone)


TC_DISABLED = "This Broker is not configured with transactionCoordinatorEnabled=true."


def _needs_coordinator(fn):
    """Pulsar's checkTransactionCoordinatorEnabled: 503 first, on every transactions endpoint but one."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if not self.engine.config.transactionCoordinatorEnabled:
            raise AdminError(TC_DISABLED, 503)
        return fn(self, *args, **kwargs)

    return wrapper


def _writes(fn):
    """A call that changes the engine: a read-only view of a stopped engine is first reopened for writing."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        self._writable()
        return fn(self, *args, **kwargs)

    return wrapper


class LocalAdmin:
    """Open an engine directory (or wrap a running :class:`Engine`) and answer admin calls from it.

    ``read_mostly`` (how the CLI opens a stopped engine's ``local:PATH``): the engine is opened as a read-only view,
    so stats and `downgrade status` change nothing (no ledger rolled or trimmed, no metadata written, no store
    reopened), and while it is open no engine process can start on the directory (a shared lock). The first call
    that changes something (unload, abort, delete, scale) reopens the engine for writing, as a broker start would.
    """

    def __init__(self, target, *, create: bool = False, read_mostly: bool = False):
        from ..engine.engine import Engine

        self._views: list = []
        self._lock_fd: Optional[int] = None
        self._upgrade = threading.Lock()
        if isinstance(target, Engine):
            self.engine = target
            self._owned = False
            return
        directory = Path(target)
        if not create and not (directory / "metadata.db").exists():
            raise TargetUnreachableError(
                f"{directory}: no txnadmin engine here (create one with `txnadmin engine init {directory}`)"
            )
        self._directory = directory
        self._owned = True
        if read_mostly and not create:
            self._hold_off_writers(directory)
            try:
                self.engine = self._open(directory, read_only=True)
            except BaseException:
                self._release_writers()  # a view that never opened must not keep `engine recover` out
                raise
        else:
            self.engine = self._open(directory, read_only=False)

    @staticmethod
    def _open(directory: Path, read_only: bool):
        return open_engine(directory, read_only=read_only)

    def _hold_off_writers(self, directory: Path) -> None:
        """While this view is open no engine process can start and change what is being judged; one already
        running without a server is refused, not read mid-write."""
        from ..engine.storage import EngineLockedError, StorageError, hold_off_writers

        try:
            self._lock_fd = hold_off_writers(directory)
        except EngineLockedError as exc:
            raise TargetUnreachableError(
                f"{exc}, which serves no admin API here (no server.json): stop it, or run the engine with "
                "`txnadmin serve`/`engine run` so commands go through it") from None
        except StorageError as exc:
            raise TargetUnreachableError(str(exc)) from None

    def _release_writers(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the shared lock
            self._lock_fd = None

    @property
    def frozen(self) -> bool:
        """True for the read-only view of a stopped engine: nothing it reports can change while it is open."""
        return self._owned and self.engine.read_only

    def _writable(self) -> None:
        if not self.engine.read_only or not self._owned:
            return
        with self._upgrade:
            if self.engine.read_only:
                self._release_writers()
                # The view stays open until close(): calls already reading from it finish on it.
                self._views.append(self.engine)
                self.engine = self._open(self._directory, read_only=False)

    def close(self) -> None:
        if self._owned:  # an Engine handed in belongs to its caller; the ones this admin opened are closed once
            self._owned = False
            for engine in [*self._views, self.engine]:
                engine.close()
            self._release_writers()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def _stats(self):
        from ..engine import stats

        return stats

    # -- pulsar-admin transactions ------------------------------------------------------------
    @_admin_errors
    @_needs_coordinator
    def list_coordinators(self) -> list[Json]:
        return self._stats.coordinators_list(self.engine)

    @_admin_errors
    @_needs_coordinator
    def coordinator_stats(self, coordinator_id: Optional[int] = None) -> Json:
        return self._stats.coordinator_stats(self.engine, coordinator_id)

    @_admin_errors
    @_needs_coordinator
    def coordinator_internal_stats(self, coordinator_id: int, metadata: bool = False) -> Json:
        return self.engine.loaded_coordinator(coordinator_id).internal_stats(metadata)

    @_admin_errors
    @_needs_coordinator
    def pending_ack_internal_stats(self, topic: str, subscription: str, metadata: bool = False) -> Json:
        return self._stats.pending_ack_internal_stats(self.engine, _topic_name(topic), subscription, metadata)

    @_admin_errors
    def buffer_snapshot_internal_stats(self, topic: str, metadata: bool = False) -> Json:
        if not self.engine.config.transactionCoordinatorEnabled:
            # Pulsar skips the 503 here; with no coordinator a topic has no transaction buffer, so no snapshot
            raise NotFoundError("Transaction buffer Snapshot for the topic does not exist")
        return self._stats.buffer_snapshot_internal_stats(self.engine, _topic_name(topic), metadata)

    @_admin_errors
    @_needs_coordinator
    def transaction_buffer_stats(self, topic: str, low_water_marks: bool = False, segment_stats: bool = False) -> Json:
        return self._stats.transaction_buffer_stats(self.engine, _topic_name(topic), low_water_marks, segment_stats)

    @_admin_errors
    @_needs_coordinator
    def pending_ack_stats(self, topic: str, subscription: str, low_water_marks: bool = False) -> Json:
        return self._stats.pending_ack_stats(self.engine, _topic_name(topic), subscription, low_water_marks)

    @_admin_errors
    @_needs_coordinator
    def transaction_in_buffer_stats(self, txn: TxnId, topic: str) -> Json:
        return self._stats.transaction_in_buffer_stats(self.engine, (txn.most_bits, txn.least_bits), _topic_name(topic))

    @_admin_errors
    @_needs_coordinator
    def transaction_in_pending_ack_stats(self, txn: TxnId, topic: str, subscription: str) -> Json:
        return self._stats.transaction_in_pending_ack_stats(
            self.engine, (txn.most_bits, txn.least_bits), _topic_name(topic), subscription
        )

    @_admin_errors
    @_needs_coordinator
    def transaction_metadata(self, txn: TxnId) -> Json:
        from ..engine.coordinator import TransactionNotFound

        try:
            meta = self.engine.loaded_coordinator(txn.most_bits).get(txn.least_bits)
        except TransactionNotFound:
            preserved = self._stats.preserved_metadata(self.engine, (txn.most_bits, txn.least_bits))
            if preserved is None:
                raise
            return preserved
        return self._stats.transaction_metadata(self.engine, meta)

    @_admin_errors
    @_needs_coordinator
    def slow_transactions(self, timeout_ms: int, coordinator_id: Optional[int] = None) -> Json:
        return self._stats.slow_transactions(self.engine, timeout_ms, coordinator_id)

    @_admin_errors
    @_needs_coordinator
    @_writes
    def scale_coordinators(self, replicas: int) -> None:
        if replicas <= 0:
            raise AdminError("Number of transaction coordinators must be more than 0", 406)
        self.engine.scale_coordinators(replicas)

    @_admin_errors
    @_needs_coordinator
    def position_stats_in_pending_ack(self, topic: str, subscription: str, ledger_id: int, entry_id: int,
                                      batch_index: Optional[int] = None) -> Json:
        return self._stats.position_stats_in_pending_ack(self.engine, _topic_name(topic), subscription, ledger_id,
                                                         entry_id, batch_index)

    @_admin_errors
    @_needs_coordinator
    def abort_transaction(self, txn: TxnId) -> None:
        if not 0 <= txn.most_bits <= 2**31 - 1:
            raise AdminError("mostSigBits out of bounds", 400)
        self._writable()
        self.engine.abort((txn.most_bits, txn.least_bits))

    # -- brokers, namespaces, topics ----------------------------------------------------------
    @_admin_errors
    def dynamic_config(self) -> dict[str, str]:
        from ..engine.config import read_dynamic

        return read_dynamic(self.engine.directory)

    @_admin_errors
    def runtime_config(self) -> dict[str, str]:
        self.engine.apply_dynamic_config()
        return self.engine.config.to_text()

    @_admin_errors
    def update_dynamic_config(self, name: str, value: str) -> None:
        from ..engine.config import update_dynamic

        update_dynamic(self.engine.directory, name, value)
        self.engine.apply_dynamic_config()

    @_admin_errors
    def delete_dynamic_config(self, name: str) -> None:
        from ..engine.config import update_dynamic

        update_dynamic(self.engine.directory, name, None)
        self.engine.apply_dynamic_config()

    @_admin_errors
    def list_tenants(self) -> list[str]:
        return sorted({ns.split("/")[0] for ns in self._stats.namespaces(self.engine)})

    @_admin_errors
    def list_namespaces(self, tenant: str) -> list[str]:
        return [ns for ns in self._stats.namespaces(self.engine) if ns.split("/")[0] == tenant]

    @_admin_errors
    def list_topics(self, namespace: str, include_system: bool = True) -> list[str]:
        return self._stats.topic_names(self.engine, namespace, include_system)

    @_admin_errors
    @_writes
    def unload_topic(self, topic: str) -> None:
        full = _topic_name(topic)
        tc_id = coordinator_of_assign_partition(full)
        if tc_id is not None:
            self.engine.reload_coordinator(tc_id)
        else:
            self.engine.unload_topic(full)

    @_admin_errors
    def broker_versions(self) -> dict[str, str]:
        return {self.engine.config.engineBrokerServiceUrl.split("://")[-1]: self.engine.config.engineBrokerVersion}

    @_admin_errors
    @_writes
    def delete_subscription(self, topic: str, subscription: str) -> None:
        self.engine.delete_subscription(_topic_name(topic), subscription)

    @_admin_errors
    @_writes
    def delete_topic(self, topic: str) -> None:
        self.engine.delete_topic(_topic_name(topic))

    # -- cluster identity and brokers ---------------------------------------------------------
    def _broker_id(self) -> str:
        return self.engine.config.engineBrokerServiceUrl.split("://")[-1]

    @_admin_errors
    def list_clusters(self) -> list[str]:
        return [self.engine.config.clusterName]

    @_admin_errors
    def active_brokers(self, cluster: str) -> list[str]:
        if cluster != self.engine.config.clusterName:
            raise NotFoundError("Cluster does not exist")
        return [self._broker_id()]  # the engine is one broker

    @_admin_errors
    def internal_configuration(self) -> Json:
        ident = self.engine.engine_id or "unknown"
        return {"metadataStoreUrl": f"txnadmin-engine:{ident}", "configurationMetadataStoreUrl":
                f"txnadmin-engine:{ident}", "ledgersRootPath": "/ledgers",
                "bookkeeperMetadataServiceUri": f"txnadmin-engine://{ident}/ledgers"}

    @_admin_errors
    def broker_runtime_config(self, broker: str) -> dict[str, str]:
        if broker != self._broker_id():
            raise NotFoundError(f"Broker {broker} is not active in this engine")
        return self.runtime_config()

    @_admin_errors
    def broker_metrics_text(self, broker: str) -> str:
        if broker != self._broker_id():
            raise NotFoundError(f"Broker {broker} is not active in this engine")
        return self.metrics_text()

    @_admin_errors
    def broker_version(self, broker: str) -> str:
        if broker != self._broker_id():
            raise NotFoundError(f"Broker {broker} is not active in this engine")
        return self.engine.config.engineBrokerVersion

    # -- what `txnadmin doctor` reads besides the above ---------------------------------------
    @_admin_errors
    def topic_internal_stats(self, topic: str) -> Json:
        return self.engine.topic(_topic_name(topic), create=False).ledger.internal_stats()

    @_admin_errors
    def topic_stats(self, topic: str) -> Json:
        return self._stats.topic_stats(self.engine, _topic_name(topic))

    # The engine keeps no grants (it has no authorization): every permission listing is empty, as a broker's is for
    # a namespace nobody granted anything on.
    @_admin_errors
    def namespace_permissions(self, namespace: str) -> Json:
        self._stats.namespace_exists(self.engine, namespace)
        return {}

    @_admin_errors
    def topic_permissions(self, topic: str) -> Json:
        self.engine.topic(_topic_name(topic), create=False)
        return {}

    @_admin_errors
    def subscription_permissions(self, namespace: str) -> Json:
        self._stats.namespace_exists(self.engine, namespace)
        return {}

    @_admin_errors
    def subscription_auth_mode(self, namespace: str) -> str:
        self._stats.namespace_exists(self.engine, namespace)
        return "None"

    @_admin_errors
    def tenant_info(self, tenant: str) -> Json:
        if tenant not in {ns.split("/")[0] for ns in self._stats.namespaces(self.engine)}:
            raise NotFoundError("Tenant does not exist")
        return {"adminRoles": [], "allowedClusters": [self.engine.config.clusterName]}

    @_admin_errors
    def broker_time_ms(self) -> Optional[int]:
        return int(self.engine.clock_ms())

    @_admin_errors
    def metrics_text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.engine.registry).decode()
