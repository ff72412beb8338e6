"""`HttpAdmin`: the TransactionsAdmin protocol over Pulsar's admin REST API, with httpx.

``transport=`` is the test seam (httpx's MockTransport / ASGI / WSGI transports). Without it, each thread keeps one
connection: plain http through the standard library's ``http.client`` (``_KeepAliveTransport``: 0.15 instead of
0.21 ms of client CPU per call, which bounds a 10,000-store ``downgrade status``), https and proxied targets through
httpx's transport. Four rules hold for every call:

* **One deadline.** ``--request-timeout`` bounds the whole call — connecting, every redirect hop, every retry and
  the body however slowly it trickles in — not each socket read.
* **One retry policy** (:class:`RetryPolicy`, shared by every command): transient connection failures and 5xx on
  idempotent GETs, and 429/503 on any method, are retried with backoff; a ``Retry-After`` is honoured when it fits in
  the time left, and the call fails at once (saying so) when it does not. Callers that poll (``downgrade wait``) keep
  their own loop and use :func:`is_transient` to tell a retryable failure from a final one.
* **Credentials follow redirects only within the cluster**: to the same host, a host of the service host's domain,
  or a broker in the cluster's active broker list — never elsewhere, never from https to http.
* **Replies are checked before use**: each call states the JSON shape it needs; anything else (an HTML login page,
  ``[]`` for an object, ``null``, absurdly deep nesting) is an :class:`AdminError` naming the URL, never a crash.
  Secrets never appear in errors (:func:`txnadmin.admin.auth.mask`).
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import math
import re
import select
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Self
from urllib.parse import quote, urlencode

import httpx

from .auth import Auth, AuthError, TokenAuth, auth_from, mask, register_secret, token_from_params
from .protocol import (AdminError, BadReplyError, Json, NotAuthorizedError, NotFoundError, TargetUnreachableError,
                       TxnId)
from .protocol import is_transient as is_transient  # re-exported: callers of HttpAdmin classify failures with it

V3 = "/admin/v3/transactions"
MAX_REDIRECTS = 5
MAX_BODY = 256 * 1024 * 1024  # a reply larger than this is not an admin answer
MAX_DEPTH = 64  # Pulsar's admin JSON nests a handful of levels; far deeper is garbage (and would exhaust the stack)


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
    return token_from_params(auth_params)


def _environment_proxy(base_url: str) -> Optional[str]:
    """The proxy the environment names for ``base_url`` (None when unset or bypassed by NO_PROXY)."""
    import urllib.request

    url = httpx.URL(base_url)
    proxy = urllib.request.getproxies().get(url.scheme)
    if not proxy or urllib.request.proxy_bypass(url.host):
        return None
    return proxy


def tls_context(trust_certs: Optional[str], allow_insecure: bool, hostname_verification: bool,
                client_cert: Optional[tuple[str, str]] = None) -> ssl.SSLContext:
    """An SSL context from Pulsar's TLS settings; a bad trust file is a one-line error naming it."""
    if trust_certs:
        path = Path(trust_certs).expanduser()
        if not path.is_file():
            what = "a directory" if path.is_dir() else "missing"
            raise TargetUnreachableError(f"--tls-trust-cert-path {trust_certs}: {what}, expected a PEM file of "
                                         "CA certificates")
        try:
            ctx = ssl.create_default_context(cafile=str(path))
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TargetUnreachableError(f"--tls-trust-cert-path {trust_certs}: not a PEM file of CA certificates "
                                         f"({getattr(exc, 'reason', None) or exc})") from None
    else:
        ctx = ssl.create_default_context()
    ctx.check_hostname = bool(hostname_verification) and not allow_insecure
    if allow_insecure:
        ctx.verify_mode = ssl.CERT_NONE
    if client_cert:
        try:
            ctx.load_cert_chain(*client_cert)
        except (ssl.SSLError, OSError) as exc:
            raise AuthError(f"client certificate {client_cert[0]}: cannot load ({exc})") from None
    return ctx


def _retry_after(response: httpx.Response) -> Optional[float]:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date); None when absent or garbage."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):  # Python 3.10+ raises on garbage instead of returning None
        return None
    return max(0.0, when.timestamp() - time.time())


def _depth_ok(raw: bytes) -> bool:
    """Cheap guard before json.loads: nesting deeper than MAX_DEPTH (counted on brackets outside strings)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return True
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True


class _KeepAliveTransport(httpx.BaseTransport):
    """One thread's keep-alive connection for plain-http calls, on the standard library's ``http.client``.

    Why not httpx's own transport here: httpcore's pool, tracing and h11's event machinery were half of the
    client's CPU per call, and a 10,000-store ``downgrade status`` makes up to two calls per store, so the poll
    was bounded by the client's interpreter, not by the server. With ``http.client`` doing the same HTTP/1.1
    exchange a whole call costs 0.15 instead of 0.21 ms of client CPU in one thread (0.28 instead of 0.41 ms
    with 16 threads contending), measured in ``bench/downgrade_status.py``. Everything above the transport (one
    deadline, retries, redirects and their credential rules, auth, reply checks) is HttpAdmin's and unchanged;
    failures are raised as the same httpx exceptions httpx's transport raises, so HttpAdmin words them the same.
    Any other scheme (https, also after a redirect) goes to httpx's transport (``fallback``), so TLS keeps
    httpx's handling.
    """

    def __init__(self, fallback: Callable[[], httpx.BaseTransport]):
        self._make_fallback = fallback
        self._fallback: Optional[httpx.BaseTransport] = None
        self._conn: Optional[http.client.HTTPConnection] = None
        self._where: Optional[tuple[str, int]] = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            if self._fallback is None:
                self._fallback = self._make_fallback()
            return self._fallback.handle_request(request)
        timeout = request.extensions.get("timeout", {}).get("read")
        where = (url.host, url.port or 80)
        conn = self._conn
        if conn is not None and (where != self._where or not _reusable(conn)):
            conn.close()
            conn = None
        if conn is None:
            conn = self._conn = http.client.HTTPConnection(where[0], where[1], timeout=timeout)
            self._where = where
        if conn.sock is None:  # new, or closed after a reply that said `Connection: close`
            conn.timeout = timeout
            try:
                conn.connect()
            except TimeoutError as exc:
                self.close()
                raise httpx.ConnectTimeout(str(exc) or "timed out", request=request) from None
            except OSError as exc:
                self.close()
                raise httpx.ConnectError(str(exc), request=request) from None
        else:
            conn.sock.settimeout(timeout)
        try:
            conn.putrequest(request.method, url.raw_path.decode("ascii"), skip_host=True, skip_accept_encoding=True)
            for name, value in request.headers.raw:
                conn.putheader(name, value)
            conn.endheaders(request.content or None)
            reply = conn.getresponse()
        except TimeoutError as exc:
            self.close()
            raise httpx.ReadTimeout(str(exc) or "timed out", request=request) from None
        except ValueError as exc:  # a header value http.client refuses to send (h11 refuses the same)
            self.close()
            raise httpx.LocalProtocolError(str(exc), request=request) from None
        except (http.client.HTTPException, OSError) as exc:
            self.close()
            raise httpx.RemoteProtocolError(_protocol_error(exc), request=request) from None
        return httpx.Response(reply.status, headers=reply.getheaders(), stream=_ReplyBody(self, reply, request),
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": reply.reason.encode(
                                  "ascii", "replace")})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._fallback is not None:
            self._fallback.close()
            self._fallback = None


def _protocol_error(exc: BaseException) -> str:
    """What was wrong with a reply, in words: a status line that is not HTTP is quoted as such (http.client's own
    text is the bare line, which read as if the server had said it), as h11 says "illegal status line"."""
    if isinstance(exc, http.client.BadStatusLine) and not isinstance(exc, http.client.RemoteDisconnected):
        return f"illegal status line: {str(exc.args[0] if exc.args else '').strip()[:80]!r}"
    return str(exc) or type(exc).__name__


def _reusable(conn: http.client.HTTPConnection) -> bool:
    """An idle keep-alive socket with something to read has been closed by the server (or holds garbage)."""
    if conn.sock is None:
        return True
    try:
        if hasattr(select, "poll"):  # select() cannot take a descriptor above FD_SETSIZE (1024)
            poller = select.poll()
            poller.register(conn.sock, select.POLLIN)
            return not poller.poll(0)
        return not select.select([conn.sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


class _ReplyBody(httpx.SyncByteStream):
    """A reply's body in chunks, read errors worded as httpx's; a body not read to its end closes the connection
    (it cannot carry the next request)."""

    def __init__(self, owner: _KeepAliveTransport, reply: http.client.HTTPResponse, request: httpx.Request):
        self._owner, self._reply, self._request = owner, reply, request

    def __iter__(self):
        reply = self._reply
        try:
            while True:
                if reply.length == 0:  # a sized body read to its end (or none): the connection stays usable
                    reply.close()
                    return
                chunk = reply.read1(65536)  # what has arrived, so the caller's deadline is checked in between
                if not chunk:
                    if reply.length:  # the server closed before the Content-Length it promised
                        raise http.client.IncompleteRead(b"", reply.length)
                    return
                yield chunk
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "timed out", request=self._request) from None
        except http.client.IncompleteRead:
            self._owner.close()
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body",
                                            request=self._request) from None
        except (http.client.HTTPException, OSError) as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from None

    def close(self) -> None:
        if not self._reply.isclosed():
            self._reply.close()
            self._owner.close()


# -- reply shapes -------------------------------------------------------------------------------
# A shape is a type (dict, list, str, int), ("list", item shape, non-empty?), or ("obj", {key: shape}) for an
# object that must hold those keys. Only what txnadmin reads is required; extra fields are Pulsar's business.

def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__)


def _check(value: Any, shape: Any, where: str) -> None:
    if isinstance(shape, tuple) and shape[0] == "list":
        _, item, non_empty = shape
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {_kind(value)}")
        if non_empty and not value:
            raise ValueError(f"{where}: expected at least one entry, got an empty list")
        for i, element in enumerate(value):
            _check(element, item, f"{where}[{i}]")
        return
    if shape == "config":  # a broker configuration map: names to plain values, never nested objects
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object of settings, got {_kind(value)}")
        for key, setting in value.items():
            if isinstance(setting, (dict, list)):
                raise ValueError(f"{where}.{key}: expected a plain setting value, got {_kind(setting)}")
        return
    if isinstance(shape, tuple) and shape[0] == "obj":
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {_kind(value)}")
        for key, sub in shape[1].items():
            if key not in value:
                raise ValueError(f"{where}: no {key!r} field")
            _check(value[key], sub, f"{where}.{key}")
        return
    if shape is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected an integer, got {_kind(value)}")
        return
    if shape is dict and isinstance(value, dict) or shape is list and isinstance(value, list) \
            or shape is str and isinstance(value, str):
        return
    raise ValueError(f"{where}: expected {_kind(shape())}, got {_kind(value)}")


_LEDGERS = ("obj", {"managedLedgerInternalStats": ("obj", {"ledgers": ("list", ("obj", {"ledgerId": int}), True)})})
SHAPES = {
    "coordinators": ("list", ("obj", {"id": int, "brokerServiceUrl": str}), False),
    "coordinatorInternalStats": ("obj", {"transactionLogStats": _LEDGERS}),
    "pendingAckInternalStats": ("obj", {"pendingAckLogStats": _LEDGERS}),
    "strings": ("list", str, False),
}


class HttpAdmin:
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
        self._proxy = _environment_proxy(self.base_url)  # HTTP(S)_PROXY / NO_PROXY, as httpx.Client honours them
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
        return _KeepAliveTransport(self._httpx_transport)

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

    # -- transport --------------------------------------------------------------------------
    def _headers(self, deadline: float) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        value = self.auth.authorization(max(0.1, deadline - time.monotonic()))
        if value:
            headers["Authorization"] = value
        return headers

    def _request(self, method: str, path: str, params: Optional[dict] = None, body: Any = None,
                 shape: Any = None) -> Any:
        """One admin call under one deadline and the retry policy; the JSON reply, checked against ``shape``."""
        params = {k: ("true" if v is True else "false" if v is False else v)
                  for k, v in (params or {}).items() if v is not None}
        content = json.dumps(body).encode() if body is not None else None
        response = self._call(method, path, params, content)
        return self._result(response, shape)

    def _call(self, method: str, path: str, params: dict, content: Optional[bytes]) -> httpx.Response:
        deadline = time.monotonic() + self.timeout
        self.in_flight = f"{method} {path}"  # named by the CLI's "waiting for …" spinner
        policy = self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._send(method, path, params, content, deadline)
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
                asked = _retry_after(response)
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
        return True

    @staticmethod
    def _sleep(seconds: float, deadline: float) -> bool:
        """Sleep if the wait fits before the deadline (leaving room for the retry itself); False otherwise."""
        if time.monotonic() + seconds >= deadline:
            return False
        time.sleep(seconds)
        return True

    def _send(self, method: str, path: str, params: dict, content: Optional[bytes],
              deadline: Optional[float] = None) -> httpx.Response:
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout
        query = f"?{urlencode(params, quote_via=quote)}" if params else ""
        try:
            url = httpx.URL(f"{self.base_url}{path}{query}")
        except httpx.InvalidURL as exc:
            raise AdminError(f"{self.base_url}{path}: not a valid URL ({exc})", 400) from None
        for _ in range(MAX_REDIRECTS + 1):
            headers = self._headers(deadline)
            if content is not None:
                headers["Content-Type"] = "application/json"
            response = self._exchange(method, url, headers, content, deadline)
            if response.status_code in (301, 302, 303, 307, 308) and "location" in response.headers:
                url = self._redirect(url, response.headers["location"])
                if response.status_code == 303:
                    method, content = "GET", None
                continue
            return response
        raise BadReplyError(f"{self.base_url}{path}: too many redirects")

    def _exchange(self, method: str, url: httpx.URL, headers: dict, content: Optional[bytes],
                  deadline: float) -> httpx.Response:
        """Send one request and read its body, all before ``deadline`` (a trickled body cannot stretch it)."""
        remaining = deadline - time.monotonic()
        where = _origin(url)
        if remaining <= 0:
            raise TargetUnreachableError(f"{where}: no answer within --request-timeout {self.timeout:g} s (timeout)")
        request = httpx.Request(method, url, content=content, headers=headers,
                                extensions={"timeout": {"connect": remaining, "read": remaining, "write": remaining,
                                                        "pool": remaining}})
        sent = False
        try:
            response = self._transport().handle_request(request)
            sent = True
            response.request = request
            try:
                chunks, size = [], 0
                for chunk in response.stream:  # type: ignore[union-attr]  # a sync transport gives a sync stream
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_BODY:
                        raise BadReplyError(f"{where}: reply larger than {MAX_BODY // 2**20} MiB")
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("body not complete in time", request=request)
                response._content = b"".join(chunks)
            finally:
                response.close()
        except httpx.ConnectError as exc:
            error = TargetUnreachableError(f"{where}: cannot connect ({_short(exc)})")
            error.before_send = True
            raise error from None
        except httpx.TimeoutException:
            raise TargetUnreachableError(f"{where}: no answer within --request-timeout {self.timeout:g} s "
                                         "(timeout)") from None
        except httpx.TransportError as exc:
            error = TargetUnreachableError(f"{where}: connection failed ({_short(exc)})")
            error.before_send = not sent and isinstance(exc, httpx.ProxyError)
            raise error from None
        return response

    def _redirect(self, current: httpx.URL, location: str) -> httpx.URL:
        """Where a 3xx sends us — only when our credentials may go there (see the module docstring)."""
        try:
            target = current.join(location)
            host = target.host
        except (httpx.InvalidURL, ValueError, UnicodeError) as exc:
            raise BadReplyError(f"{_origin(current)}: redirect to an invalid Location {mask(location)[:200]!r} "
                                f"({_short(exc)})") from None
        if target.scheme not in ("http", "https") or not host:
            raise BadReplyError(f"{_origin(current)}: redirect to an invalid Location {mask(location)[:200]!r}")
        if current.scheme == "https" and target.scheme != "https":
            raise BadReplyError(f"{_origin(current)}: refusing a redirect from https to {_origin(target)} (plain http "
                             "would expose the credentials)")
        if not self._same_cluster(target):
            raise BadReplyError(f"{_origin(current)}: refusing a redirect to {_origin(target)}: not a broker of this "
                             "cluster (credentials go only to the service host, its domain, or the active brokers)")
        return target

    def _same_cluster(self, target: httpx.URL) -> bool:
        host = target.host.lower()
        base = self._host.lower()
        if host == base:
            return True
        domain = _domain(base)
        if domain and host.endswith("." + domain):
            return True
        return host in self._active_brokers() or f"{host}:{target.port}" in self._active_brokers()

    def _active_brokers(self) -> set[str]:
        """Hosts (and host:port) of the cluster's active brokers, asked of the service host once."""
        with self._brokers_lock:
            if self._brokers is not None:
                return self._brokers
            found: set[str] = set()
            self._brokers = found  # a redirect while asking is judged without the list (and cannot recurse)
            try:
                deadline = time.monotonic() + min(self.timeout, 10.0)
                clusters = self._json(self._send("GET", "/admin/v2/clusters", {}, None, deadline), ("list", str, False))
                for cluster in clusters[:16]:
                    brokers = self._json(self._send("GET", f"/admin/v2/brokers/{quote(cluster, safe='')}", {}, None,
                                                    deadline), ("list", str, False))
                    for broker in brokers:
                        found.add(broker.lower())
                        found.add(broker.lower().rsplit(":", 1)[0])
            except AdminError:
                found = set()  # no list: only the host and domain rules apply
            self._brokers = found
            return found

    def _json(self, response: httpx.Response, shape: Any) -> Any:
        return self._result(response, shape)

    def _result(self, response: httpx.Response, shape: Any = None) -> Any:
        status = response.status_code
        where = str(response.request.url).partition("?")[0]  # copy_with(query=None) re-parses: 2x the cost
        if 200 <= status < 300:
            if shape is None:
                return None if status == 204 or not response.content else self._decode(response, where)
            if status == 204 or not response.content:
                raise BadReplyError(f"{where}: empty reply where JSON was expected")
            value = self._decode(response, where)
            try:
                _check(value, shape, "reply")
            except ValueError as exc:
                raise BadReplyError(f"{where}: unexpected JSON ({exc})") from None
            return value
        reason = mask(_reason(response))
        if status in (401, 403):
            raise NotAuthorizedError(f"not authorized: {reason}" if reason else "not authorized", status)
        if status == 404:
            if not _has_json_reason(response):  # not Pulsar's own "not found" but a missing path (proxy, wrong URL)
                reason = f"{where}: HTTP 404 {response.reason_phrase or 'Not Found'}"
            raise NotFoundError(reason or "Not Found")
        if 300 <= status < 400:
            raise BadReplyError(f"{where}: HTTP {status} redirect without a Location")
        raise AdminError(reason or f"HTTP {status}", status)

    @staticmethod
    def _decode(response: httpx.Response, where: str) -> Any:
        raw = response.content
        if raw.lstrip()[:1] == b"<":
            raise BadReplyError(f"malformed JSON from {where}: an HTML page, not JSON (a login page from a proxy?)")
        if not _depth_ok(raw):
            raise BadReplyError(f"malformed JSON from {where}: nested deeper than {MAX_DEPTH} levels")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise BadReplyError(f"malformed JSON from {where}") from None

    def _config(self, path: str) -> dict[str, str]:
        """Broker configuration maps: every broker serves these, so a 404 means we are not talking to one."""
        try:
            return self._request("GET", path, shape="config")
        except NotFoundError:
            raise BadReplyError(f"{self.base_url}{path}: HTTP 404 — not a Pulsar broker's admin API (check the admin "
                             "URL and any proxy in front of it)") from None

    # -- transactions -------------------------------------------------------------------------
    def list_coordinators(self) -> list[Json]:
        return self._request("GET", f"{V3}/coordinators", shape=SHAPES["coordinators"])

    def coordinator_stats(self, coordinator_id: Optional[int] = None) -> Json:
        return self._request("GET", f"{V3}/coordinatorStats", {"coordinatorId": coordinator_id}, shape=dict)

    def coordinator_internal_stats(self, coordinator_id: int, metadata: bool = False) -> Json:
        return self._request("GET", f"{V3}/coordinatorInternalStats/{coordinator_id}", {"metadata": metadata or None},
                             shape=SHAPES["coordinatorInternalStats"])

    def pending_ack_internal_stats(self, topic: str, subscription: str, metadata: bool = False) -> Json:
        return self._request("GET", f"{V3}/pendingAckInternalStats/{topic_path(topic)}/{quote(subscription, safe='')}",
                             {"metadata": metadata or None}, shape=SHAPES["pendingAckInternalStats"])

    def buffer_snapshot_internal_stats(self, topic: str, metadata: bool = False) -> Json:
        return self._request("GET", f"{V3}/transactionBufferInternalStats/{topic_path(topic)}",
                             {"metadata": metadata or None}, shape=dict)

    def transaction_buffer_stats(self, topic: str, low_water_marks: bool = False, segment_stats: bool = False) -> Json:
        return self._request("GET", f"{V3}/transactionBufferStats/{topic_path(topic)}",
                             {"lowWaterMarks": low_water_marks or None, "segmentStats": segment_stats or None},
                             shape=dict)

    def pending_ack_stats(self, topic: str, subscription: str, low_water_marks: bool = False) -> Json:
        return self._request("GET", f"{V3}/pendingAckStats/{topic_path(topic)}/{quote(subscription, safe='')}",
                             {"lowWaterMarks": low_water_marks or None}, shape=dict)

    def transaction_in_buffer_stats(self, txn: TxnId, topic: str) -> Json:
        return self._request("GET", f"{V3}/transactionInBufferStats/{topic_path(topic)}/{txn.most_bits}/"
                                    f"{txn.least_bits}", shape=dict)

    def transaction_in_pending_ack_stats(self, txn: TxnId, topic: str, subscription: str) -> Json:
        return self._request("GET", f"{V3}/transactionInPendingAckStats/{topic_path(topic)}/"
                                    f"{quote(subscription, safe='')}/{txn.most_bits}/{txn.least_bits}", shape=dict)

    def transaction_metadata(self, txn: TxnId) -> Json:
        return self._request("GET", f"{V3}/transactionMetadata/{txn.most_bits}/{txn.least_bits}", shape=dict)

    def slow_transactions(self, timeout_ms: int, coordinator_id: Optional[int] = None) -> Json:
        return self._request("GET", f"{V3}/slowTransactions/{timeout_ms}", {"coordinatorId": coordinator_id},
                             shape=dict)

    def scale_coordinators(self, replicas: int) -> None:
        if replicas <= 0:
            raise AdminError("Number of transaction coordinators must be more than 0", 406)
        self._request("POST", f"{V3}/transactionCoordinator/replicas", body=replicas)

    def position_stats_in_pending_ack(self, topic: str, subscription: str, ledger_id: int, entry_id: int,
                                      batch_index: Optional[int] = None) -> Json:
        return self._request("GET", f"{V3}/positionStatsInPendingAck/{topic_path(topic)}/"
                                    f"{quote(subscription, safe='')}/{ledger_id}/{entry_id}", {"batchIndex": batch_index},
                             shape=dict)

    def abort_transaction(self, txn: TxnId) -> None:
        self._request("POST", f"{V3}/abortTransaction/{txn.most_bits}/{txn.least_bits}")

    # -- /admin/v2 ----------------------------------------------------------------------------
    def dynamic_config(self) -> dict[str, str]:
        return self._config("/admin/v2/brokers/configuration/values")

    def runtime_config(self) -> dict[str, str]:
        return self._config("/admin/v2/brokers/configuration/runtime")

    def update_dynamic_config(self, name: str, value: str) -> None:
        self._request("POST", f"/admin/v2/brokers/configuration/{quote(name, safe='')}/{quote(str(value), safe='')}")

    def delete_dynamic_config(self, name: str) -> None:
        self._request("DELETE", f"/admin/v2/brokers/configuration/{quote(name, safe='')}")

    def list_tenants(self) -> list[str]:
        return self._request("GET", "/admin/v2/tenants", shape=SHAPES["strings"])

    def list_namespaces(self, tenant: str) -> list[str]:
        return self._request("GET", f"/admin/v2/namespaces/{quote(tenant, safe='')}", shape=SHAPES["strings"])

    def list_topics(self, namespace: str, include_system: bool = True) -> list[str]:
        tenant, ns = namespace.split("/", 1)
        return self._request("GET", f"/admin/v2/namespaces/{quote(tenant, safe='')}/{quote(ns, safe='')}/topics",
                             {"mode": "ALL", "includeSystemTopic": include_system}, shape=SHAPES["strings"])

    def unload_topic(self, topic: str) -> None:
        self._request("PUT", f"/admin/v2/persistent/{topic_path(topic)}/unload")

    def broker_versions(self) -> dict[str, str]:
        """The answering broker's version; Pulsar sends it as a bare string, quoted or not."""
        response = self._call("GET", "/admin/v2/brokers/version", {}, None)
        if response.status_code != 200:
            self._result(response)
        where = str(response.request.url)
        text = response.content.decode("utf-8", "replace").strip().strip('"')
        if not _VERSION.match(text):
            shown = "an HTML page (a login page from a proxy?)" if text.startswith("<") else repr(mask(text)[:60])
            raise BadReplyError(f"{where}: expected a Pulsar version such as 4.0.1, got {shown}")
        host = httpx.URL(self.base_url).netloc.decode()
        return {host: text}


    def delete_subscription(self, topic: str, subscription: str) -> None:
        self._request("DELETE", f"/admin/v2/persistent/{topic_path(topic)}/subscription/{quote(subscription, safe='')}")

    def delete_topic(self, topic: str) -> None:
        self._request("DELETE", f"/admin/v2/persistent/{topic_path(topic)}", {"force": True})

    # -- cluster identity and brokers ---------------------------------------------------------
    def list_clusters(self) -> list[str]:
        return self._request("GET", "/admin/v2/clusters", shape=SHAPES["strings"])

    def active_brokers(self, cluster: str) -> list[str]:
        return self._request("GET", f"/admin/v2/brokers/{quote(cluster, safe='')}", shape=SHAPES["strings"])

    def internal_configuration(self) -> Json:
        return self._request("GET", "/admin/v2/brokers/internal-configuration") or {}

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
        other._proxy = _environment_proxy(other.base_url)
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
        return self._request("GET", f"/admin/v2/persistent/{topic_path(topic)}/internalStats")

    def broker_time_ms(self) -> Optional[int]:
        from email.utils import parsedate_to_datetime

        response = self._call("GET", "/admin/v2/brokers/version", {}, None)
        if response.status_code != 200:
            self._result(response)
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
            self._result(response)
        return response.text


_VERSION = re.compile(r"\d+\.\d+(\.\d+)?([.+-][0-9A-Za-z.+-]*)?$")


def _seconds(value: Any) -> float:
    """client.conf / flag request timeout in seconds (a float); garbage is a one-line error naming it."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise TargetUnreachableError(f"--request-timeout {value!r}: not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise TargetUnreachableError(f"--request-timeout {value}: must be a positive number of seconds")
    return seconds


def _origin(url: httpx.URL) -> str:
    try:
        return f"{url.scheme}://{url.netloc.decode()}"
    except (ValueError, UnicodeError):
        return "the target"


def _domain(host: str) -> Optional[str]:
    """The service host's domain (``pulsar.example.com`` → ``example.com``); None for IPs and bare names, where only
    the exact host (or the active broker list) counts."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    parts = host.split(".")
    if len(parts) < 3:
        return None  # `localhost`, `example.com`: no parent domain narrower than a public suffix
    return ".".join(parts[1:])


def _has_json_reason(response: httpx.Response) -> bool:
    raw = response.content
    if not raw.lstrip().startswith(b"{") or not _depth_ok(raw):
        return False
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and bool(data.get("reason"))


def _reason(response: httpx.Response) -> str:
    """Pulsar's ``{"reason": …}`` or a short plain-text body, on one line; HTML pages give the status phrase."""
    raw = response.content
    text = ""
    if _depth_ok(raw):
        try:
            data = json.loads(raw)
            if isinstance(data, dict) and data.get("reason"):
                text = str(data["reason"])
        except (ValueError, RecursionError):
            pass
    if not text:
        body = raw.decode("utf-8", "replace").strip()
        text = body if body and not body.startswith("<") else response.reason_phrase
    return " ".join(text.split())[:300]


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
