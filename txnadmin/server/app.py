"""`txnadmin serve`: any TransactionsAdmin (normally the embedded engine) over Pulsar's admin REST paths.

The routes are the rows of the endpoint table (:mod:`txnadmin.admin.endpoints`), each calling the admin method of
the same name with the arguments read back from the path, the query and the body.

Hostile input gets a 4xx in Pulsar's error shape (``{"reason": …}``), never a 500: credentials are checked before
a body is read, bodies are bounded before they are read, and numbers are taken only as plain 64-bit integers (so
``1e999``, ``Infinity``, 5,000 digits, ``true`` or ``1.5`` where Pulsar wants an int are 400s).
"""

from __future__ import annotations

import hmac
import logging
import re
from typing import Any, Callable, Optional
from urllib.parse import unquote_to_bytes

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..admin.endpoints import ENDPOINTS, LONG, NAMESPACE, TOPIC, TXN, VERSION_TEXT, Endpoint
from ..admin.protocol import AdminError, TransactionsAdmin, TxnId, UnexpectedServerError, unexpected_error_body

MAX_BODY = 64 * 1024  # the only body Pulsar's transaction API takes is a number
_LONG = re.compile(r"-?[0-9]{1,19}")
log = logging.getLogger(__name__)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


# A topic's local name may hold "/" (pulsar-admin sends it as %2F). Routing runs on the decoded path, where that
# slash would split the segment, so it is carried through routing as NUL (never valid in a name) and restored.
_SLASH = "\x00"


class EncodedSlashes:
    """ASGI middleware: route on the raw path, keeping each %2F inside its path segment."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and re.search(rb"%2[fF]", raw):
            raw = re.sub(rb"%2[fF]", b"%00", raw.split(b"?", 1)[0])
            scope = dict(scope, path=unquote_to_bytes(raw).decode("utf-8", "replace"))
        await self.app(scope, receive, send)


def _int(value: Any, name: str) -> int:
    """A Java long, written plainly: anything else (floats, exponents, booleans, huge numbers) is a 400."""
    text = value.strip() if isinstance(value, str) else None
    if text is None or not _LONG.fullmatch(text) or not -2**63 <= int(text) < 2**63:
        shown = repr(value)[:40] + ("…" if len(repr(value)) > 40 else "")
        raise AdminError(f"{name} must be an integer, got {shown}", 400)
    return int(text)


NO_TRACE = "(the embedded engine is not Java: no stack trace)"


def _error(reason: str, status: int) -> JSONResponse:
    return JSONResponse({"reason": reason}, status_code=status)


def authorized(request: Request, token: Optional[str]) -> bool:
    """Constant-time comparison on bytes: a header with non-ASCII characters is simply not the token."""
    if token is None:
        return True
    given = request.headers.get("authorization", "").encode("latin-1", "replace")
    return hmac.compare_digest(given, f"Bearer {token}".encode("latin-1", "replace"))


async def _read_body(request: Request) -> bytes:
    """The request body, refusing (413) one larger than MAX_BODY before and while reading it."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise AdminError(f"request body too large (limit {MAX_BODY} bytes)", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise AdminError(f"request body too large (limit {MAX_BODY} bytes)", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _int_body(raw: bytes, name: str) -> int:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AdminError("request body is not UTF-8", 400) from None
    return _int(text, name)


Reader = Callable[[Request, dict, Any], Any]  # (request, path params, body) → one argument


def _arguments(row: Endpoint) -> Callable[[Request, dict, Any], list]:
    """The row's arguments, in the protocol's order, from a request's path params, query and body."""
    readers = [_reader(row, arg) for arg in row.args]
    return lambda request, params, body: [read(request, params, body) for read in readers]


def _reader(row: Endpoint, arg: str) -> Reader:
    for piece, name, kind in row.variables:
        if name == arg:
            return _path_reader(piece, kind)
    for query in row.query:
        if query.arg == arg:
            return _query_reader(query.name, query.is_flag)
    if arg == row.body:
        return lambda request, p, body: body
    raise ValueError(f"{row}: nothing in the request carries {arg!r}")


def _path_reader(piece: str, kind: str) -> Reader:
    """How one path variable of the table becomes its argument again (the inverse of HttpAdmin's encoding)."""
    names = re.findall(r"\{(\w+)\}", piece)
    if kind == TOPIC:
        return lambda request, p, body: f"persistent://{p['tenant']}/{p['namespace']}/{p['topic']}"
    if kind == NAMESPACE:
        return lambda request, p, body: f"{p['tenant']}/{p['namespace']}"
    if kind == TXN:
        most, least = names
        return lambda request, p, body: TxnId(_int(p[most], most), _int(p[least], least))
    name, = names
    if kind == LONG:
        return lambda request, p, body: _int(p[name], name)
    return lambda request, p, body: p[name]


def _query_reader(name: str, flag: bool) -> Reader:
    if flag:
        return lambda request, p, body: _flag(request, name)
    return lambda request, p, body: _opt_int(request, name)


def _opt_int(request: Request, name: str) -> Optional[int]:
    value = request.query_params.get(name)
    return None if value in (None, "") else _int(value, name)


def _in_routing_order(routes: list[Route]) -> list[Route]:
    """Table order (the hot transaction calls first: Starlette tries routes one by one), except that a route goes
    before an earlier one that would also match its paths: ``/brokers/internal-configuration`` before
    ``/brokers/{cluster}``, as Pulsar's JAX-RS routing prefers the template with more literal segments."""
    ordered: list[Route] = []
    for route in routes:
        example = re.sub(r"\{\w+\}", "x", route.path)  # one concrete path the route answers
        shadowing = (at for at, earlier in enumerate(ordered)
                     if earlier.methods == route.methods and earlier.path_regex.match(example))
        ordered.insert(next(shadowing, len(ordered)), route)
    return ordered


# (row, its arguments) → None when this broker answers, else (the owner's base URL, whether this broker is the leader)
OwnerOf = Callable[[Endpoint, list], Optional[tuple[str, bool]]]


def _redirect(request: Request, owner: tuple[str, bool]) -> Response:
    """Pulsar's answer from a broker that does not own the topic or coordinator asked about (validateTopicOwnership):
    307 to the same path and query on the owner, with ``authoritative`` set to whether this broker leads."""
    from urllib.parse import parse_qsl, urlencode

    base, leader = owner
    raw = request.scope.get("raw_path") or request.url.path.encode()
    query = [(k, v) for k, v in parse_qsl(request.url.query, keep_blank_values=True) if k != "authoritative"]
    query.append(("authoritative", "true" if leader else "false"))
    return Response(status_code=307, headers={"Location": f"{base}{raw.decode('latin-1')}?{urlencode(query)}"})


def create_app(admin: TransactionsAdmin, token: Optional[str] = None,
               extra_routes: Optional[list[Route]] = None, owner_of: Optional[OwnerOf] = None) -> Starlette:
    """Every row of the endpoint table as a route to the same method of ``admin``; with ``owner_of`` (a broker of a
    cluster), a call about what another broker owns is redirected there."""

    def route(row: Endpoint) -> Route:
        call = getattr(admin, row.call)
        arguments = _arguments(row)
        version_text = row.shape == VERSION_TEXT

        # Async on purpose: every admin call is short and CPU-bound, and a thread hop per request costs
        # more than the call (measured in bench/downgrade_status.py).
        async def handler(request: Request) -> Response:
            if not authorized(request, token):  # before a single byte of a body is read
                return _error("Unauthorized", 401)
            body = None
            if row.body is not None:
                try:
                    body = _int_body(await _read_body(request), row.body)
                except AdminError as exc:
                    return _error(exc.reason, exc.status)
            try:
                params = {k: v.replace(_SLASH, "/") if isinstance(v, str) else v
                          for k, v in request.path_params.items()}
                args = arguments(request, params, body)
                if owner_of is not None and (owner := owner_of(row, args)) is not None:
                    return _redirect(request, owner)
                result = call(*args)
                if result is None:
                    return Response(status_code=204)
                if version_text:  # Pulsar sends the answering broker's version as bare text
                    return PlainTextResponse(next(iter(result.values())))
                return JSONResponse(result)
            except UnexpectedServerError as exc:  # as Pulsar's RestException sends it: plain text, not JSON
                return PlainTextResponse(unexpected_error_body(exc.message, NO_TRACE), status_code=500)
            except AdminError as exc:
                return _error(exc.reason, exc.status or 500)
            except Exception as exc:  # a bug must not take the server's error shape away (logged below)
                log.exception("%s %s failed", request.method, request.url.path)
                return _error(f"internal error: {type(exc).__name__}", 500)

        return Route(row.path, handler, methods=[row.method])

    routes = _in_routing_order([route(row) for row in ENDPOINTS.values()])

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        return _error(getattr(exc, "detail", None) or "error", status)

    return Starlette(routes=routes + list(extra_routes or []), middleware=[Middleware(EncodedSlashes)],
                     exception_handlers={404: http_error, 405: http_error})
