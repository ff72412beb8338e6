"""HttpAdmin's transport layer: one keep-alive connection per thread, TLS settings, and one exchange under a deadline.

Everything here is below the admin calls: it knows URLs, bytes and sockets, not Pulsar. Failures come out as the
protocol's errors, naming the target's origin (scheme://host:port): :class:`TargetUnreachableError` for anything
that kept an answer from arriving, :class:`BadReplyError` for a body too large to be an admin answer. Which thread
uses which transport, and everything above one exchange (retries, redirects, reply checks), is HttpAdmin's.
"""

from __future__ import annotations

import http.client
import select
import ssl
import time
from pathlib import Path
from typing import Callable, Optional

import httpx

from .auth import AuthError
from .protocol import BadReplyError, TargetUnreachableError

MAX_BODY = 256 * 1024 * 1024  # a reply larger than this is not an admin answer


def environment_proxy(base_url: str) -> Optional[str]:
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


class KeepAliveTransport(httpx.BaseTransport):
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

    def __init__(self, owner: KeepAliveTransport, reply: http.client.HTTPResponse, request: httpx.Request):
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


def exchange(transport: httpx.BaseTransport, method: str, url: httpx.URL, headers: dict, content: Optional[bytes],
             deadline: float, timeout: float) -> httpx.Response:
    """Send one request and read its body, all before ``deadline`` (a trickled body cannot stretch it);
    ``timeout`` is the ``--request-timeout`` the errors name."""
    remaining = deadline - time.monotonic()
    where = origin(url)
    if remaining <= 0:
        raise TargetUnreachableError(f"{where}: no answer within --request-timeout {timeout:g} s (timeout)")
    request = httpx.Request(method, url, content=content, headers=headers,
                            extensions={"timeout": {"connect": remaining, "read": remaining, "write": remaining,
                                                    "pool": remaining}})
    sent = False
    try:
        response = transport.handle_request(request)
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
        error = TargetUnreachableError(f"{where}: cannot connect ({short(exc)})")
        error.before_send = True
        raise error from None
    except httpx.TimeoutException:
        raise TargetUnreachableError(f"{where}: no answer within --request-timeout {timeout:g} s "
                                     "(timeout)") from None
    except httpx.TransportError as exc:
        error = TargetUnreachableError(f"{where}: connection failed ({short(exc)})")
        error.before_send = not sent and isinstance(exc, httpx.ProxyError)
        raise error from None
    return response


def origin(url: httpx.URL) -> str:
    try:
        return f"{url.scheme}://{url.netloc.decode()}"
    except (ValueError, UnicodeError):
        return "the target"


def short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
