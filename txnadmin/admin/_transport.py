"""HttpAdmin's transport layer: one keep-alive connection per thread, TLS settings, and one exchange under a deadline.

Everything here is below the admin calls: it knows URLs, bytes and sockets, not Pulsar. Failures come out as the
protocol's errors, naming the target's origin (scheme://host:port): :class:`TargetUnreachableError` for anything
that kept an answer from arriving, :class:`BadReplyError` for a body too large to be an admin answer. Which thread
uses which transport, and everything above one exchange (retries, redirects, reply checks), is HttpAdmin's.
"""

from __future__ import annotations

import re
import select
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import httptools
import httpx

from .auth import AuthError
from .protocol import BadReplyError, TargetUnreachableError

MAX_BODY = 256 * 1024 * 1024  # a reply larger than this is not an admin answer
# A request that must not be sent twice (anything but GET) reuses a keep-alive connection only if its last reply
# ended less than this long ago. A server drops an idle connection when its own timer fires (uvicorn after 5 s,
# Jetty after 30 s), and a request written in that instant is reset with nothing to say whether it was processed:
# no client can win that race by polling first, only by not standing in it.
WRITE_REUSE_IDLE = 1.0


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
    """One thread's keep-alive connection for plain-http calls: a blocking socket, the request written in one send,
    the reply read by httptools' parser (llhttp, in C).

    Why not httpx's own transport, nor ``http.client``: a 10,000-store ``downgrade status`` makes up to two calls per
    store and is bounded by the client's CPU. httpcore's pool, tracing and h11's event machinery were half of a
    call's client CPU; ``http.client`` then parsed every reply's headers through the ``email`` package (40 % of the
    client's interpreter time in a worst-case poll, measured with ``py-spy --gil``) and, with a timeout set, polled
    the socket before every send and receive and switched its blocking mode on every call. Here a call is one send
    and (for a reply of a few KB) one receive: the timeout is the kernel's (``SO_RCVTIMEO``/``SO_SNDTIMEO``), set only
    when the time left moves by more than ``TIMEOUT_SLACK``, and a connection is reused without first polling it: a
    GET whose reused connection turns out closed (no byte of a reply) is sent again once on a new one, as a browser
    would; any other method must not be sent twice, so it goes on a new connection unless the idle one carried a
    reply moments ago (``WRITE_REUSE_IDLE``) and a poll shows it still open. Numbers in ``docs/benchmarks.md``.
    Everything above the transport (one deadline, retries, redirects and their credential rules, auth, reply checks)
    is HttpAdmin's; failures are raised as the httpx exceptions httpx's transport raises, so HttpAdmin words them
    the same. Any other scheme (https, also after a redirect), and HEAD, go to httpx's transport (``fallback``).
    A call redirected to another broker leaves the connection it came from idle, not closed (up to ``MAX_IDLE_HOSTS``
    origins): on a cluster most calls enter at one broker and are sent on to the owner, and reconnecting on both sides
    of every redirect doubled a poll's time.
    """

    def __init__(self, fallback: Callable[[], httpx.BaseTransport]):
        self._make_fallback = fallback
        self._fallback: Optional[httpx.BaseTransport] = None
        self._sock: Optional[socket.socket] = None
        self._where: Optional[tuple[str, int]] = None
        self._kernel_timeout: Optional[float] = None  # what SO_RCVTIMEO/SO_SNDTIMEO hold; None: not set (yet)
        self._idle_since = 0.0  # monotonic time the last reply on _sock ended
        # other origins' idle connections: origin -> (socket, its kernel timeout, when its last reply ended)
        self._idle: dict[tuple[str, int], tuple[socket.socket, Optional[float], float]] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http" or request.method == "HEAD":
            if self._fallback is None:
                self._fallback = self._make_fallback()
            return self._fallback.handle_request(request)
        timeout = request.extensions.get("timeout", {}).get("read") or 30.0
        reply = self.open(request.method, (url.host, url.port or 80), _request_head(request), timeout, request)
        return httpx.Response(reply.status, headers=reply.headers, stream=reply,
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": reply.reason})

    def open(self, method: str, where: tuple[str, int], head: bytes, timeout: float,
             request: Optional[httpx.Request] = None) -> "_Reply":
        """Send ``head`` (request line, headers and body) to ``where`` and read the reply up to its body; the body is
        read by iterating the returned reply. ``request`` only goes into the httpx exceptions raised."""
        if where != self._where:
            self._switch(where)
        if self._sock is not None and method != "GET" and not self._fresh_enough():
            self._drop()
        for _ in range(2):
            reused = self._sock is not None
            sock = self._sock if self._sock is not None else self._connect(where, timeout, request)
            self._set_timeout(sock, timeout)
            try:
                sock.sendall(head)
                reply = _Reply(self, sock, request)
                reply.read_head()
            except _StaleConnection:
                self._drop()
                if reused and method == "GET":
                    continue  # the server closed it while idle: nothing was processed, send again on a new one
                raise httpx.RemoteProtocolError("Remote end closed connection without response",
                                                request=request) from None
            except (TimeoutError, BlockingIOError) as exc:  # BlockingIOError: the kernel's SO_RCVTIMEO ran out
                self._drop()
                raise httpx.ReadTimeout(str(exc) or "timed out", request=request) from None
            except OSError as exc:
                self._drop()
                if reused and method == "GET" and isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                    continue  # as above: the server dropped the idle connection under the request
                raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from None
            except httpx.HTTPError:
                self._drop()
                raise
            return reply
        raise httpx.RemoteProtocolError("Remote end closed connection without response", request=request)

    def _switch(self, where: tuple[str, int]) -> None:
        """Make ``where``'s idle connection (if any) the current one, leaving the current one idle for its origin."""
        if self._sock is not None and self._where is not None:
            self._idle[self._where] = (self._sock, self._kernel_timeout, self._idle_since)
            while len(self._idle) > MAX_IDLE_HOSTS:
                oldest = min(self._idle, key=lambda origin: self._idle[origin][2])
                _close_quietly(self._idle.pop(oldest)[0])
        self._sock, self._kernel_timeout, self._idle_since = self._idle.pop(where, (None, None, 0.0))
        self._where = where

    def _drop(self) -> None:
        """Close the current connection (the others stay idle)."""
        if self._sock is not None:
            _close_quietly(self._sock)
            self._sock = None

    def _connect(self, where: tuple[str, int], timeout: float,
                 request: Optional[httpx.Request]) -> socket.socket:
        try:
            sock = socket.create_connection(where, timeout=timeout)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc), request=request) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the request is one write: send it now
        except OSError:
            pass  # not every platform has it; the request still goes, a little later
        self._sock, self._where, self._kernel_timeout = sock, where, None
        return sock

    def _set_timeout(self, sock: socket.socket, seconds: float) -> None:
        """Bound each send and receive by ``seconds`` (HttpAdmin also checks its deadline between body chunks).

        The kernel's timeouts on a blocking socket, because Python's own timeout mode polls before every send and
        receive; each setting is a system call, so it is set again only when it moved by more than TIMEOUT_SLACK."""
        seconds = max(seconds, 0.001)  # a kernel timeout of 0 would mean none at all
        current = self._kernel_timeout
        if current is not None and abs(current - seconds) <= TIMEOUT_SLACK:
            return
        packed = struct.pack("ll", int(seconds), int((seconds % 1) * 1_000_000))
        try:
            if sock.gettimeout() is not None:
                sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, packed)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, packed)
        except (OSError, struct.error):
            sock.settimeout(seconds)  # no kernel timeouts here: Python's own mode (a poll before each call)
            self._kernel_timeout = None
            return
        self._kernel_timeout = seconds

    def _fresh_enough(self) -> bool:
        """Whether a request that must not be sent twice may go on the idle connection: idle for moments only
        (see WRITE_REUSE_IDLE) and not closed by the server meanwhile."""
        return time.monotonic() - self._idle_since < WRITE_REUSE_IDLE and self._idle_open()

    def _idle_open(self) -> bool:
        """An idle keep-alive socket with something to read has been closed by the server (or holds garbage)."""
        sock = self._sock
        if sock is None:
            return True
        try:
            if hasattr(select, "poll"):  # select() cannot take a descriptor above FD_SETSIZE (1024)
                poller = select.poll()
                poller.register(sock, select.POLLIN)
                return not poller.poll(0)
            return not select.select([sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def done_with(self, sock: socket.socket, reusable: bool) -> None:
        """A reply was read to its end (or abandoned): its connection carries the next call only if it can."""
        if not reusable and self._sock is sock:
            self._drop()
        else:
            self._idle_since = time.monotonic()

    def close(self) -> None:
        self._drop()
        for sock, _, _ in self._idle.values():
            _close_quietly(sock)
        self._idle.clear()
        if self._fallback is not None:
            self._fallback.close()
            self._fallback = None


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


MAX_IDLE_HOSTS = 16  # other origins a thread keeps an idle connection to (the brokers a cluster redirects to)
TIMEOUT_SLACK = 0.05  # seconds a socket's timeout may differ from the time left before it is set again (a syscall)
MAX_HEAD = 65536  # bytes of status line and headers, as http.client's line limit
MAX_HEADERS = 100  # as http.client
_UNSAFE = re.compile(rb"[\r\n\0]")


def _request_head(request: httpx.Request) -> bytes:
    """An httpx request as the bytes to send (see ``_head``)."""
    line = b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)
    return _head(line, request.headers.raw, request.content or None)


def _head(request_line: bytes, fields, content: Optional[bytes]) -> bytes:
    """The request line and header ``fields`` (name, value pairs), then the body: the bytes to send. A header that
    would split the request (CR, LF or NUL in it) is refused, as http.client and h11 refuse it."""
    lines = [request_line]
    for name, value in fields:
        if _UNSAFE.search(name) or _UNSAFE.search(value):
            raise httpx.LocalProtocolError(f"Invalid header value for {name.decode('latin-1')!r}")
        lines.append(b"%s: %s" % (name, value))
    lines.append(b"\r\n")
    return b"\r\n".join(lines) + (content or b"")


class _StaleConnection(Exception):
    """The connection ended before any byte of a reply."""


class _HeadError(Exception):
    """A reply's head is beyond what an admin answer needs (too many headers)."""


class _Reply(httpx.SyncByteStream):
    """One reply, read by httptools: ``read_head`` reads up to the end of the headers (and whatever of the body came
    with them); iterating reads the rest, chunk by chunk, so HttpAdmin checks its deadline in between."""

    def __init__(self, owner: KeepAliveTransport, sock: socket.socket, request: Optional[httpx.Request]):
        self._owner, self._sock, self._request = owner, sock, request
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []
        self._head_size = 0  # bytes of headers parsed
        self._read = 0  # bytes received before the head was complete
        self._head_done = False
        self._complete = False
        self._keep_alive = False
        self._trailing = False
        self._received = b""  # the first bytes, quoted when they are not HTTP
        self._closed = False

    # -- httptools' callbacks
    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        self._head_size += len(name) + len(value) + 4
        if len(self.headers) > MAX_HEADERS:
            raise _HeadError(f"got more than {MAX_HEADERS} headers")
        if self._head_size > MAX_HEAD:
            raise _HeadError(f"got more than {MAX_HEAD} bytes when reading header line")

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim reply (100 Continue): the real one follows on the same connection
            self.reason, self.headers = b"", []
            return
        self.status, self._head_done = status, True
        self._keep_alive = self._parser.should_keep_alive()  # read here: the parser forgets it after the message

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_begin(self) -> None:
        if self._complete:
            self._trailing = True  # bytes after the reply: the connection cannot carry another

    def on_message_complete(self) -> None:
        if self._head_done:
            self._complete = True
            self._keep_alive = self._keep_alive and self._parser.should_keep_alive()

    # -- reading
    def _feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__ or exc.__cause__
            if isinstance(cause, _HeadError):
                raise httpx.RemoteProtocolError(str(cause), request=self._request) from None
            raise httpx.RemoteProtocolError(f"invalid reply ({exc})", request=self._request) from None
        except httptools.HttpParserError as exc:
            if self._complete:
                self._trailing = True  # garbage after a whole reply: the reply stands, the connection goes
                return
            if not self._head_done and not self._received.startswith(b"HTTP/"):
                line = self._received.split(b"\n", 1)[0].strip().decode("latin-1")
                raise httpx.RemoteProtocolError(f"illegal status line: {line[:80]!r}", request=self._request) from None
            raise httpx.RemoteProtocolError(f"invalid reply ({exc})", request=self._request) from None

    def _eof(self) -> None:
        """The server closed the connection: a reply that runs until the close ends here; any other is cut short."""
        if not self._received:
            raise _StaleConnection()
        if not self._head_done:
            raise httpx.RemoteProtocolError("Remote end closed connection without a complete reply head",
                                            request=self._request)
        if any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.headers):
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body",
                                            request=self._request)
        self._complete, self._keep_alive = True, False

    def read_head(self) -> None:
        while not self._head_done:
            data = self._sock.recv(65536)
            if not data:
                self._eof()
                return
            if len(self._received) < 200:
                self._received += data[:200]
            self._read += len(data)
            self._feed(data)
            if not self._head_done and self._read > MAX_HEAD:  # a head that never ends is not buffered for ever
                raise httpx.RemoteProtocolError(f"got more than {MAX_HEAD} bytes when reading header line",
                                                request=self._request)

    def __iter__(self):
        try:
            while True:
                if self._chunks:
                    chunks, self._chunks = self._chunks, []
                    yield b"".join(chunks)
                if self._complete:
                    self._finish(self._keep_alive and not self._trailing)
                    return
                try:
                    data = self._sock.recv(65536)
                except (TimeoutError, BlockingIOError) as exc:
                    raise httpx.ReadTimeout(str(exc) or "timed out", request=self._request) from None
                except OSError as exc:
                    raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from None
                if data:
                    self._feed(data)
                else:
                    self._eof()
        except BaseException:
            self._finish(False)
            raise

    def _finish(self, reusable: bool) -> None:
        if not self._closed:
            self._closed = True
            self._owner.done_with(self._sock, reusable)

    def close(self) -> None:
        self._finish(self._complete and self._keep_alive and not self._trailing)


def exchange(transport: httpx.BaseTransport, method: str, url: httpx.URL, headers: dict, content: Optional[bytes],
             deadline: float, timeout: float) -> httpx.Response:
    """Send one request and read its body, all before ``deadline`` (a trickled body cannot stretch it);
    ``timeout`` is the ``--request-timeout`` the errors name."""
    where = origin(url)
    remaining = _time_left(deadline, where, timeout)
    request = httpx.Request(method, url, content=content, headers=headers,
                            extensions={"timeout": {"connect": remaining, "read": remaining, "write": remaining,
                                                    "pool": remaining}})
    sent = False
    try:
        response = transport.handle_request(request)
        sent = True
        response.request = request
        try:
            response._content = _body(response.stream, where, deadline)  # a sync transport gives a sync stream
        finally:
            response.close()
    except httpx.TransportError as exc:
        raise _unreachable(exc, where, timeout, sent) from None
    return response


class Reply:
    """A reply read whole by the direct path: what HttpAdmin and its reply checks read of one, under the same names
    as ``httpx.Response`` (``headers`` holds lower-case names, repeated ones joined by ", " as httpx joins them)."""

    __slots__ = ("status_code", "reason_phrase", "headers", "content", "url")

    def __init__(self, status_code: int, reason_phrase: str, headers: dict[str, str], content: bytes, url: str):
        self.status_code, self.reason_phrase, self.headers = status_code, reason_phrase, headers
        self.content, self.url = content, url

    @property
    def text(self) -> str:
        charset = _CHARSET.search(self.headers.get("content-type", ""))
        try:
            return self.content.decode(charset.group(1) if charset else "utf-8", "replace")
        except LookupError:  # a charset Python does not know: as httpx, fall back to UTF-8
            return self.content.decode("utf-8", "replace")


_CHARSET = re.compile(r"charset=[\"']?([\w.:-]+)", re.IGNORECASE)
SAFE_TARGET = re.compile(r"/[\x21-\x7e]*")  # a request target with nothing to encode or refuse: no space, no control


@dataclass(frozen=True)
class DirectRoute:
    """A plain-http target taken apart once, for ``exchange_direct``: its origin (for errors), socket address, Host
    header and path prefix (a base URL may carry one)."""

    origin: str
    address: tuple[str, int]
    host_header: str
    prefix: str


def direct_route(base_url: str) -> Optional[DirectRoute]:
    """The route for ``base_url`` when its calls can take the direct path: plain http, no credentials in the URL."""
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL:
        return None
    if url.scheme != "http" or url.userinfo or not url.host:
        return None
    netloc = url.netloc.decode("ascii")
    return DirectRoute(f"http://{netloc}", (url.host, url.port or 80), netloc, url.raw_path.decode("ascii").rstrip("/"))


def exchange_direct(transport: KeepAliveTransport, route: DirectRoute, method: str, url: str, target: str,
                    headers: dict, content: Optional[bytes], deadline: float, timeout: float) -> Reply:
    """``exchange`` for a plain-http ``url`` on the keep-alive path, without httpx's URL, request and response objects
    (parsing the URL alone cost 30 µs of a call's client CPU): ``target`` (matching SAFE_TARGET) is ``url``'s path and
    query, ``route`` its origin taken apart. Same deadline, limits and errors as ``exchange``."""
    where = route.origin
    remaining = _time_left(deadline, where, timeout)
    sent = False
    try:
        sending = [(b"Host", route.host_header.encode("ascii"))]
        for name, value in headers.items():
            try:
                sending.append((name.encode("ascii"), value.encode("ascii")))
            except UnicodeEncodeError:
                raise httpx.LocalProtocolError(f"Invalid header value for {name!r}") from None
        if content is not None:
            sending.append((b"Content-Length", b"%d" % len(content)))
        head = _head(f"{method} {target} HTTP/1.1".encode("ascii"), sending, content)
        reply = transport.open(method, route.address, head, remaining)
        sent = True
        try:
            body = _body(reply, where, deadline)
        finally:
            reply.close()
    except httpx.TransportError as exc:
        raise _unreachable(exc, where, timeout, sent) from None
    fields: dict[str, str] = {}
    for name, value in reply.headers:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        fields[key] = f"{fields[key]}, {text}" if key in fields else text
    return Reply(reply.status, reply.reason.decode("latin-1"), fields, body, url)


def _time_left(deadline: float, where: str, timeout: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        error = TargetUnreachableError(f"{where}: no answer within --request-timeout {timeout:g} s (timeout)")
        error.connection_failed = True
        raise error
    return remaining


def _body(stream, where: str, deadline: float) -> bytes:
    """A reply's body, chunk by chunk: refused past MAX_BODY, a timeout once ``deadline`` passes between chunks."""
    chunks, size = [], 0
    for chunk in stream:
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            raise BadReplyError(f"{where}: reply larger than {MAX_BODY // 2**20} MiB")
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("body not complete in time")
    return b"".join(chunks)


def _unreachable(exc: httpx.TransportError, where: str, timeout: float, sent: bool) -> TargetUnreachableError:
    """A transport failure in HttpAdmin's words; ``before_send`` marks the ones a non-GET may be retried after."""
    if isinstance(exc, httpx.ConnectError):
        error = TargetUnreachableError(f"{where}: cannot connect ({short(exc)})")
        error.before_send = True
    elif isinstance(exc, httpx.TimeoutException):
        error = TargetUnreachableError(f"{where}: no answer within --request-timeout {timeout:g} s (timeout)")
    else:
        error = TargetUnreachableError(f"{where}: connection failed ({short(exc)})")
        error.before_send = not sent and isinstance(exc, httpx.ProxyError)
    error.connection_failed = True
    return error


def origin(url: httpx.URL) -> str:
    try:
        return f"{url.scheme}://{url.netloc.decode()}"
    except (ValueError, UnicodeError):
        return "the target"


def short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
