"""A Pulsar broker stand-in for `doctor` tests: answers the admin REST paths doctor reads with the JSON a
broker returns (shapes from shared/reference/pulsar-transactions.md), from a mutable dict, through HttpAdmin's
own HTTP code (httpx MockTransport). Used for conditions the embedded engine cannot produce honestly."""

from __future__ import annotations

import json
import re
from email.utils import formatdate
from typing import Any, Optional
from urllib.parse import unquote

import httpx

V3 = "/admin/v3/transactions"
NOW = 1_790_000_000_000  # the broker's clock in these tests (ms)
NPE_PENDING_ACK_STATS = ('Cannot invoke "org.apache.pulsar.broker.service.persistent.PersistentSubscription.'
                         'getTransactionPendingAckStats(boolean)" because the return value of '
                         '"java.util.Map.get(Object)" is null')


def unexpected_error(message: str) -> str:
    """A broker's body for an exception no REST handler maps (RestException): plain text, message and stack trace."""
    return (f"\n --- An unexpected error occurred in the server ---\n\nMessage: {message}\n\nStacktrace:\n\n"
            f"java.lang.NullPointerException: {message}\n\tat org.apache.pulsar.broker.service.persistent."
            "PersistentTopic.getTransactionPendingAckStats(PersistentTopic.java:4321)\n")


def healthy_cluster(now_ms: int = NOW) -> dict:
    """Two Ready coordinators, one topic with a transactional subscription, nothing open."""
    topic = "persistent://public/default/orders"
    return {
        "now": now_ms,
        "date_header": True,
        "tc_disabled": False,
        "version": "4.2.5",
        # host:port → version: the cluster's active brokers, each answering at its own address; empty: the target
        # lists no cluster (a 404), so the broker behind the admin URL is the only one
        "brokers": {},
        "coordinators": {
            0: {"state": "Ready", "leastSigBits": 10, "lowWaterMark": 9, "ongoingTxnSize": 0,
                "recoverStartTime": now_ms - 86_400_000, "recoverEndTime": now_ms - 86_399_000},
            1: {"state": "Ready", "leastSigBits": 7, "lowWaterMark": 6, "ongoingTxnSize": 0,
                "recoverStartTime": now_ms - 86_400_000, "recoverEndTime": now_ms - 86_399_500},
        },
        "transactions": {},  # "(m,l)" → TransactionMetadata
        "topics": {
            topic: {
                "buffer": {"state": "Ready", "maxReadPosition": "12:40", "lastSnapshotTimestamps": now_ms - 60_000,
                           "ongoingTxnSize": 0, "recoverStartTime": now_ms - 86_400_000,
                           "recoverEndTime": now_ms - 86_399_900, "snapshotType": "Single",
                           "totalAbortedTransactions": 3},
                "internal": {"entriesAddedCounter": 41, "numberOfEntries": 41, "totalSize": 4100,
                             "currentLedgerEntries": 41, "currentLedgerSize": 4100,
                             "lastLedgerCreatedTimestamp": "2026-09-21T10:00:00.000Z", "waitingCursorsCount": 0,
                             "pendingAddEntriesCount": 0, "lastConfirmedEntry": "12:40", "state": "LedgerOpened",
                             "ledgers": [{"ledgerId": 12, "entries": 0, "size": 0, "offloaded": False,
                                          "underReplicated": False}],
                             "cursors": {"billing": {"markDeletePosition": "12:40", "readPosition": "12:41"}}},
                "subscriptions": {
                    "billing": {"state": "Ready", "ongoingTxnSize": 0, "recoverStartTime": now_ms - 86_400_000,
                                "recoverEndTime": now_ms - 86_399_800},
                },
            },
        },
        "extra_system_topics": [],  # e.g. leftover `…__transaction_pending_ack` names
        "runtime": {"transactionLogBatchedWriteEnabled": "false", "transactionPendingAckBatchedWriteEnabled": "false",
                    "maxMessageSize": "5242880"},
        "metrics": "",
        "metrics_status": 404,
        # what the permission reads answer: namespace → {role: [actions]}, topic → {role: [actions]},
        # namespace → {subscription: [roles]}, tenant → TenantInfo; a key → (status, reason) answers that error
        "grants": {"namespaces": {}, "topics": {}, "subscriptions": {}, "tenants": {}},
        "publishers": {},  # topic → [PublisherStats] in its topic stats
    }


class BrokerStandIn:
    """``admin()`` returns an HttpAdmin wired to this stand-in; mutate ``state`` between calls."""

    base = "http://broker.example:8080"

    def __init__(self, state: Optional[dict] = None):
        self.state = state if state is not None else healthy_cluster()
        self.calls: list[str] = []

    def admin(self):
        from txnadmin.admin.http import HttpAdmin

        return HttpAdmin(self.base, transport=httpx.MockTransport(self.handle), retry_backoff=0)

    # -- routing ----------------------------------------------------------------------------
    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode().split("?", 1)[0]
        self.calls.append(f"{request.method} {path}")
        try:
            status, body = self._at(request.url.netloc.decode(), path) or \
                self._route(request.method, path, dict(request.url.params))
        except KeyError as exc:
            status, body = 404, {"reason": f"Not found: {exc}"}
        headers = {}
        if self.state.get("date_header", True):
            headers["Date"] = formatdate(self.state["now"] / 1000, usegmt=True)
        if isinstance(body, str):
            return httpx.Response(status, text=body, headers=headers)
        if body is None:
            return httpx.Response(status, headers=headers)
        return httpx.Response(status, content=json.dumps(body).encode(),
                              headers=dict(headers, **{"Content-Type": "application/json"}))

    def _at(self, host: str, path: str) -> Optional[tuple[int, Any]]:
        """What only the broker at ``host`` answers: its own version (None: the shared routes answer)."""
        brokers = self.state.get("brokers") or {}
        if host in brokers and path == "/admin/v2/brokers/version":
            return (200, brokers[host]) if brokers[host] is not None else (503, {"reason": "Service Unavailable"})
        return None

    def _topic(self, tenant: str, ns: str, local: str) -> str:
        return f"persistent://{unquote(tenant)}/{unquote(ns)}/{unquote(local)}"

    def _route(self, method: str, path: str, params: dict) -> tuple[int, Any]:
        s = self.state
        if path in s.get("replies", {}):  # a path answered as a test says (any reply the spec allows, or garbage)
            return 200, s["replies"][path]
        tc_disabled = (503, {"reason": "This Broker is not configured with transactionCoordinatorEnabled=true."})
        if path == "/admin/v2/brokers/version":
            return 200, s["version"]
        if path == "/metrics/" or path == "/metrics":
            return (s["metrics_status"], s["metrics"]) if s["metrics_status"] == 200 else (s["metrics_status"], {"reason": "Not Found"})
        if path == "/admin/v2/brokers/configuration/runtime":
            return 200, s["runtime"]
        m = re.fullmatch(r"/admin/v2/brokers/configuration/([^/]+)/([^/]+)", path)
        if m and method == "POST":  # brokers update-dynamic-config: the runtime configuration shows it at once
            s["runtime"][unquote(m.group(1))] = unquote(m.group(2))
            return 204, None
        if path == "/admin/v2/clusters" and s.get("brokers"):
            return 200, ["standin"]
        if path == "/admin/v2/brokers/standin" and s.get("brokers"):
            return 200, sorted(s["brokers"])
        if path == "/admin/v2/tenants":
            return 200, sorted({t.split("://")[1].split("/")[0] for t in s["topics"]} | {"pulsar"})
        m = re.fullmatch(r"/admin/v2/namespaces/([^/]+)", path)
        if m:
            tenant = unquote(m.group(1))
            found = {t.split("://")[1].rsplit("/", 1)[0] for t in s["topics"]} | {"pulsar/system"}
            return 200, sorted(ns for ns in found if ns.split("/")[0] == tenant)
        g = s["grants"]
        m = re.fullmatch(r"/admin/v2/namespaces/([^/]+)/([^/]+)/permissions(/subscription)?", path)
        if m:
            ns = f"{unquote(m.group(1))}/{unquote(m.group(2))}"
            return self._answer(g["subscriptions" if m.group(3) else "namespaces"].get(ns, {}))
        m = re.fullmatch(r"/admin/v2/namespaces/([^/]+)/([^/]+)/subscriptionAuthMode", path)
        if m:
            mode = g.get("modes", {}).get(f"{unquote(m.group(1))}/{unquote(m.group(2))}", "None")
            return (mode[0], {"reason": mode[1]}) if isinstance(mode, tuple) else (200, json.dumps(mode))
        m = re.fullmatch(r"/admin/v2/tenants/([^/]+)", path)
        if m:
            return self._answer(g["tenants"].get(unquote(m.group(1)), {"adminRoles": [], "allowedClusters": []}))
        m = re.fullmatch(r"/admin/v2/persistent/([^/]+)/([^/]+)/([^/]+)/permissions", path)
        if m:
            return self._answer(g["topics"].get(self._topic(*m.groups()), {}))
        m = re.fullmatch(r"/admin/v2/persistent/([^/]+)/([^/]+)/([^/]+)/stats", path)
        if m:
            topic = self._topic(*m.groups())
            return 200, {"publishers": s["publishers"].get(topic, []), "subscriptions": {}}
        m = re.fullmatch(r"/admin/v2/namespaces/([^/]+)/([^/]+)/topics", path)
        if m:
            ns = f"{unquote(m.group(1))}/{unquote(m.group(2))}"
            names = [t for t in s["topics"] if t.split("://")[1].rsplit("/", 1)[0] == ns]
            for topic in list(names):
                names += [f"{topic}-{sub}__transaction_pending_ack" for sub in s["topics"][topic]["subscriptions"]]
            names += [t for t in s["extra_system_topics"] if t.split("://")[1].rsplit("/", 1)[0] == ns]
            if ns == "pulsar/system" and not s["tc_disabled"]:
                names += [f"persistent://pulsar/system/transaction_coordinator_assign-partition-{i}"
                          for i in sorted(s.get("assign_partitions", s["coordinators"]))]
            return 200, sorted(set(names))
        m = re.fullmatch(r"/admin/v2/persistent/([^/]+)/([^/]+)/([^/]+)/internalStats", path)
        if m:
            return 200, s["topics"][self._topic(*m.groups())]["internal"]
        if path.startswith(V3):
            if s["tc_disabled"]:
                return tc_disabled
            return self._v3(method, path[len(V3):], params)
        return 404, {"reason": "Not Found"}

    @staticmethod
    def _answer(value: Any) -> tuple[int, Any]:
        return (value[0], {"reason": value[1]}) if isinstance(value, tuple) else (200, value)

    def _v3(self, method: str, path: str, params: dict) -> tuple[int, Any]:
        s = self.state
        if path == "/coordinators":
            owners = s.get("coordinator_brokers", {})
            return 200, [{"id": i, "brokerServiceUrl": owners.get(i, "pulsar://broker.example:6650")}
                         for i in sorted(s["coordinators"])]
        if path == "/coordinatorStats":
            cid = int(params["coordinatorId"])
            if cid not in s["coordinators"]:
                return 404, {"reason": f"Transaction coordinator not found! coordinator id : {cid}"}
            stats = s["coordinators"][cid]
            return (stats["status"], {"reason": stats["reason"]}) if "status" in stats else (200, stats)
        m = re.fullmatch(r"/slowTransactions/(\d+)", path)
        if m and "coordinatorId" not in params:  # every coordinator's, as a broker lists them (find-hanging asks so)
            listed: dict = {}
            for cid in sorted(s["coordinators"]):
                status, body = self._v3(method, path, dict(params, coordinatorId=str(cid)))
                if status != 200:
                    return status, body
                listed.update(body)
            return 200, listed
        if m:
            cid = int(params["coordinatorId"])
            stats = s["coordinators"].get(cid, {})
            if "status" in stats:  # a coordinator that does not answer does not list its transactions either
                return stats["status"], {"reason": stats["reason"]}
            # a metadata without timeoutAt (a garbled answer some tests send) is listed rather than hidden
            return 200, {k: v for k, v in s["transactions"].items() if k.startswith(f"({cid},")
                         and v.get("timeoutAt", int(m.group(1)) + 1) > int(m.group(1))}
        m = re.fullmatch(r"/transactionBufferStats/([^/]+)/([^/]+)/([^/]+)", path)
        if m:
            return 200, s["topics"][self._topic(*m.groups())]["buffer"]
        m = re.fullmatch(r"/pendingAckStats/([^/]+)/([^/]+)/([^/]+)/([^/]+)", path)
        if m:
            topic = s["topics"][self._topic(*m.groups()[:3])]
            sub = unquote(m.group(4))
            if sub not in topic["subscriptions"]:
                # PersistentTopic.getTransactionPendingAckStats dereferences the missing subscription: an NPE,
                # which the REST layer answers as a plain-text 500 with the message and the stack trace
                return 500, unexpected_error(NPE_PENDING_ACK_STATS)
            return 200, topic["subscriptions"][sub]
        m = re.fullmatch(r"/pendingAckInternalStats/([^/]+)/([^/]+)/([^/]+)/([^/]+)", path)
        if m:
            topic_name = self._topic(*m.groups()[:3])
            sub = unquote(m.group(4))
            if sub not in s["topics"][topic_name]["subscriptions"]:
                return 404, {"reason": f"{topic_name} not found subscription : {sub}"}  # SubscriptionNotFoundException
            stats = s["topics"][topic_name]["subscriptions"][sub]
            return 200, {"pendingAckLogStats": {
                "managedLedgerName": f"{topic_name.split('://')[1]}-{sub}__transaction_pending_ack",
                "managedLedgerInternalStats": {"lastLedgerCreatedTimestamp": stats.get("ledgerCreated",
                                                                                       "2026-09-21T10:00:00.000Z"),
                                               "ledgers": [{"ledgerId": 21, "entries": 0, "size": 0}]}}}
        m = re.fullmatch(r"/abortTransaction/(\d+)/(\d+)", path)
        if m and method == "POST":
            key = f"({m.group(1)},{m.group(2)})"
            meta = s["transactions"].get(key)
            if meta is None:
                return 404, {"reason": f"Transaction not found {key}"}
            del s["transactions"][key]
            for topic in meta.get("producedPartitions", {}):
                self._release(topic)
            return 204, None
        m = re.fullmatch(r"/coordinatorInternalStats/(\d+)", path)
        if m:
            return 200, {"transactionLogStats": {
                "managedLedgerName": f"pulsar/system/persistent/__transaction_log_{m.group(1)}",
                "managedLedgerInternalStats": {"lastLedgerCreatedTimestamp": "2026-09-21T10:00:00.000Z",
                                               "ledgers": [{"ledgerId": 3, "entries": 0, "size": 0}]}}}
        return 404, {"reason": "Not Found"}

    def _release(self, topic: str) -> None:
        """The broker side of an abort: the buffer forgets the transaction; the max read position catches up."""
        t = self.state["topics"].get(topic)
        if t is None:
            return
        buffer = t["buffer"]
        buffer["ongoingTxnSize"] = max(0, buffer["ongoingTxnSize"] - 1)
        if buffer["ongoingTxnSize"] == 0:
            buffer["maxReadPosition"] = t["internal"]["lastConfirmedEntry"]


def open_transaction(state: dict, txn: str, opened_ago_ms: int, timeout_ms: int, status: str = "OPEN",
                     produced: Optional[list[str]] = None, owner: Optional[str] = None,
                     acked: Optional[dict[str, list[str]]] = None) -> dict:
    meta = {"txnId": txn, "status": status, "openTimestamp": state["now"] - opened_ago_ms, "timeoutAt": timeout_ms,
            "producedPartitions": {t: {"startPosition": "12:5", "aborted": False} for t in produced or []},
            "ackedPartitions": {t: {sub: {"cumulativeAckPosition": None} for sub in subs}
                                for t, subs in (acked or {}).items()}}
    if owner:
        meta["owner"] = owner
    state["transactions"][txn] = meta
    for topic in produced or []:
        t = state["topics"][topic]
        t["buffer"]["ongoingTxnSize"] += 1
        t["buffer"]["maxReadPosition"] = "12:4"
        t["internal"]["lastConfirmedEntry"] = "12:60"
    return meta
