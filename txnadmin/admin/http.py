"""`HttpAdmin`: the TransactionsAdmin protocol over Pulsar's admin REST API, with httpx.

``transport=`` is the test seam (httpx's MockTransport / ASGI / WSGI transports). Redirects (307 to the
owner broker) are followed here, re-sending credentials; idempotent GETs retry with backoff on 5xx
and connection errors. Secrets never appear in errors.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote, urlencode

import httpx

from .protocol import (AdminError, Json, NotAuthorizedError, NotFoundError, TargetUnreachableError, TxnId)

V3 = "/admin/v3/transactions"
MAX_REDIRECTS = 5
GET_ATTEMPTS = 3


def topic_path(topic: str) -> str:
    """`persistent://t/ns/x` (or `t/ns/x`, or `x`) → `t/ns/<x URL-encoded>` — Pulsar's REST path, no domain."""
    name = topic
    if "://" in name:
        name = name.split("://", 1)[1]
    parts = name.split("/")
    if len(parts) == 1:
        parts = ["public", "default", parts[0]]
    if len(parts) < 3:
        raise AdminError(f"Invalid topic name '{topic}'", 412)
    tenant, namespace, local = parts[0], parts[1], "/".join(parts[2:])
    return f"{quote(tenant, safe='')}/{quote(namespace, safe='')}/{quote(local, safe='')}"


def token_from_auth(auth_plugin: Optional[str], auth_params: Optional[str]) -> Optional[str]:
    """Pulsar's AuthenticationToken params: `token:XYZ`, `file:///path`, or `{"token": "…"}`."""
    if not auth_params:
        return None
    params = auth_params.strip()
    if params.startswith("{"):
        try:
            params = json.loads(params).get("token", "")
        except json.JSONDecodeError:
            raise TargetUnreachableError("authParams: not valid JSON") from None
        if not params.startswith(("token:", "file:")):
            return params or None
    if params.startswith("token:"):
        return params[len("token:"):]
    if params.startswith("file:"):
        path = params[len("file:"):]
        path = path[2:] if path.startswith("//") else path
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise TargetUnreachableError(f"authParams file {path}: cannot read ({exc.strerror or exc})") from None
    if auth_plugin and "token" in auth_plugin.lower():
        return params
    return None


def _environment_proxy(base_url: str) -> Optional[str]:
    """The proxy the environment names for ``base_url`` (None when unset or bypassed by NO_PROXY)."""
    import urllib.request

    url = httpx.URL(base_url)
    proxy = urllib.request.getproxies().get(url.scheme)
    if not proxy or urllib.request.proxy_bypass(url.host):
        return None
    return proxy


class HttpAdmin:
    def __init__(self, base_url: str, *, token: Optional[str] = None, timeout: float = 30.0,
                 tls_trust_certs: Optional[str] = None, tls_allow_insecure: bool = False,
                 tls_hostname_verification: bool = False, transport: Optional[httpx.BaseTransport] = None,
                 retry_backoff: float = 0.2):
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.retry_backoff = retry_backoff
        verify: Any = True
        if self.base_url.startswith("https://"):
            ctx = ssl.create_default_context(cafile=tls_trust_certs) if tls_trust_certs else ssl.create_default_context()
            ctx.check_hostname = bool(tls_hostname_verification) and not tls_allow_insecure
            if tls_allow_insecure:
                ctx.verify_mode = ssl.CERT_NONE
            verify = ctx
        # The transport is used directly: redirects, credentials and retries are handled here already, and
        # httpx.Client's layers on top (URL merging, auth flow, cookies, hooks) cost a third of the client's CPU
        # per call — which is what bounds a 10,000-store status poll. Each thread gets its own one-connection
        # transport: httpcore checks every pooled connection on every request (a poll() each), so one shared
        # pool of N sockets for N threads costs O(N) per call. ``transport=`` (the test seam) is shared as given.
        self._verify = verify
        self._proxy = _environment_proxy(self.base_url)  # HTTP(S)_PROXY / NO_PROXY, as httpx.Client honours them
        self._shared_transport = transport
        self._local = threading.local()
        self._transports: dict[threading.Thread, httpx.BaseTransport] = {}
        self._transports_lock = threading.Lock()
        self._timeout = httpx.Timeout(timeout).as_dict()

    def _transport(self) -> httpx.BaseTransport:
        if self._shared_transport is not None:
            return self._shared_transport
        transport = getattr(self._local, "transport", None)
        if transport is None:
            transport = httpx.HTTPTransport(verify=self._verify, proxy=self._proxy,
                                            limits=httpx.Limits(max_connections=4, max_keepalive_connections=1))
            self._local.transport = transport
            with self._transports_lock:
                for thread in [t for t in self._transports if not t.is_alive()]:
                    self._transports.pop(thread).close()  # a finished pool thread's socket
                self._transports[threading.current_thread()] = transport
        return transport

    @classmethod
    def from_target(cls, target) -> "HttpAdmin":
        tls = target.tls
        return cls(target.url, token=token_from_auth(target.auth_plugin, target.auth_params),
                   timeout=float(tls.get("requestTimeout") or 30.0),
                   tls_trust_certs=tls.get("tlsTrustCertsFilePath"),
                   tls_allow_insecure=str(tls.get("tlsAllowInsecureConnection", "false")).lower() == "true",
                   tls_hostname_verification=str(tls.get("tlsEnableHostnameVerification", "false")).lower() == "true")

    def close(self) -> None:
        if self._shared_transport is not None:
            self._shared_transport.close()
        with self._transports_lock:
            for transport in self._transports.values():
                transport.close()
            self._transports.clear()

    # -- transport --------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def _request(self, method: str, path: str, params: Optional[dict] = None, body: Any = None) -> Any:
        params = {k: ("true" if v is True else "false" if v is False else v)
                  for k, v in (params or {}).items() if v is not None}
        content = json.dumps(body).encode() if body is not None else None
        attempts = GET_ATTEMPTS if method == "GET" else 1
        for attempt in range(attempts):
            try:
                response = self._send(method, path, params, content)
            except TargetUnreachableError:
                if attempt + 1 >= attempts:
                    raise
                time.sleep(self.retry_backoff * (2 ** attempt))
                continue
            if response.status_code >= 500 and attempt + 1 < attempts:
                time.sleep(self.retry_backoff * (2 ** attempt))
                continue
            return self._result(response)
        raise AdminError("no response", 0)  # not reached: the loop returns or raises

    def _send(self, method: str, path: str, params: dict, content: Optional[bytes]) -> httpx.Response:
        query = f"?{urlencode(params, quote_via=quote)}" if params else ""
        url = httpx.URL(f"{self.base_url}{path}{query}")
        for _ in range(MAX_REDIRECTS + 1):
            headers = self._headers()
            if content is not None:
                headers["Content-Type"] = "application/json"
            request = httpx.Request(method, url, content=content, headers=headers,
                                    extensions={"timeout": self._timeout})
            try:
                response = self._transport().handle_request(request)
                response.request = request
                try:
                    response.read()
                finally:
                    response.close()
            except httpx.ConnectError as exc:
                raise TargetUnreachableError(f"{self.base_url}: cannot connect ({_short(exc)})") from None
            except httpx.TimeoutException:
                raise TargetUnreachableError(f"{self.base_url}: no answer in time (timeout)") from None
            except httpx.TransportError as exc:
                raise TargetUnreachableError(f"{self.base_url}: connection failed ({_short(exc)})") from None
            if response.status_code in (301, 302, 307, 308) and "location" in response.headers:
                # The owner broker answers; credentials are re-applied on every hop.
                url = url.join(response.headers["location"])
                continue
            return response
        raise AdminError(f"{self.base_url}{path}: too many redirects", 0)

    def _result(self, response: httpx.Response) -> Any:
        status = response.status_code
        if 200 <= status < 300:
            if status == 204 or not response.content:
                return None
            try:
                return response.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise AdminError(f"malformed JSON from {response.request.url.copy_with(query=None)}", 502) from None
        reason = _reason(response)
        if status in (401, 403):
            raise NotAuthorizedError(f"not authorized: {reason}" if reason else "not authorized", status)
        if status == 404:
            raise NotFoundError(reason or "Not Found")
        raise AdminError(reason or f"HTTP {status}", status)

    # -- transactions -------------------------------------------------------------------------
    def list_coordinators(self) -> list[Json]:
        return self._request("GET", f"{V3}/coordinators")

    def coordinator_stats(self, coordinator_id: Optional[int] = None) -> Json:
        return self._request("GET", f"{V3}/coordinatorStats", {"coordinatorId": coordinator_id})

    def coordinator_internal_stats(self, coordinator_id: int, metadata: bool = False) -> Json:
        return self._request("GET", f"{V3}/coordinatorInternalStats/{coordinator_id}", {"metadata": metadata or None})

    def pending_ack_internal_stats(self, topic: str, subscription: str, metadata: bool = False) -> Json:
        return self._request("GET", f"{V3}/pendingAckInternalStats/{topic_path(topic)}/{quote(subscription, safe='')}",
                             {"metadata": metadata or None})

    def buffer_snapshot_internal_stats(self, topic: str, metadata: bool = False) -> Json:
        return self._request("GET", f"{V3}/transactionBufferInternalStats/{topic_path(topic)}",
                             {"metadata": metadata or None})

    def transaction_buffer_stats(self, topic: str, low_water_marks: bool = False, segment_stats: bool = False) -> Json:
        return self._request("GET", f"{V3}/transactionBufferStats/{topic_path(topic)}",
                             {"lowWaterMarks": low_water_marks or None, "segmentStats": segment_stats or None})

    def pending_ack_stats(self, topic: str, subscription: str, low_water_marks: bool = False) -> Json:
        return self._request("GET", f"{V3}/pendingAckStats/{topic_path(topic)}/{quote(subscription, safe='')}",
                             {"lowWaterMarks": low_water_marks or None})

    def transaction_in_buffer_stats(self, txn: TxnId, topic: str) -> Json:
        return self._request("GET", f"{V3}/transactionInBufferStats/{topic_path(topic)}/{txn.most_bits}/{txn.least_bits}")

    def transaction_in_pending_ack_stats(self, txn: TxnId, topic: str, subscription: str) -> Json:
        return self._request("GET", f"{V3}/transactionInPendingAckStats/{topic_path(topic)}/"
                                    f"{quote(subscription, safe='')}/{txn.most_bits}/{txn.least_bits}")

    def transaction_metadata(self, txn: TxnId) -> Json:
        return self._request("GET", f"{V3}/transactionMetadata/{txn.most_bits}/{txn.least_bits}")

    def slow_transactions(self, timeout_ms: int, coordinator_id: Optional[int] = None) -> Json:
        return self._request("GET", f"{V3}/slowTransactions/{timeout_ms}", {"coordinatorId": coordinator_id})

    def scale_coordinators(self, replicas: int) -> None:
        if replicas <= 0:
            raise AdminError("Number of transaction coordinators must be more than 0", 406)
        self._request("POST", f"{V3}/transactionCoordinator/replicas", body=replicas)

    def position_stats_in_pending_ack(self, topic: str, subscription: str, ledger_id: int, entry_id: int,
                                      batch_index: Optional[int] = None) -> Json:
        return self._request("GET", f"{V3}/positionStatsInPendingAck/{topic_path(topic)}/"
                                    f"{quote(subscription, safe='')}/{ledger_id}/{entry_id}", {"batchIndex": batch_index})

    def abort_transaction(self, txn: TxnId) -> None:
        self._request("POST", f"{V3}/abortTransaction/{txn.most_bits}/{txn.least_bits}")

    # -- /admin/v2 ----------------------------------------------------------------------------
    def dynamic_config(self) -> dict[str, str]:
        return self._request("GET", "/admin/v2/brokers/configuration/values") or {}

    def runtime_config(self) -> dict[str, str]:
        return self._request("GET", "/admin/v2/brokers/configuration/runtime") or {}

    def update_dynamic_config(self, name: str, value: str) -> None:
        self._request("POST", f"/admin/v2/brokers/configuration/{quote(name, safe='')}/{quote(str(value), safe='')}")

    def delete_dynamic_config(self, name: str) -> None:
        self._request("DELETE", f"/admin/v2/brokers/configuration/{quote(name, safe='')}")

    def list_tenants(self) -> list[str]:
        return self._request("GET", "/admin/v2/tenants")

    def list_namespaces(self, tenant: str) -> list[str]:
        return self._request("GET", f"/admin/v2/namespaces/{quote(tenant, safe='')}")

    def list_topics(self, namespace: str, include_system: bool = True) -> list[str]:
        tenant, ns = namespace.split("/", 1)
        return self._request("GET", f"/admin/v2/namespaces/{quote(tenant, safe='')}/{quote(ns, safe='')}/topics",
                             {"mode": "ALL", "includeSystemTopic": include_system})

    def unload_topic(self, topic: str) -> None:
        self._request("PUT", f"/admin/v2/persistent/{topic_path(topic)}/unload")

    def broker_versions(self) -> dict[str, str]:
        """The answering broker's version; Pulsar sends it as a bare string, quoted or not."""
        response = self._send("GET", "/admin/v2/brokers/version", {}, None)
        if response.status_code != 200:
            self._result(response)
        host = httpx.URL(self.base_url).netloc.decode()
        return {host: response.text.strip().strip('"')}

    def delete_subscription(self, topic: str, subscription: str) -> None:
        self._request("DELETE", f"/admin/v2/persistent/{topic_path(topic)}/subscription/{quote(subscription, safe='')}")

    def delete_topic(self, topic: str) -> None:
        self._request("DELETE", f"/admin/v2/persistent/{topic_path(topic)}", {"force": True})

    # -- cluster identity and brokers ---------------------------------------------------------
    def list_clusters(self) -> list[str]:
        return self._request("GET", "/admin/v2/clusters") or []

    def active_brokers(self, cluster: str) -> list[str]:
        return self._request("GET", f"/admin/v2/brokers/{quote(cluster, safe='')}") or []

    def internal_configuration(self) -> Json:
        return self._request("GET", "/admin/v2/brokers/internal-configuration") or {}

    def broker_runtime_config(self, broker: str) -> dict[str, str]:
        """Ask ``broker`` itself (same scheme, credentials and TLS as this admin): only it knows its values."""
        return self._at_broker(broker, lambda admin: admin.runtime_config())

    def broker_version(self, broker: str) -> str:
        return self._at_broker(broker, lambda admin: next(iter(admin.broker_versions().values())))

    def _at_broker(self, broker: str, call):
        import copy

        scheme = httpx.URL(self.base_url).scheme
        if httpx.URL(self.base_url).netloc.decode() == broker:
            return call(self)
        other = copy.copy(self)
        other.base_url = f"{scheme}://{broker}"
        other._proxy = _environment_proxy(other.base_url)
        other._local = threading.local()
        other._transports = {}
        other._transports_lock = threading.Lock()
        try:
            return call(other)
        finally:
            if self._shared_transport is None:
                other.close()


def _reason(response: httpx.Response) -> str:
    try:
        data = response.json()
        if isinstance(data, dict) and data.get("reason"):
            return str(data["reason"])
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    text = response.text.strip()
    return text[:300] if text and not text.lstrip().startswith("<") else response.reason_phrase


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
