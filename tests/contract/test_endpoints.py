"""The endpoint table (txnadmin/admin/endpoints.py) is Pulsar's API, and both ends are built from it.

* every row's method and path template is one Pulsar publishes, its query parameters are Pulsar's names with
  Pulsar's defaults;
* every row has an HttpAdmin method, a LocalAdmin method and a `serve` route, and every protocol method is a row or
  says which row it reads through;
* a round trip: each HttpAdmin method, called with awkward arguments (a "/" and a "%" in names), goes over real HTTP
  to a real server built from the table and arrives at the same method of the served admin with the same
  arguments, and the served answer comes back — so a URL built from the table is the route built from it.
"""

from __future__ import annotations

import inspect
import threading
from urllib.parse import parse_qs

import pytest

from txnadmin.admin.endpoints import (CONFIG, COORDINATOR_INTERNAL_STATS, COORDINATORS, DERIVED, ENDPOINTS,
                                      INTERNAL_CONFIGURATION, PENDING_ACK_INTERNAL_STATS, SLOW_TRANSACTIONS, STRINGS,
                                      TOPIC_INTERNAL_STATS, VERSION_TEXT, Endpoint, Query)
from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import TransactionsAdmin, TxnId
from txnadmin.server.app import create_app
from txnadmin.server.run import free_port

V3, V2, T = "/admin/v3/transactions", "/admin/v2", "{tenant}/{namespace}/{topic}"
NO_DEFAULT = object()  # an optional parameter Pulsar declares without a default (sent only when set)

# Pulsar's published admin paths and their query parameters with Pulsar's defaults: the Swagger files Pulsar
# publishes (pulsar-site static/swagger/master: v3/swaggertransactions.json, v2/swagger.json) and, for what that
# snapshot predates (transactionBufferInternalStats, abortTransaction, segmentStats), the @Path and @QueryParam
# values of Transactions.java as /work/shared/reference/pulsar-transactions.md records them.
AUTHORITATIVE = {"authoritative": False}
PUBLISHED: dict[tuple[str, str], dict[str, object]] = {
    ("GET", f"{V3}/coordinators"): {},
    ("GET", f"{V3}/coordinatorStats"): {**AUTHORITATIVE, "coordinatorId": NO_DEFAULT},
    ("GET", f"{V3}/coordinatorInternalStats/{{coordinatorId}}"): {**AUTHORITATIVE, "metadata": False},
    ("GET", f"{V3}/pendingAckInternalStats/{T}/{{subName}}"): {**AUTHORITATIVE, "metadata": False},
    ("GET", f"{V3}/transactionBufferInternalStats/{T}"): {**AUTHORITATIVE, "metadata": False},
    ("GET", f"{V3}/transactionBufferStats/{T}"): {**AUTHORITATIVE, "lowWaterMarks": False, "segmentStats": False},
    ("GET", f"{V3}/pendingAckStats/{T}/{{subName}}"): {**AUTHORITATIVE, "lowWaterMarks": False},
    ("GET", f"{V3}/transactionInBufferStats/{T}/{{mostSigBits}}/{{leastSigBits}}"): AUTHORITATIVE,
    ("GET", f"{V3}/transactionInPendingAckStats/{T}/{{subName}}/{{mostSigBits}}/{{leastSigBits}}"): AUTHORITATIVE,
    ("GET", f"{V3}/transactionMetadata/{{mostSigBits}}/{{leastSigBits}}"): AUTHORITATIVE,
    ("GET", f"{V3}/slowTransactions/{{timeout}}"): {**AUTHORITATIVE, "coordinatorId": NO_DEFAULT},
    ("POST", f"{V3}/transactionCoordinator/replicas"): {},
    ("GET", f"{V3}/positionStatsInPendingAck/{T}/{{subName}}/{{ledgerId}}/{{entryId}}"):
        {**AUTHORITATIVE, "batchIndex": NO_DEFAULT},
    ("POST", f"{V3}/abortTransaction/{{mostSigBits}}/{{leastSigBits}}"): AUTHORITATIVE,
    ("GET", f"{V2}/brokers/configuration/values"): {},
    ("GET", f"{V2}/brokers/configuration/runtime"): {},
    ("POST", f"{V2}/brokers/configuration/{{configName}}/{{configValue}}"): {},
    ("DELETE", f"{V2}/brokers/configuration/{{configName}}"): {},
    ("GET", f"{V2}/brokers/version"): {},
    ("GET", f"{V2}/brokers/internal-configuration"): {},
    ("GET", f"{V2}/brokers/{{cluster}}"): {},
    ("GET", f"{V2}/clusters"): {},
    ("GET", f"{V2}/tenants"): {},
    ("GET", f"{V2}/namespaces/{{tenant}}"): {},
    ("GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/topics"): {"mode": "PERSISTENT", "includeSystemTopic": False},
    ("PUT", f"{V2}/persistent/{T}/unload"): AUTHORITATIVE,
    ("DELETE", f"{V2}/persistent/{T}"): {**AUTHORITATIVE, "force": False, "deleteSchema": False},
    ("DELETE", f"{V2}/persistent/{T}/subscription/{{subName}}"): {**AUTHORITATIVE, "force": False},
    ("GET", f"{V2}/persistent/{T}/internalStats"): {**AUTHORITATIVE, "metadata": False},
    # doctor's client-versions and transaction-permissions checks (PersistentTopics.java, Namespaces.java,
    # Tenants.java: getStats, getPermissionsOnTopic, getPermissions, getPermissionOnSubscription, getTenantAdmin)
    ("GET", f"{V2}/persistent/{T}/stats"): AUTHORITATIVE,  # (its other parameters: txnadmin sends none)
    ("GET", f"{V2}/persistent/{T}/permissions"): {},
    ("GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/permissions"): {},
    ("GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/permissions/subscription"): {},
    ("GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/subscriptionAuthMode"): {},
    ("GET", f"{V2}/tenants/{{tenant}}"): {},
}


def unpublished(rows) -> list[str]:
    """What in ``rows`` is not Pulsar's published API: an unknown method/path, or a query name or default of ours."""
    wrong = []
    for row in rows:
        published = PUBLISHED.get((row.method, row.path))
        if published is None:
            wrong.append(f"{row.call}: {row.method} {row.path} is not a published path")
            continue
        for query in row.query:
            if query.name not in published:
                wrong.append(f"{row.call}: ?{query.name} is not a parameter of {row.path}")
            elif query.arg is not None and query.default != (None if published[query.name] is NO_DEFAULT
                                                             else published[query.name]):
                wrong.append(f"{row.call}: ?{query.name} defaults to {published[query.name]!r} in Pulsar")
    return wrong


def test_every_row_is_a_published_pulsar_path_with_pulsars_query_names_and_defaults():
    assert not unpublished(ENDPOINTS.values())


def test_the_published_check_refuses_what_pulsar_does_not_publish():
    typo = Endpoint("pending_ack_stats", "GET", f"{V3}/pendingAckStat/{T}/{{subName}}")
    wrong_method = Endpoint("abort_transaction", "DELETE", f"{V3}/abortTransaction/{{mostSigBits}}/{{leastSigBits}}")
    wrong_default = Endpoint("list_topics", "GET", f"{V2}/namespaces/{{tenant}}/{{namespace}}/topics",
                             query=(Query("includeSystemTopic", "include_system", True),))
    unknown_name = Endpoint("pending_ack_stats", "GET", f"{V3}/pendingAckStats/{T}/{{subName}}",
                            query=(Query("lowWatermarks", "low_water_marks", False),))
    assert len(unpublished([typo, wrong_method, wrong_default, unknown_name])) == 4
    with pytest.raises(ValueError, match="subscriptionName"):  # a variable no argument carries
        Endpoint("pending_ack_stats", "GET", f"{V3}/pendingAckStats/{T}/{{subscriptionName}}")


def _protocol_methods() -> set[str]:
    return {n for n, v in vars(TransactionsAdmin).items() if callable(v) and not n.startswith("_")} - {"close"}


def test_every_protocol_call_is_a_row_or_says_which_row_it_reads_through():
    assert set(ENDPOINTS).isdisjoint(DERIVED)
    assert set(ENDPOINTS) | set(DERIVED) == _protocol_methods()


def test_every_row_has_an_http_method_a_local_method_and_a_route():
    routes = {(route.path, method) for route in create_app(Recorder()).routes for method in route.methods}
    for row in ENDPOINTS.values():
        assert callable(getattr(HttpAdmin, row.call, None)), row
        assert callable(getattr(LocalAdmin, row.call, None)), row
        assert (row.path, row.method) in routes, row
        assert row.args == tuple(inspect.signature(getattr(TransactionsAdmin, row.call)).parameters)[1:], row


# -- the round trip -------------------------------------------------------------------------------------------------
SET = {  # every argument given, names with "/", "%" and a space
    "topic": "persistent://public/default/team/50%off", "subscription": "audit/sub 1%", "metadata": True,
    "coordinator_id": 2, "low_water_marks": True, "segment_stats": True, "txn": TxnId(3, 42), "timeout_ms": 1500,
    "replicas": 5, "ledger_id": 7, "entry_id": 9, "batch_index": 4, "name": "transactionLogBatchedWriteEnabled",
    "value": "true", "tenant": "public", "namespace": "public/default", "include_system": False,
    "cluster": "standalone",
}
ANSWERS = [  # (shape, an answer of that shape)
    (COORDINATORS, [{"id": 0, "brokerServiceUrl": "pulsar://broker:6650"}]),
    (COORDINATOR_INTERNAL_STATS, {"transactionLogStats": {"managedLedgerInternalStats": {"ledgers": [{"ledgerId": 5}]}}}),
    (PENDING_ACK_INTERNAL_STATS, {"pendingAckLogStats": {"managedLedgerInternalStats": {"ledgers": [{"ledgerId": 6}]}}}),
    (STRINGS, ["public/default", "a/b"]),
    (CONFIG, {"transactionLogBatchedWriteEnabled": "true"}),
    (VERSION_TEXT, {"broker:8080": "4.0.1"}),
    (dict, {"state": "Ready", "ongoingTxnSize": 1}),
    (str, "Prefix"),  # subscriptionAuthMode: a bare JSON string
    (SLOW_TRANSACTIONS, {"(0,1)": {"txnId": "(0,1)", "status": "OPEN", "producedPartitions": {}}}),
    (INTERNAL_CONFIGURATION, {"metadataStoreUrl": "zk:zk-1:2181"}),
    (TOPIC_INTERNAL_STATS, {"lastConfirmedEntry": "3:4"}),
]


def answer(row) -> object:
    if row.shape is None:  # unchecked replies: the writes, which answer nothing
        return None
    return next(value for shape, value in ANSWERS if shape == row.shape)


class Recorder:
    """The served admin: records each call with its arguments and answers what the row's shape wants."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str):
        row = ENDPOINTS[name]

        def call(*args):
            self.calls.append((name, args))
            return answer(row)

        return call


@pytest.fixture(scope="module")
def served():
    """A real server (uvicorn on a socket) built from the table around a Recorder, and what reached it."""
    import uvicorn

    recorder, seen = Recorder(), []
    app = create_app(recorder, "round-trip-token")

    async def capturing(scope, receive, send):
        if scope["type"] == "http":
            seen.append((scope["method"], scope["raw_path"].decode(), scope["query_string"].decode()))
        await app(scope, receive, send)

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(capturing, host="127.0.0.1", port=port, log_level="error",
                                           access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.02)
    with HttpAdmin(f"http://127.0.0.1:{port}", token="round-trip-token", retry_backoff=0) as admin:
        yield admin, recorder, seen
    server.should_exit = True
    thread.join(timeout=10)


def _defaults(call: str) -> dict[str, object]:
    """Every optional argument at the protocol's default, the others as in SET."""
    parameters = list(inspect.signature(getattr(TransactionsAdmin, call)).parameters.values())[1:]
    return {p.name: SET[p.name] if p.default is inspect.Parameter.empty else p.default for p in parameters}


@pytest.mark.parametrize("variant", ["every argument set", "optional arguments left at their defaults"])
@pytest.mark.parametrize("call", sorted(ENDPOINTS))
def test_each_http_call_reaches_the_same_call_of_the_served_admin(served, call, variant):
    admin, recorder, seen = served
    row = ENDPOINTS[call]
    values = {arg: SET[arg] for arg in row.args} if variant == "every argument set" else _defaults(call)
    args = tuple(values[arg] for arg in row.args)
    recorder.calls.clear()
    result = getattr(admin, call)(*args)
    assert recorder.calls == [(call, args)]
    expected = answer(row)
    if row.shape == VERSION_TEXT:  # the bare version comes back keyed by the broker asked
        assert list(result.values()) == list(expected.values())
    else:
        assert result == expected
    method, _, query = seen[-1]
    assert method == row.method
    sent = parse_qs(query)
    assert set(sent) <= set(PUBLISHED[(row.method, row.path)])
    for q in row.query:
        if q.arg is not None and variant == "every argument set" and values[q.arg] != q.default:
            assert sent[q.name] == [str(values[q.arg]).lower() if q.is_flag else str(values[q.arg])]
