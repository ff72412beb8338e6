"""The one table of the admin REST calls txnadmin makes and serves: :data:`ENDPOINTS`.

Each row is one :class:`~txnadmin.admin.protocol.TransactionsAdmin` method: its HTTP method, Pulsar's path template
(written as Pulsar publishes it, ``{tenant}/{namespace}/{topic}`` and all), its query parameters (Pulsar's names and
defaults) and the shape its reply must have. Both ends are built from it:

* ``HttpAdmin`` (``admin/http.py``) fills the template and the query from a method's arguments and checks the reply
  against the row's shape;
* ``txnadmin serve`` (``server/app.py``) routes each row's path to the same method of the admin it serves (normally
  ``LocalAdmin`` on the embedded engine), reading the arguments back from the path, the query and the body.

So a new admin call is one protocol method, one row here and one engine method in ``LocalAdmin``;
tests/contract/test_endpoints.py holds every row to Pulsar's published paths and to a method on each side.

Path variables are Pulsar's names, bound once to our arguments in :data:`PATH_VARIABLES` (``{subName}`` is always the
``subscription`` argument, ``{tenant}/{namespace}/{topic}`` always a ``topic``); a row's arguments are its protocol
method's parameters, in order, read from the protocol itself.

Why ``HttpAdmin`` keeps one real method per row (each one line calling ``self._endpoint("<call>", …)``) instead of
methods generated from the table: mypy then checks every caller against the typed signatures, the exported-members
test compares real signatures with the protocol's, and a reader finds each call where ``grep`` looks for it.
Generated methods would be invisible to mypy (or need a stub per row, which is the duplication again).

Calls that are not rows, each read through a row (:data:`DERIVED`), and the special readings of rows (a bare version
string, the ``Date`` header) stay in ``HttpAdmin``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional
from urllib.parse import quote

from ..names import normalize_topic
from .protocol import AdminError, BadReplyError, TransactionsAdmin, TxnId

V3 = "/admin/v3/transactions"
V2 = "/admin/v2"

# -- reply shapes (checked by admin/_replies.check; only what txnadmin reads is required) ---------------------------
CONFIG = "config"  # a broker configuration map: names to plain values
VERSION_TEXT = "version text"  # not JSON: the bare version string /brokers/version sends
STRINGS = ("list", str, False)
# What a display command accepts: Pulsar's spec (tests/contract/swaggertransactions.json) makes every field optional,
# so these check the types of the fields that came, and `coordinators-list` or the internal stats print the rest.
_LEDGER_INFO = ("opt", {"ledgerId": int, "entries": int, "size": int})
_ML_STATS = ("opt", {"ledgers": ("list", _LEDGER_INFO, False), "cursors": dict, "lastConfirmedEntry": str,
                     "lastLedgerCreatedTimestamp": str})
_LOG_STATS = ("opt", {"managedLedgerName": str, "managedLedgerInternalStats": _ML_STATS})
COORDINATORS = ("list", ("opt", {"id": int, "brokerServiceUrl": str}), False)
COORDINATOR_INTERNAL_STATS = ("opt", {"transactionLogStats": _LOG_STATS})
PENDING_ACK_INTERNAL_STATS = ("opt", {"pendingAckLogStats": _LOG_STATS})
TRANSACTION_METADATA = ("opt", {"txnId": str, "status": str, "openTimestamp": int, "timeoutAt": int, "owner": str,
                                "producedPartitions": ("map", dict), "ackedPartitions": ("map", ("map", dict))})
SLOW_TRANSACTIONS = ("map", TRANSACTION_METADATA)  # keyed `(m,l)` by Pulsar; the spec allows any key
# Outside the transactions spec: the cluster's identity, and a topic's managed-ledger stats (doctor's evidence).
INTERNAL_CONFIGURATION = ("opt", {"metadataStoreUrl": str, "configurationMetadataStoreUrl": str,
                                  "bookkeeperMetadataServiceUri": str})
TOPIC_INTERNAL_STATS = _ML_STATS

# What a judging command needs (downgrade, doctor, find-hanging, the batch-log stats): checked by `judged`, which
# names the missing field, where a display command would have printed the reply as it came.
JUDGED_COORDINATORS = ("list", ("obj", {"id": int}), False)
JUDGED_LOG: tuple = ("obj", {"managedLedgerInternalStats": ("obj", {})})  # its ledgers' creation time is optional
JUDGED_LEDGERS = ("obj", {"managedLedgerInternalStats": ("obj", {"ledgers": ("list", ("obj", {"ledgerId": int}),
                                                                              True)})})

# -- path variables: Pulsar's template pieces and the protocol argument each one carries ---------------------------
TOPIC, NAMESPACE, TXN, LONG, NAME = "topic", "namespace", "txn", "long", "name"  # how the argument is written
PATH_VARIABLES: dict[str, tuple[str, str]] = {  # longest first: a template is matched against them in this order
    "{tenant}/{namespace}/{topic}": ("topic", TOPIC),  # a topic's REST path: no domain, the local name encoded
    "{tenant}/{namespace}": ("namespace", NAMESPACE),
    "{mostSigBits}/{leastSigBits}": ("txn", TXN),
    "{tenant}": ("tenant", NAME),
    "{subName}": ("subscription", NAME),
    "{coordinatorId}": ("coordinator_id", LONG),
    "{timeout}": ("timeout_ms", LONG),
    "{ledgerId}": ("ledger_id", LONG),
    "{entryId}": ("entry_id", LONG),
    "{configName}": ("name", NAME),
    "{configValue}": ("value", NAME),
    "{cluster}": ("cluster", NAME),
}


def judged(reply: Any, shape: Any, what: str) -> Any:
    """``reply`` when it holds what a judgment needs (a ``*JUDGED*`` shape); else BadReplyError naming the field.

    Display commands print a reply the spec allows however few fields it has; a verdict cannot rest on a field
    that did not come, so the command that judges says which one it missed."""
    from ._replies import check  # not at import: it loads httpx, which a local target never needs

    try:
        check(reply, shape, what)
    except ValueError as exc:
        raise BadReplyError(f"{exc}: needed to judge, and the target did not send it") from None
    return reply


def coordinator_ids(coordinators: Any) -> list[int]:
    """The ids of a coordinators listing, sorted, for a command that goes on to judge each coordinator."""
    return sorted(int(c["id"]) for c in judged(coordinators, JUDGED_COORDINATORS, "coordinators"))


def log_stats(internal: Any, key: str, what: str, shape: Any = JUDGED_LOG) -> dict:
    """``internal[key]`` (``transactionLogStats`` or ``pendingAckLogStats``) checked against a judged shape."""
    return judged(internal, ("obj", {key: shape}), what)[key]


def topic_path(topic: str) -> str:
    """`persistent://t/ns/x` (or `t/ns/x`, or `x`) → `t/ns/<x URL-encoded>` — Pulsar's REST path, no domain."""
    try:  # `persistent://public` is refused as Pulsar refuses it, never completed to public/default/public
        name = normalize_topic(topic).split("://", 1)[1]
    except ValueError as exc:
        raise AdminError(str(exc), 412) from None
    tenant, namespace, local = name.split("/", 2)
    return f"{quote(tenant, safe='')}/{quote(namespace, safe='')}/{quote(local, safe='')}"


def _namespace_path(namespace: str) -> str:
    tenant, ns = namespace.split("/", 1)
    return f"{quote(tenant, safe='')}/{quote(ns, safe='')}"


def _txn_path(txn: TxnId) -> str:
    return f"{txn.most_bits}/{txn.least_bits}"


def _name_path(value: Any) -> str:
    return quote(str(value), safe="")


ENCODERS: dict[str, Callable[[Any], str]] = {TOPIC: topic_path, NAMESPACE: _namespace_path, TXN: _txn_path,
                                             LONG: str, NAME: _name_path}


@dataclass(frozen=True)
class Query:
    """One query parameter: Pulsar's ``name`` and the protocol argument (``arg``) it carries, or a fixed ``value``.

    A value equal to Pulsar's ``default`` (or None) is not sent, as pulsar-admin sends optional parameters only when
    set; ``always`` sends it anyway. A boolean default makes it a flag (``true``/``false``), otherwise a long."""

    name: str
    arg: Optional[str] = None
    default: Any = None
    value: Optional[str] = None
    always: bool = False

    @property
    def is_flag(self) -> bool:
        return isinstance(self.default, bool)


_NO_PARAMS: dict[str, Any] = {}  # shared by every call without a query: never written to


class Endpoint:
    """One row: ``call`` (the protocol method), HTTP ``method``, Pulsar's ``path`` template, ``query``, the argument
    sent as the JSON ``body`` (if any) and the reply's ``shape`` (None: no check; an empty reply is None)."""

    __slots__ = ("call", "method", "path", "query", "body", "shape", "args", "variables", "_head", "_fills",
                 "_query", "_body_at", "topic_at")

    def __init__(self, call: str, method: str, path: str, *, query: tuple[Query, ...] = (), body: Optional[str] = None,
                 shape: Any = None):
        self.call, self.method, self.path, self.query, self.body, self.shape = call, method, path, query, body, shape
        self.args = _arguments(call)
        literals, variables = _parse(path)
        self.variables: tuple[tuple[str, str, str], ...] = variables  # (template piece, argument, kind), in order
        self._head = literals[0]
        self._fills = tuple((self.args.index(arg), ENCODERS[kind], literal)  # an argument, then the text after it
                            for (_, arg, kind), literal in zip(variables, literals[1:], strict=True))
        self._query: tuple[tuple[str, Optional[int], Any, Optional[str], bool], ...] = tuple(
            (q.name, None if q.arg is None else self.args.index(q.arg), q.default, q.value, q.always) for q in query)
        self._body_at = None if body is None else self.args.index(body)
        # Which argument names the topic the call is about (None: a call about no topic): a cluster answers it at
        # the broker owning that topic, so HttpAdmin remembers, per topic, where the last one was redirected to.
        self.topic_at: Optional[int] = next((self.args.index(arg) for _, arg, kind in variables if kind == TOPIC), None)

    def target(self, args: tuple) -> tuple[str, dict[str, Any]]:
        """The path and query for one call with ``args`` (the protocol method's arguments, in order)."""
        path = self._head
        for at, encode, literal in self._fills:
            path += encode(args[at]) + literal
        if not self._query:
            return path, _NO_PARAMS
        params: dict[str, Any] = {}
        for name, index, default, fixed, always in self._query:
            value = fixed if index is None else args[index]
            if value is None or (value == default and not always):
                continue
            params[name] = "true" if value is True else "false" if value is False else value
        return path, params

    def content(self, args: tuple) -> Optional[bytes]:
        """The request body: the body argument as JSON (Pulsar takes a bare number), or None."""
        return None if self._body_at is None else json.dumps(args[self._body_at]).encode()

    def __repr__(self) -> str:
        return f"Endpoint({self.call!r}, {self.method} {self.path})"


def _arguments(call: str) -> tuple[str, ...]:
    """The protocol method's parameters after ``self``, in order (from its code object: inspect.signature would
    cost a millisecond of every command's start for the whole table)."""
    code = getattr(TransactionsAdmin, call).__code__
    return code.co_varnames[1:code.co_argcount]


def _parse(path: str) -> tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]:
    """A template → its literal pieces (one more than the variables) and its variables (piece, argument, kind)."""
    literals, variables, at = [], [], 0
    while (start := path.find("{", at)) >= 0:
        piece = next((p for p in PATH_VARIABLES if path.startswith(p, start)), None)
        if piece is None:
            raise ValueError(f"{path}: no argument carries the path variable at {path[start:]!r} (add it to "
                             "PATH_VARIABLES)")
        literals.append(path[at:start])
        variables.append((piece, *PATH_VARIABLES[piece]))
        at = start + len(piece)
    literals.append(path[at:])
    return tuple(literals), tuple(variables)


def _rows(*rows: Endpoint) -> dict[str, Endpoint]:
    return {row.call: row for row in rows}


METADATA = Query("metadata", "metadata", False)
_TOPIC = "{tenant}/{namespace}/{topic}"

ENDPOINTS: dict[str, Endpoint] = _rows(
    # -- pulsar-admin transactions (Pulsar's Transactions.java) ----------------------------------------------------
    Endpoint("list_coordinators", "GET", f"{V3}/coordinators", shape=COORDINATORS),
    Endpoint("coordinator_stats", "GET", f"{V3}/coordinatorStats", query=(Query("coordinatorId", "coordinator_id"),),
             shape=dict),
    Endpoint("coordinator_internal_stats", "GET", f"{V3}/coordinatorInternalStats/{{coordinatorId}}",
             query=(METADATA,), shape=COORDINATOR_INTERNAL_STATS),
    Endpoint("pending_ack_internal_stats", "GET", f"{V3}/pendingAckInternalStats/{_TOPIC}/{{subName}}",
             query=(METADATA,), shape=PENDING_ACK_INTERNAL_STATS),
    Endpoint("buffer_snapshot_internal_stats", "GET", f"{V3}/transactionBufferInternalStats/{_TOPIC}",
             query=(METADATA,), shape=dict),
    Endpoint("transaction_buffer_stats", "GET", f"{V3}/transactionBufferStats/{_TOPIC}",
             query=(Query("lowWaterMarks", "low_water_marks", False), Query("segmentStats", "segment_stats", False)),
             shape=dict),
    Endpoint("pending_ack_stats", "GET", f"{V3}/pendingAckStats/{_TOPIC}/{{subName}}",
             query=(Query("lowWaterMarks", "low_water_marks", False),), shape=dict),
    Endpoint("transaction_in_buffer_stats", "GET",
             f"{V3}/transactionInBufferStats/{_TOPIC}/{{mostSigBits}}/{{leastSigBits}}", shape=dict),
    Endpoint("transaction_in_pending_ack_stats", "GET",
             f"{V3}/transactionInPendingAckStats/{_TOPIC}/{{subName}}/{{mostSigBits}}/{{leastSigBits}}", shape=dict),
    Endpoint("transaction_metadata", "GET", f"{V3}/transactionMetadata/{{mostSigBits}}/{{leastSigBits}}", shape=dict),
    Endpoint("slow_transactions", "GET", f"{V3}/slowTransactions/{{timeout}}",
             query=(Query("coordinatorId", "coordinator_id"),), shape=SLOW_TRANSACTIONS),
    Endpoint("scale_coordinators", "POST", f"{V3}/transactionCoordinator/replicas", body="replicas"),
    Endpoint("position_stats_in_pending_ack", "GET",
             f"{V3}/positionStatsInPendingAck/{_TOPIC}/{{subName}}/{{ledgerId}}/{{entryId}}",
             query=(Query("batchIndex", "batch_index"),), shape=dict),
    Endpoint("abort_transaction", "POST", f"{V3}/abortTransaction/{{mostSigBits}}/{{leastSigBits}}"),
    # -- brokers, namespaces, topics (/admin/v2) -------------------------------------------------------------------
    Endpoint("dynamic_config", "GET", f"{V2}/brokers/configuration/values", shape=CONFIG),
    Endpoint("runtime_config", "GET", f"{V2}/brokers/configuration/runtime", shape=CONFIG),
    Endpoint("update_dynamic_config", "POST", f"{V2}/brokers/configuration/{{configName}}/{{configValue}}"),
    Endpoint("delete_dynamic_config", "DELETE", f"{V2}/brokers/configuration/{{configName}}"),
    Endpoint("list_tenants", "GET", f"{V2}/tenants", shape=STRINGS),
    Endpoint("list_namespaces", "GET", f"{V2}/namespaces/{{tenant}}", shape=STRINGS),
    Endpoint("list_topics", "GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/topics",
             query=(Query("mode", value="ALL"), Query("includeSystemTopic", "include_system", False, always=True)),
             shape=STRINGS),
    Endpoint("unload_topic", "PUT", f"{V2}/persistent/{_TOPIC}/unload"),
    Endpoint("broker_versions", "GET", f"{V2}/brokers/version", shape=VERSION_TEXT),
    Endpoint("delete_subscription", "DELETE", f"{V2}/persistent/{_TOPIC}/subscription/{{subName}}"),
    Endpoint("delete_topic", "DELETE", f"{V2}/persistent/{_TOPIC}", query=(Query("force", value="true"),)),
    # -- cluster identity and brokers ------------------------------------------------------------------------------
    Endpoint("list_clusters", "GET", f"{V2}/clusters", shape=STRINGS),
    Endpoint("active_brokers", "GET", f"{V2}/brokers/{{cluster}}", shape=STRINGS),
    Endpoint("internal_configuration", "GET", f"{V2}/brokers/internal-configuration", shape=INTERNAL_CONFIGURATION),
    # -- what `txnadmin doctor` reads besides the above ------------------------------------------------------------
    Endpoint("topic_internal_stats", "GET", f"{V2}/persistent/{_TOPIC}/internalStats", shape=TOPIC_INTERNAL_STATS),
    Endpoint("topic_stats", "GET", f"{V2}/persistent/{_TOPIC}/stats", shape=dict),
    Endpoint("namespace_permissions", "GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/permissions", shape=dict),
    Endpoint("topic_permissions", "GET", f"{V2}/persistent/{_TOPIC}/permissions", shape=dict),
    Endpoint("subscription_permissions", "GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/permissions/subscription",
             shape=dict),
    Endpoint("subscription_auth_mode", "GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/subscriptionAuthMode",
             shape=str),
    Endpoint("tenant_info", "GET", f"{V2}/tenants/{{tenant}}", shape=dict),
)

# Protocol methods that are not rows: each is read through a row (or the broker's metrics page), as said here.
DERIVED: dict[str, str] = {
    "broker_runtime_config": "runtime_config, asked of the named broker itself",
    "broker_version": "broker_versions, asked of the named broker itself",
    "broker_metrics_text": "metrics_text, asked of the named broker itself",
    "broker_time_ms": "the Date header of broker_versions' reply",
    "metrics_text": "GET /metrics/: the broker's Prometheus page, outside the admin API (served by server/run.py)",
}
