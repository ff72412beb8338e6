"""`HttpAdmin`: the TransactionsAdmin protocol over Pulsar's admin REST API, with httpx.

``transport=`` is the test seam (httpx's MockTransport / ASGI / WSGI transports). Without it, each thread keeps one
connection: plain http through ``KeepAliveTransport`` (``_transport.py``: a blocking socket and httptools' reply
parser, about half the client CPU per call of httpx's transport, which bounds a 10,000-store ``downgrade status``),
https and proxied targets through httpx's transport. Each admin call is a row of the endpoint table
(``endpoints.py``: method, path, query, reply shape), and each method here is one line asking ``_endpoint`` for its
row; the few calls read differently (a bare version string, the ``Date`` header, metrics text, one named broker) say so where they are.
Four rules hold for every call:

* **One deadline.** ``--request-timeout`` bounds the whole call — connecting, every redirect hop, every retry and
  the body however slowly it trickles in — not each socket read.
* **One retry policy** (:class:`RetryPolicy`, shared by every command): transient connection failures and 5xx on
  idempotent GETs, and 429/503 on any method, are retried with backoff; a ``Retry-After`` is honoured when it fits in
  the time left, and the call fails at once (saying so) when it does not. Callers that poll (``downgrade wait``) keep
  their own loop and use :func:`is_transient` to tell a retryable failure from a final one.
* **Credentials follow redirects only within the cluster**: to the same host, a host of the service host's domain,
  or a broker in the cluster's active broker list — never elsewhere, never from https to http (``_redirects.py``).
* **Replies are checked before use**: each call states the JSON shape it needs; anything else (an HTML login page,
  ``[]`` for an object, ``null``, absurdly deep nesting) is an :class:`AdminError` naming the URL, never a crash.
  Secrets never appear in errors (:func:`txnadmin.admin.auth.mask`). The checks are ``_replies.py``'s.
"""

from __future__ import annotations

import logging
import math
import re
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Self
from urllib.parse import quote, urlencode

import httpx

from . import _replies
from ._bundles import BundleOwners, owned_bundles
from ._redirects import MAX_REDIRECTS, REDIRECTS, add_broker_hosts, follow, in_cluster
from ._replies import VERSION, retry_after
from ._transport import (SAFE_TARGET, DirectRoute, KeepAliveTransport, Reply, direct_route, environment_proxy,
                         exchange, exchange_direct, origin, tls_context)
from .auth import Auth, AuthError, TokenAuth, auth_from, mask, register_secret, token_from_params
from .endpoints import ENDPOINTS
from .protocol import AdminError, BadReplyError, Json, NotFoundError, TargetUnreachableError, TxnId
from .protocol import is_transient as is_transient  # re-exported: callers of HttpAdmin classify failures with it

log = logging.getLogger(__name__)
_BROKER_ID = re.compile(r"[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}")  # host:port, as the active brokers list names a broker
MAX_BROKERS = 64  # brokers asked which bundles they own (once per client): a larger list is learned by redirects alone
MAX_OWNERS = 100_000  # topics whose owner HttpAdmin remembers (and bases it keeps taken apart) before starting over


@dataclass(frozen=True)
class RetryPolicy:
    """The one per-request retry policy of every HttpAdmin call (see the module docstring).

    ``attempts`` counts the first try; waits grow as ``backoff * 2**n`` unless the server sends ``Retry-After``.
    Everything stays inside the call's deadline (``--request-timeout``).
    """

    attempts: int = 3
    backoff: float = 0.2
    retry_statuses_any_method: tuple[int, ...] = (429, 503)

    def should_retry(self, method: str, status: int) -> bool:
        if status in self.retry_statuses_any_method:
            return True  # the server says it did not process the request
        return method == "GET" and status >= 500


DEFAULT_RETRY = RetryPolicy()


def token_from_auth(auth_plugin: Optional[str], auth_params: Optional[str]) -> Optional[str]:
    """Pulsar's AuthenticationToken params: `token:XYZ`, `file:///path`, or `{"token": "…"}`."""
    return token_from_params(auth_params)


class HttpAdmin:
    """The TransactionsAdmin protocol over a Pulsar's admin REST API (see the module docstring)."""

    def __init__(self, base_url: str, *, token: Optional[str] = None, timeout: float = 30.0,
                 tls_trust_certs: Optional[str] = None, tls_allow_insecure: bool = False,
                 tls_hostname_verification: bool = False, transport: Optional[httpx.BaseTransport] = None,
                 retry_backoff: Optional[float] = None, auth: Optional[Auth] = None,
                 retry: RetryPolicy = DEFAULT_RETRY,
                 rediscover: Optional[Callable[[], Optional[tuple[str, Optional[str]]]]] = None):
        if not isinstance(timeout, (int, float)) or not timeout > 0 or not math.isfinite(timeout):
            raise TargetUnreachableError(f"--request-timeout {timeout}: must be a positive number of seconds")
        try:
            parsed = httpx.URL(base_url.rstrip("/"))
        except httpx.InvalidURL as exc:
            raise TargetUnreachableError(f"admin URL {base_url!r}: {exc}") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise TargetUnreachableError(f"admin URL {base_url!r}: use http(s)://host:port")
        self.base_url = base_url.rstrip("/")
        self._host = parsed.host
        if auth is None:
            register_secret(token)
            auth = TokenAuth(token=token) if token else Auth()
        self.auth = auth
        self.retry = retry if retry_backoff is None else RetryPolicy(retry.attempts, retry_backoff,
                                                                     retry.retry_statuses_any_method)
        self.timeout = float(timeout)
        verify: Optional[ssl.SSLContext] = None  # httpx's own default context, built once on first use
        if self.base_url.startswith("https://") or tls_trust_certs or auth.client_cert:
            verify = tls_context(tls_trust_certs, tls_allow_insecure, tls_hostname_verification, auth.client_cert)
        # The transport is used directly: redirects, credentials and retries are handled here already, and
        # httpx.Client's layers on top (URL merging, auth flow, cookies, hooks) cost a third of the client's CPU
        # per call — which is what bounds a 10,000-store status poll. Each thread gets its own one-connection
        # transport: httpcore checks every pooled connection on every request (a poll() each), so one shared
        # pool of N sockets for N threads costs O(N) per call. ``transport=`` (the test seam) is shared as given.
        self._verify = verify
        self._proxy = environment_proxy(self.base_url)  # HTTP(S)_PROXY / NO_PROXY, as httpx.Client honours them
        self._shared_transport = transport
        self._local = threading.local()
        self._transports: dict[threading.Thread, httpx.BaseTransport] = {}
        self._transports_lock = threading.Lock()
        self.in_flight: Optional[str] = None
        self._brokers: Optional[set[str]] = None  # the cluster's active brokers, fetched on the first foreign redirect
        self._brokers_lock = threading.RLock()
        # A local engine's server may come back on another port with another token (`engine run` picks both
        # afresh): ``rediscover`` reads where it is now, so a long `downgrade wait` follows the restart.
        self._rediscover = rediscover
        self._routes: dict[str, Optional[DirectRoute]] = {}  # a base (ours, or an owner's) taken apart, for _direct
        # topic -> the base of the broker the topic's last call was redirected to (see ``_send``)
        self._owners: dict[str, str] = {}
        # which broker owns which bundle, asked of every broker once, after the second redirect shows a cluster
        self._bundles: Optional[BundleOwners] = None
        self._bundles_asked = False
        self._owner_redirects = 0  # calls about a topic sent on to its owner (counted until the bundles are asked)
        self._bundles_lock = threading.Lock()

    @property
    def retry_backoff(self) -> float:
        return self.retry.backoff

    def _transport(self) -> httpx.BaseTransport:
        if self._shared_transport is not None:
            return self._shared_transport
        transport = getattr(self._local, "transport", None)
        if transport is None:
            transport = self._thread_transport()
            self._local.transport = transport
            with self._transports_lock:
                for thread in [t for t in self._transports if not t.is_alive()]:
                    self._transports.pop(thread).close()  # a finished pool thread's socket
                self._transports[threading.current_thread()] = transport
        return transport

    def _thread_transport(self) -> httpx.BaseTransport:
        """A new transport for the calling thread: through a proxy httpx's (it does the proxying); otherwise the
        lighter keep-alive path for plain http, which builds httpx's (and the SSL context) only for https."""
        if self._proxy:
            return self._httpx_transport()
        return KeepAliveTransport(self._httpx_transport)

    def _httpx_transport(self) -> httpx.BaseTransport:
        with self._transports_lock:
            if self._verify is None:
                # One context for every thread's transport: building one (loading the CA bundle) costs ~20 ms of
                # CPU, paid per transport by httpx's default, i.e. per pool thread on every status poll. Even for
                # plain http it must be a verifying one: a redirect may lead to https.
                self._verify = httpx.create_ssl_context()
            verify = self._verify
        return httpx.HTTPTransport(verify=verify, proxy=self._proxy,
                                   limits=httpx.Limits(max_connections=4, max_keepalive_connections=1))

    @classmethod
    def from_target(cls, target) -> "HttpAdmin":
        tls = dict(target.tls)
        return cls.with_settings(target.url, tls, auth=auth_from(target.auth_plugin, target.auth_params, tls))

    @classmethod
    def with_settings(cls, base_url: str, tls: dict, *, auth: Optional[Auth] = None,
                      token: Optional[str] = None) -> "HttpAdmin":
        """An admin for ``base_url`` under client.conf-style settings (``requestTimeout`` and the TLS keys)."""
        timeout = tls.get("requestTimeout")
        return cls(base_url, auth=auth, token=token,
                   timeout=30.0 if timeout is None else _seconds(timeout),
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one call: deadline, retries, redirects --------------------------------------------------
    def _headers(self, deadline: float) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        value = self.auth.authorization(max(0.1, deadline - time.monotonic()))
        if value:
            headers["Authorization"] = value
        return headers

    def _endpoint(self, call: str, *args: Any) -> Any:
        """One admin call from the table: the row's URL filled from ``args`` (the protocol method's arguments, in
        order), sent under one deadline and the retry policy; the JSON reply, checked against the row's shape."""
        row = ENDPOINTS[call]
        path, params = row.target(args)
        topic = args[row.topic_at] if row.topic_at is not None else None
        return _replies.result(self._call(row.method, path, params, row.content(args), topic), row.shape)

    def _reply(self, call: str) -> httpx.Response | Reply:
        """A row's raw reply, for the calls that read it other than as JSON; an error status raises as usual."""
        row = ENDPOINTS[call]
        path, params = row.target(())
        response = self._call(row.method, path, params, None)
        if response.status_code != 200:
            _replies.result(response)
        return response

    def _call(self, method: str, path: str, params: dict, content: Optional[bytes],
              topic: Optional[str] = None) -> httpx.Response | Reply:
        deadline = time.monotonic() + self.timeout
        self.in_flight = f"{method} {path}"  # named by the CLI's "waiting for …" spinner
        policy = self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._send(method, path, params, content, deadline, topic)
            except TargetUnreachableError as exc:
                if getattr(exc, "before_send", False) and self._moved():
                    continue  # the server is elsewhere now: try there at once (still bounded by attempts)
                # Only failures before the request could have been processed are retried for non-GETs.
                if isinstance(exc, AuthError) or attempt >= policy.attempts or \
                        (method != "GET" and not getattr(exc, "before_send", False)):
                    raise
                if not self._sleep(policy.backoff * 2 ** (attempt - 1), deadline):
                    raise
                continue
            if attempt < policy.attempts and policy.should_retry(method, response.status_code):
                asked = retry_after(response)
                wait = policy.backoff * 2 ** (attempt - 1) if asked is None else asked
                if self._sleep(wait, deadline):
                    continue
                if asked is not None:
                    raise AdminError(f"{self.base_url}: HTTP {response.status_code}, asked to retry after "
                                     f"{asked:g} s — beyond --request-timeout {self.timeout:g} s", response.status_code)
            return response

    def _moved(self) -> bool:
        """Ask ``rediscover`` where the server is; True when it answered with another address or token."""
        if self._rediscover is None:
            return False
        found = self._rediscover()
        if found is None:
            return False
        url, token = found
        url = url.rstrip("/")
        current = self.auth.token if isinstance(self.auth, TokenAuth) else None
        if url == self.base_url and token == current:
            return False
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL:
            return False
        register_secret(token)
        with self._transports_lock:
            self.base_url, self._host = url, parsed.host
            self.auth = TokenAuth(token=token) if token else Auth()
            self._owners.clear()  # the brokers came back elsewhere too: a remembered port may be anyone's now
            self._bundles, self._bundles_asked = None, False
        return True

    @staticmethod
    def _sleep(seconds: float, deadline: float) -> bool:
        """Sleep if the wait fits before the deadline (leaving room for the retry itself); False otherwise."""
        if time.monotonic() + seconds >= deadline:
            return False
        time.sleep(seconds)
        return True

    def _send(self, method: str, path: str, params: dict, content: Optional[bytes],
              deadline: Optional[float] = None, topic: Optional[str] = None) -> httpx.Response | Reply:
        """One call, following redirects. A call about ``topic`` goes first to the broker that owns it as far as this
        client knows (the topic's last redirect, or the bundles the brokers said they own): on a cluster every
        non-owner answers 307 to the owner (Pulsar's ``validateTopicOwnership``, for reads and changes alike), and a
        poll asks about each topic every interval, so entering at the service broker cost two exchanges per call
        where one does. (A change, such as `start`'s unload of every topic, is sent once either way: a refused
        connection is before anything was sent, and a 307 keeps the method.) It is only where to enter: whatever
        answers is judged as before (a broker that no longer owns the topic redirects again, and the new owner is
        remembered), and an owner that refuses the connection is forgotten and the call enters at the service URL as
        if never remembered."""
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout
        query = f"?{urlencode(params, quote_via=quote)}" if params else ""
        if topic is not None:
            owner, table = self._owners.get(topic), None
            if owner is None and (table := self._bundles) is not None:
                owner = table.owner(topic)
            if owner is not None and owner != self.base_url:
                try:
                    return self._follow(method, owner, path, query, content, deadline, topic)
                except TargetUnreachableError as exc:
                    if table is not None:
                        table.drop(owner)  # a predicted owner: none of its bundles is worth trying any more
                    else:
                        self._owners.pop(topic, None)
                    if not getattr(exc, "before_send", False):
                        raise  # it may have been processed: the retry policy decides, entering at the service URL
        return self._follow(method, self.base_url, path, query, content, deadline, topic)

    def _follow(self, method: str, base: str, path: str, query: str, content: Optional[bytes], deadline: float,
                topic: Optional[str]) -> httpx.Response | Reply:
        """``method`` on ``base + path + query`` and each redirect after it (every hop on the direct path when it
        applies), remembering for ``topic`` the base of a redirect target that answered."""
        tail = path + query
        text = base + tail
        reply = self._direct(base, method, tail, text, content, deadline)
        if reply is not None and (reply.status_code not in REDIRECTS or "location" not in reply.headers):
            return reply
        try:
            url = httpx.URL(text)
        except httpx.InvalidURL as exc:
            raise AdminError(f"{base}{tail}: not a valid URL ({exc})", 400) from None
        hops = MAX_REDIRECTS + 1
        moved = False
        direct: Optional[Reply] = reply
        while True:
            answer: httpx.Response | Reply
            if direct is not None:  # the hop went the direct way
                answer = direct
            else:
                headers = self._headers(deadline)
                if content is not None:
                    headers["Content-Type"] = "application/json"
                answer = exchange(self._transport(), method, url, headers, content, deadline, self.timeout)
            status, location = answer.status_code, answer.headers.get("location")
            hops -= 1
            if status not in REDIRECTS or location is None:
                if moved and topic is not None:
                    if self._remember(topic, url, path) and not self._bundles_asked:
                        # a broker sent a topic's call to its owner: a cluster. Asked at the second such call, so a
                        # command of one call (`transactions pending-ack-stats`) does not pay for what it never uses
                        self._owner_redirects += 1
                        if self._owner_redirects >= 2:
                            self._learn_bundles()
                return answer
            if hops <= 0:
                raise BadReplyError(f"{self.base_url}{tail}: too many redirects")
            url = follow(url, location, self._in_cluster)
            moved = True
            if status == 303:
                method, content = "GET", None
            direct = self._direct(origin(url), method, url.raw_path.decode("ascii"), str(url), content, deadline) \
                if url.scheme == "http" else None

    def _remember(self, topic: str, answered: httpx.URL, path: str) -> bool:
        """After a redirect, the base of the broker that answered for ``topic``, so the topic's next call goes there
        first: its origin, and any prefix before our ``path`` (Pulsar's redirect keeps the path and adds
        ``authoritative`` to the query, which a call straight to the owner does without). A redirect that changed
        the path is not remembered (False)."""
        where = answered.raw_path.split(b"?", 1)[0].decode("ascii", "replace")
        if not where.endswith(path):
            return False
        if len(self._owners) >= MAX_OWNERS:
            self._owners.clear()  # a bound, not a cache policy: the next call per topic learns its owner again
        self._owners[topic] = origin(answered) + where[:-len(path)]
        return True

    def _learn_bundles(self) -> None:
        """Ask every active broker which bundles it owns (``ownedNamespaces``, as ``pulsar-admin brokers namespaces``
        does), so a topic's first call goes to its owner: a fresh process (a `downgrade status`) otherwise pays a
        redirect for most of its calls. Asked once per client, by the thread whose call was the second sent on to
        its owner (the others do not wait); a failure only means calls keep entering at the service URL, so it is logged, not raised.
        Not through a base URL with a path (a proxy in front: its brokers' addresses are not ours to guess)."""
        with self._bundles_lock:  # only the flag: whoever flips it asks, the others go on at once
            if self._bundles_asked:
                return
            self._bundles_asked = True
        try:
            service = httpx.URL(self.base_url)
            if service.raw_path not in (b"", b"/"):
                return
            deadline = time.monotonic() + min(self.timeout, 10.0)
            table = BundleOwners()
            for cluster in self._ask("list_clusters", (), deadline)[:16]:
                for broker in self._ask("active_brokers", (cluster,), deadline)[:MAX_BROKERS]:
                    base = f"{service.scheme}://{broker}"
                    if not _BROKER_ID.fullmatch(broker) or not self._in_cluster(httpx.URL(base)):
                        continue
                    where = f"/admin/v2/brokers/{quote(cluster, safe='')}/{quote(broker, safe=':')}/ownedNamespaces"
                    table.add(base, owned_bundles(_replies.result(self._send("GET", where, {}, None, deadline),
                                                                  dict)))
            self._bundles = table if len(table) else None
        except (AdminError, ValueError, httpx.InvalidURL) as exc:
            log.info("%s: which broker owns which bundle is not known (%s); calls enter at the service URL and "
                     "follow redirects", self.base_url, exc)

    def _direct(self, base: str, method: str, target: str, url: str, content: Optional[bytes],
                deadline: float) -> Optional[Reply]:
        """One hop to ``base + target`` on the keep-alive path without httpx's objects (``exchange_direct``), when it
        applies: plain http, no proxy, no test transport, a request target with nothing to encode. None otherwise."""
        if self._shared_transport is not None or self._proxy:
            return None
        try:
            route = self._routes[base]
        except KeyError:
            if len(self._routes) >= MAX_OWNERS:
                self._routes.clear()
            route = self._routes[base] = direct_route(base)
        if route is None:
            return None
        target = f"{route.prefix}{target}"
        if not SAFE_TARGET.fullmatch(target):
            return None
        transport = self._transport()
        if not isinstance(transport, KeepAliveTransport):
            return None
        headers = self._headers(deadline)
        if content is not None:
            headers["Content-Type"] = "application/json"
        return exchange_direct(transport, route, method, url, target, headers, content, deadline, self.timeout)

    def _in_cluster(self, target: httpx.URL) -> bool:
        return in_cluster(target, self._host, self._active_brokers)

    def _active_brokers(self) -> set[str]:
        """Hosts (and host:port) of the cluster's active brokers, asked of the service host once."""
        with self._brokers_lock:
            if self._brokers is not None:
                return self._brokers
            found: set[str] = set()
            self._brokers = found  # a redirect while asking is judged without the list (and cannot recurse)
            try:
                deadline = time.monotonic() + min(self.timeout, 10.0)
                add_broker_hosts(found, self._ask("list_clusters", (), deadline),
                                 lambda cluster: self._ask("active_brokers", (cluster,), deadline))
            except AdminError:
                found = set()  # no list: only the host and domain rules apply
            self._brokers = found
            return found

    def _ask(self, call: str, args: tuple, deadline: float) -> Any:
        """A row asked once, without retries, under the caller's ``deadline`` (the redirect policy's own calls)."""
        row = ENDPOINTS[call]
        path, params = row.target(args)
        return _replies.result(self._send(row.method, path, params, None, deadline), row.shape)

    def _config(self, call: str) -> dict[str, str]:
        """Broker configuration maps: every broker serves these, so a 404 means we are not talking to one."""
        try:
            return self._endpoint(call)
        except NotFoundError:
            raise BadReplyError(f"{self.base_url}{ENDPOINTS[call].path}: HTTP 404 — not a Pulsar broker's admin API "
                                "(check the admin URL and any proxy in front of it)") from None

    # -- transactions (each a row of endpoints.ENDPOINTS) -------------------------------------------
    def list_coordinators(self) -> list[Json]:
        return self._endpoint("list_coordinators")

    def coordinator_stats(self, coordinator_id: Optional[int] = None) -> Json:
        return self._endpoint("coordinator_stats", coordinator_id)

    def coordinator_internal_stats(self, coordinator_id: int, metadata: bool = False) -> Json:
        return self._endpoint("coordinator_internal_stats", coordinator_id, metadata)

    def pending_ack_internal_stats(self, topic: str, subscription: str, metadata: bool = False) -> Json:
        return self._endpoint("pending_ack_internal_stats", topic, subscription, metadata)

    def buffer_snapshot_internal_stats(self, topic: str, metadata: bool = False) -> Json:
        return self._endpoint("buffer_snapshot_internal_stats", topic, metadata)

    def transaction_buffer_stats(self, topic: str, low_water_marks: bool = False, segment_stats: bool = False) -> Json:
        return self._endpoint("transaction_buffer_stats", topic, low_water_marks, segment_stats)

    def pending_ack_stats(self, topic: str, subscription: str, low_water_marks: bool = False) -> Json:
        return self._endpoint("pending_ack_stats", topic, subscription, low_water_marks)

    def transaction_in_buffer_stats(self, txn: TxnId, topic: str) -> Json:
        return self._endpoint("transaction_in_buffer_stats", txn, topic)

    def transaction_in_pending_ack_stats(self, txn: TxnId, topic: str, subscription: str) -> Json:
        return self._endpoint("transaction_in_pending_ack_stats", txn, topic, subscription)

    def transaction_metadata(self, txn: TxnId) -> Json:
        return self._endpoint("transaction_metadata", txn)

    def slow_transactions(self, timeout_ms: int, coordinator_id: Optional[int] = None) -> Json:
        return self._endpoint("slow_transactions", timeout_ms, coordinator_id)

    def scale_coordinators(self, replicas: int) -> None:
        if replicas <= 0:  # refused before sending, in Pulsar's words, as pulsar-admin does
            raise AdminError("Number of transaction coordinators must be more than 0", 406)
        self._endpoint("scale_coordinators", replicas)

    def position_stats_in_pending_ack(self, topic: str, subscription: str, ledger_id: int, entry_id: int,
                                      batch_index: Optional[int] = None) -> Json:
        return self._endpoint("position_stats_in_pending_ack", topic, subscription, ledger_id, entry_id, batch_index)

    def abort_transaction(self, txn: TxnId) -> None:
        self._endpoint("abort_transaction", txn)

    # -- /admin/v2 ----------------------------------------------------------------------------
    def dynamic_config(self) -> dict[str, str]:
        return self._config("dynamic_config")

    def runtime_config(self) -> dict[str, str]:
        return self._config("runtime_config")

    def update_dynamic_config(self, name: str, value: str) -> None:
        self._endpoint("update_dynamic_config", name, value)

    def delete_dynamic_config(self, name: str) -> None:
        self._endpoint("delete_dynamic_config", name)

    def list_tenants(self) -> list[str]:
        return self._endpoint("list_tenants")

    def list_namespaces(self, tenant: str) -> list[str]:
        return self._endpoint("list_namespaces", tenant)

    def list_topics(self, namespace: str, include_system: bool = True) -> list[str]:
        return self._endpoint("list_topics", namespace, include_system)

    def unload_topic(self, topic: str) -> None:
        self._endpoint("unload_topic", topic)

    def broker_versions(self) -> dict[str, str]:
        """The answering broker's version; Pulsar sends it as a bare string, quoted or not."""
        response = self._reply("broker_versions")
        where = str(response.url)
        text = response.content.decode("utf-8", "replace").strip().strip('"')
        if not VERSION.match(text):
            shown = "an HTML page (a login page from a proxy?)" if text.startswith("<") else repr(mask(text)[:60])
            raise BadReplyError(f"{where}: expected a Pulsar version such as 4.0.1, got {shown}")
        host = httpx.URL(self.base_url).netloc.decode()
        return {host: text}

    def delete_subscription(self, topic: str, subscription: str) -> None:
        self._endpoint("delete_subscription", topic, subscription)

    def delete_topic(self, topic: str) -> None:
        self._endpoint("delete_topic", topic)

    # -- cluster identity and brokers ---------------------------------------------------------
    def list_clusters(self) -> list[str]:
        return self._endpoint("list_clusters")

    def active_brokers(self, cluster: str) -> list[str]:
        return self._endpoint("active_brokers", cluster)

    def internal_configuration(self) -> Json:
        return self._endpoint("internal_configuration") or {}

    def broker_runtime_config(self, broker: str) -> dict[str, str]:
        """Ask ``broker`` itself (same scheme, credentials and TLS as this admin): only it knows its values."""
        return self._at_broker(broker, lambda admin: admin.runtime_config())

    def broker_metrics_text(self, broker: str) -> str:
        return self._at_broker(broker, lambda admin: admin.metrics_text())

    def broker_version(self, broker: str) -> str:
        return self._at_broker(broker, lambda admin: next(iter(admin.broker_versions().values())))

    def _at_broker(self, broker: str, call):
        import copy

        scheme = httpx.URL(self.base_url).scheme
        if httpx.URL(self.base_url).netloc.decode() == broker:
            return call(self)
        other = copy.copy(self)
        other.base_url = f"{scheme}://{broker}"
        other._proxy = environment_proxy(other.base_url)
        other._local = threading.local()
        other._transports = {}
        other._transports_lock = threading.Lock()
        try:
            return call(other)
        finally:
            if self._shared_transport is None:
                other.close()

    # -- what `txnadmin doctor` reads besides the above ---------------------------------------
    def topic_internal_stats(self, topic: str) -> Json:
        return self._endpoint("topic_internal_stats", topic)

    def topic_stats(self, topic: str) -> Json:
        return self._endpoint("topic_stats", topic)

    def namespace_permissions(self, namespace: str) -> Json:
        return self._endpoint("namespace_permissions", namespace)

    def topic_permissions(self, topic: str) -> Json:
        return self._endpoint("topic_permissions", topic)

    def subscription_permissions(self, namespace: str) -> Json:
        return self._endpoint("subscription_permissions", namespace)

    def subscription_auth_mode(self, namespace: str) -> str:
        return self._endpoint("subscription_auth_mode", namespace)

    def tenant_info(self, tenant: str) -> Json:
        return self._endpoint("tenant_info", tenant)

    def broker_time_ms(self) -> Optional[int]:
        from email.utils import parsedate_to_datetime

        response = self._reply("broker_versions")
        try:
            return int(parsedate_to_datetime(response.headers["date"]).timestamp() * 1000)
        except (KeyError, TypeError, ValueError, IndexError):
            return None  # no (or a garbled) Date header: the caller says it cannot judge ages

    def metrics_text(self) -> str:
        return self.text("/metrics/")

    def text(self, path: str) -> str:
        """A plain-text GET (``path`` may carry its query), under the same deadline, retries and redirect rules."""
        response = self._call("GET", path, {}, None)
        if response.status_code != 200:
            _replies.result(response)
        return response.text


def _seconds(value: Any) -> float:
    """client.conf / flag request timeout in seconds (a float); garbage is a one-line error naming it."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise TargetUnreachableError(f"--request-timeout {value!r}: not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise TargetUnreachableError(f"--request-timeout {value}: must be a positive number of seconds")
    return seconds
