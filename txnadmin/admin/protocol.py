"""The one seam between txnadmin and a Pulsar: :class:`TransactionsAdmin`.

Every method returns plain JSON values shaped exactly as Pulsar's admin REST API returns them
(Pulsar's field names, nulls omitted), so the CLI renders both backends the same way and the
server can serve the embedded engine over Pulsar's own paths. Implementations:
``LocalAdmin`` (the embedded engine) and ``HttpAdmin`` (a real cluster or ``txnadmin serve``).

Errors: implementations raise :class:`AdminError` (or a subclass) carrying the HTTP-like status and
Pulsar's reason text; nothing else escapes but bugs.

Lifecycle: an admin holds resources (HTTP connections; the embedded engine's directory lock), released by
``close()``; every admin is its own context manager, as httpx's clients and transports are::

    with open_admin(target) as admin:
        admin.list_coordinators()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Self, runtime_checkable

Json = dict[str, Any]


@dataclass(frozen=True, order=True)
class TxnId:
    """A transaction id: ``most_bits`` is the coordinator id, ``least_bits`` its sequence."""

    most_bits: int
    least_bits: int

    def __str__(self) -> str:
        return f"({self.most_bits},{self.least_bits})"

    @classmethod
    def parse(cls, text: str) -> "TxnId":
        inner = text.strip().removeprefix("(").removesuffix(")")
        most, _, least = inner.partition(",")
        return cls(int(most), int(least))


class AdminError(Exception):
    """A failed admin call: ``status`` as HTTP would say it, ``reason`` as Pulsar words it."""

    def __init__(self, reason: str, status: int = 500):
        self.reason = reason
        self.status = status
        super().__init__(reason)


class NotFoundError(AdminError):
    def __init__(self, reason: str):
        super().__init__(reason, 404)


class NotAuthorizedError(AdminError):
    def __init__(self, reason: str = "not authorized", status: int = 401):
        super().__init__(reason, status)


class TargetUnreachableError(AdminError):
    """The target could not be reached at all (connection refused, DNS, TLS, engine dir missing).

    One raised for an unexpected failure underneath carries it as its ``__cause__`` (``raise … from exc``); the
    expected ones are raised ``from None``. The CLI shows that cause's traceback under ``--debug``."""

    before_send = False  # True when the request surely never left: HttpAdmin may then retry even a write
    connection_failed = False  # True for a connection that failed (refused, reset, DNS, TLS, timeout), not a bad name

    def __init__(self, reason: str):
        super().__init__(reason, 0)


class UnexpectedServerError(AdminError):
    """An exception Pulsar's REST layer maps to no status (a NullPointerException, say). The broker answers HTTP 500
    in plain text, with the message and the stack trace (RestException), not with ``{"reason": …}``. ``message``
    is that message alone; ``reason`` says it was unexpected, as the body's first line does."""

    def __init__(self, message: str):
        super().__init__(f"an unexpected error occurred in the server: {message or 'no message'}", 500)
        self.message = message


UNEXPECTED_ERROR_HEADER = "--- An unexpected error occurred in the server ---"


def unexpected_error_body(message: str, trace: str) -> str:
    """The plain-text body Pulsar's RestException sends for an unmapped exception (``trace``: its stack trace)."""
    return f"\n {UNEXPECTED_ERROR_HEADER}\n\nMessage: {message}\n\nStacktrace:\n\n{trace}\n"


class BadReplyError(AdminError):
    """The target answered with something no admin API sends (wrong JSON shape, an HTML page, a bad redirect).

    Status 502 as a gateway would say it, but unlike a gateway's 502 it is a final answer: asking again gets the
    same garbage, so it is never retried."""

    def __init__(self, reason: str):
        super().__init__(reason, 502)


def is_transient(exc: BaseException) -> bool:
    """True for failures worth another try later (unreachable, timeouts, 429, 5xx such as a restarting broker's
    502/503/504); False for final answers (not authorized, not found, a bad request, a reply of the wrong shape,
    credentials that cannot be used). One rule for per-request retries and for `downgrade wait`'s polling."""
    if isinstance(exc, BadReplyError) or getattr(exc, "final", False):
        return False
    if isinstance(exc, TargetUnreachableError):
        return True
    if isinstance(exc, AdminError):
        return exc.status in (0, 429) or exc.status >= 500  # 0: never reached (TargetUnreachableError's status)
    return False


# Names of the two dynamic broker settings that switch PIP-160 batching.
TC_BATCH_FLAG = "transactionLogBatchedWriteEnabled"
PENDING_ACK_BATCH_FLAG = "transactionPendingAckBatchedWriteEnabled"


@runtime_checkable
class TransactionsAdmin(Protocol):
    """What txnadmin needs from a Pulsar.

    The REST call behind each method is its row in :data:`txnadmin.admin.endpoints.ENDPOINTS` (method, Pulsar's path,
    query, reply shape); the few methods that are not rows say which row they read (``endpoints.DERIVED``).
    """

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Release what the admin holds (connections, a local engine's lock); calling it again does nothing."""

    def __enter__(self) -> Self:
        """``with admin:`` — returns the admin itself."""

    def __exit__(self, *exc_info: object) -> None:
        """Closes the admin, whether the block ended normally or raised (the exception goes on)."""

    # -- pulsar-admin transactions ------------------------------------------------------------
    def list_coordinators(self) -> list[Json]:
        """``[{"id": 0, "brokerServiceUrl": "pulsar://…"}, …]``."""

    def coordinator_stats(self, coordinator_id: Optional[int] = None) -> Json:
        """One TransactionCoordinatorStats, or ``{"<id>": stats}`` for all."""

    def coordinator_internal_stats(self, coordinator_id: int, metadata: bool = False) -> Json:
        """``{"transactionLogStats": {…}}``."""

    def pending_ack_internal_stats(self, topic: str, subscription: str, metadata: bool = False) -> Json:
        """``{"pendingAckLogStats": {…}}``."""

    def buffer_snapshot_internal_stats(self, topic: str, metadata: bool = False) -> Json:
        """A topic's TransactionBufferInternalStats (its snapshot system topic's ledger)."""

    def transaction_buffer_stats(
        self, topic: str, low_water_marks: bool = False, segment_stats: bool = False
    ) -> Json:
        """A topic's TransactionBufferStats."""

    def pending_ack_stats(self, topic: str, subscription: str, low_water_marks: bool = False) -> Json:
        """A subscription's TransactionPendingAckStats."""

    def transaction_in_buffer_stats(self, txn: TxnId, topic: str) -> Json:
        """TransactionInBufferStats: where ``txn`` starts in ``topic`` and whether it aborted."""

    def transaction_in_pending_ack_stats(self, txn: TxnId, topic: str, subscription: str) -> Json:
        """TransactionInPendingAckStats of ``txn`` on one subscription."""

    def transaction_metadata(self, txn: TxnId) -> Json:
        """TransactionMetadata (status, timeouts, produced and acked partitions)."""

    def slow_transactions(self, timeout_ms: int, coordinator_id: Optional[int] = None) -> Json:
        """``{"(most,least)": TransactionMetadata}`` of transactions open longer than ``timeout_ms``."""

    def scale_coordinators(self, replicas: int) -> None:
        """Grow the number of transaction coordinators to ``replicas``."""

    def position_stats_in_pending_ack(
        self, topic: str, subscription: str, ledger_id: int, entry_id: int, batch_index: Optional[int] = None
    ) -> Json:
        """``{"state": …}``: whether that position is acked in a pending transaction."""

    def abort_transaction(self, txn: TxnId) -> None:
        """Abort ``txn``."""

    # -- brokers, namespaces, topics (/admin/v2) ---------------------------------------------
    def dynamic_config(self) -> dict[str, str]:
        """The brokers' dynamic overrides."""

    def runtime_config(self) -> dict[str, str]:
        """The answering broker's effective values."""

    def update_dynamic_config(self, name: str, value: str) -> None:
        """Set a dynamic override (every broker applies it)."""

    def delete_dynamic_config(self, name: str) -> None:
        """Remove a dynamic override."""

    def list_tenants(self) -> list[str]:
        """Tenant names."""

    def list_namespaces(self, tenant: str) -> list[str]:
        """Names as ``tenant/ns``."""

    def list_topics(self, namespace: str, include_system: bool = True) -> list[str]:
        """Full topic names, system topics included when ``include_system``."""

    def unload_topic(self, topic: str) -> None:
        """Unload a topic: its stores reopen (and re-read the batch flags)."""

    def broker_versions(self) -> dict[str, str]:
        """Each active broker's version: ``{"host:port": "3.3.2"}``."""

    def delete_subscription(self, topic: str, subscription: str) -> None:
        """Delete a subscription with its pending-ack store."""

    def delete_topic(self, topic: str) -> None:
        """Delete a topic (forced) with its subscriptions' pending-ack stores."""

    # -- cluster identity and brokers (used by the guided downgrade/upgrade) ---------------------
    def list_clusters(self) -> list[str]:
        """Cluster names."""

    def active_brokers(self, cluster: str) -> list[str]:
        """The cluster's active brokers as ``host:port`` (web service)."""

    def internal_configuration(self) -> Json:
        """Metadata-store and BookKeeper URIs (an identity)."""

    def broker_runtime_config(self, broker: str) -> dict[str, str]:
        """[GET http(s)://{broker}/admin/v2/brokers/configuration/runtime] one named broker's effective values."""

    def broker_version(self, broker: str) -> str:
        """[GET http(s)://{broker}/admin/v2/brokers/version] one named broker's version."""

    # -- what `txnadmin doctor` reads besides the above ---------------------------------------
    def topic_internal_stats(self, topic: str) -> Json:
        """ManagedLedgerInternalStats + ``cursors``
        (one per subscription): ``lastConfirmedEntry`` is what a transaction buffer's max read position chases."""

    def topic_stats(self, topic: str) -> Json:
        """TopicStats: ``publishers`` (each connected producer, with the ``clientVersion`` its client reported on
        connect) and ``subscriptions``."""

    def namespace_permissions(self, namespace: str) -> Json:
        """``{"role": ["produce", "consume", …]}``: the grants on a namespace."""

    def topic_permissions(self, topic: str) -> Json:
        """``{"role": [actions]}``: the grants on a topic (asked of the partitioned topic for a partition)."""

    def subscription_permissions(self, namespace: str) -> Json:
        """``{"subscription": ["role", …]}``: the roles allowed on each subscription of the namespace that has a list."""

    def subscription_auth_mode(self, namespace: str) -> str:
        """``"None"`` or ``"Prefix"`` (a subscription's name must start with the consuming role)."""

    def tenant_info(self, tenant: str) -> Json:
        """TenantInfo: ``adminRoles`` and ``allowedClusters``."""

    def broker_time_ms(self) -> Optional[int]:
        """The target's clock in epoch ms: the ``Date`` header of [GET /admin/v2/brokers/version] (1 s
        resolution), ``None`` when the answer carries none. Timeouts are judged on this, never on ours."""

    def metrics_text(self) -> str:
        """[GET /metrics/] the broker's Prometheus exposition (text format 0.0.4)."""

    def broker_metrics_text(self, broker: str) -> str:
        """[GET http(s)://{broker}/metrics/] one named broker's exposition (its own counters: every broker has
        its own batched writers)."""
