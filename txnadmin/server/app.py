"""`txnadmin serve`: any TransactionsAdmin (normally the embedded engine) over Pulsar's admin REST paths.

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

from ..admin.protocol import AdminError, TransactionsAdmin, TxnId

V3 = "/admin/v3/transactions"
TOPIC = "{tenant}/{namespace}/{topic}"
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


def _topic(p: dict) -> str:
    return f"persistent://{p['tenant']}/{p['namespace']}/{p['topic']}"


def _int(value: Any, name: str) -> int:
    """A Java long, written plainly: anything else (floats, exponents, booleans, huge numbers) is a 400."""
    text = value.strip() if isinstance(value, str) else None
    if text is None or not _LONG.fullmatch(text) or not -2**63 <= int(text) < 2**63:
        shown = repr(value)[:40] + ("…" if len(repr(value)) > 40 else "")
        raise AdminError(f"{name} must be an integer, got {shown}", 400)
    return int(text)


def _error(reason: str, status: int) -> JSONResponse:
    return JSONResponse({"reason": reason}, status_code=status)


def _authorized(request: Request, token: Optional[str]) -> bool:
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


def create_app(admin: TransactionsAdmin, token: Optional[str] = None,
               extra_routes: Optional[list[Route]] = None) -> Starlette:
    def endpoint(fn: Callable[[Request, dict], Any], status: int = 200):
        # Async on purpose: every admin call is short and CPU-bound, and a thread hop per request costs
        # more than the call (measured in bench/downgrade_status.py).
        async def handler(request: Request) -> Response:
            if not _authorized(request, token):
                return _error("Unauthorized", 401)
            try:
                params = {k: v.replace(_SLASH, "/") if isinstance(v, str) else v
                          for k, v in request.path_params.items()}
                result = fn(request, params)
            except AdminError as exc:
                return _error(exc.reason, exc.status or 500)
            except Exception as exc:  # a bug must not take the server's error shape away (logged below)
                log.exception("%s %s failed", request.method, request.url.path)
                return _error(f"internal error: {type(exc).__name__}", 500)
            if result is None:
                return Response(status_code=204)
            if isinstance(result, Response):
                return result
            return JSONResponse(result, status_code=status)
        return handler

    def scale(request: Request, p: dict):
        admin.scale_coordinators(request.state.replicas)

    async def scale_handler(request: Request) -> Response:
        if not _authorized(request, token):  # before a single byte of the body is read
            return _error("Unauthorized", 401)
        try:
            request.state.replicas = _int_body(await _read_body(request), "replicas")
        except AdminError as exc:
            return _error(exc.reason, exc.status)
        return await endpoint(scale)(request)

    def opt_int(request: Request, name: str) -> Optional[int]:
        value = request.query_params.get(name)
        return None if value in (None, "") else _int(value, name)

    routes = [
        Route(f"{V3}/coordinators", endpoint(lambda r, p: admin.list_coordinators())),
        Route(f"{V3}/coordinatorStats", endpoint(lambda r, p: admin.coordinator_stats(opt_int(r, "coordinatorId")))),
        Route(f"{V3}/coordinatorInternalStats/{{cid}}", endpoint(
            lambda r, p: admin.coordinator_internal_stats(_int(p["cid"], "coordinatorId"), _flag(r, "metadata")))),
        Route(f"{V3}/transactionInBufferStats/{TOPIC}/{{most}}/{{least}}", endpoint(
            lambda r, p: admin.transaction_in_buffer_stats(TxnId(_int(p["most"], "mostSigBits"),
                                                                 _int(p["least"], "leastSigBits")), _topic(p)))),
        Route(f"{V3}/transactionInPendingAckStats/{TOPIC}/{{sub}}/{{most}}/{{least}}", endpoint(
            lambda r, p: admin.transaction_in_pending_ack_stats(
                TxnId(_int(p["most"], "mostSigBits"), _int(p["least"], "leastSigBits")), _topic(p), p["sub"]))),
        Route(f"{V3}/transactionBufferStats/{TOPIC}", endpoint(
            lambda r, p: admin.transaction_buffer_stats(_topic(p), _flag(r, "lowWaterMarks"), _flag(r, "segmentStats")))),
        Route(f"{V3}/pendingAckStats/{TOPIC}/{{sub}}", endpoint(
            lambda r, p: admin.pending_ack_stats(_topic(p), p["sub"], _flag(r, "lowWaterMarks")))),
        Route(f"{V3}/transactionMetadata/{{most}}/{{least}}", endpoint(
            lambda r, p: admin.transaction_metadata(TxnId(_int(p["most"], "mostSigBits"), _int(p["least"], "leastSigBits"))))),
        Route(f"{V3}/slowTransactions/{{timeout}}", endpoint(
            lambda r, p: admin.slow_transactions(_int(p["timeout"], "timeout"), opt_int(r, "coordinatorId")))),
        Route(f"{V3}/pendingAckInternalStats/{TOPIC}/{{sub}}", endpoint(
            lambda r, p: admin.pending_ack_internal_stats(_topic(p), p["sub"], _flag(r, "metadata")))),
        Route(f"{V3}/transactionBufferInternalStats/{TOPIC}", endpoint(
            lambda r, p: admin.buffer_snapshot_internal_stats(_topic(p), _flag(r, "metadata")))),
        Route(f"{V3}/transactionCoordinator/replicas", scale_handler, methods=["POST"]),
        Route(f"{V3}/positionStatsInPendingAck/{TOPIC}/{{sub}}/{{lid}}/{{eid}}", endpoint(
            lambda r, p: admin.position_stats_in_pending_ack(_topic(p), p["sub"], _int(p["lid"], "ledgerId"),
                                                             _int(p["eid"], "entryId"), opt_int(r, "batchIndex")))),
        Route(f"{V3}/abortTransaction/{{most}}/{{least}}", endpoint(
            lambda r, p: admin.abort_transaction(TxnId(_int(p["most"], "mostSigBits"), _int(p["least"], "leastSigBits")))),
            methods=["POST"]),
        Route("/admin/v2/brokers/configuration/values", endpoint(lambda r, p: admin.dynamic_config())),
        Route("/admin/v2/brokers/configuration/runtime", endpoint(lambda r, p: admin.runtime_config())),
        Route("/admin/v2/brokers/configuration/{name}/{value}", endpoint(
            lambda r, p: admin.update_dynamic_config(p["name"], p["value"])), methods=["POST"]),
        Route("/admin/v2/brokers/configuration/{name}", endpoint(
            lambda r, p: admin.delete_dynamic_config(p["name"])), methods=["DELETE"]),
        Route("/admin/v2/tenants", endpoint(lambda r, p: admin.list_tenants())),
        Route("/admin/v2/namespaces/{tenant}", endpoint(lambda r, p: admin.list_namespaces(p["tenant"]))),
        Route("/admin/v2/namespaces/{tenant}/{namespace}/topics", endpoint(
            lambda r, p: admin.list_topics(f"{p['tenant']}/{p['namespace']}", _flag(r, "includeSystemTopic")))),
        Route(f"/admin/v2/persistent/{TOPIC}/unload", endpoint(lambda r, p: admin.unload_topic(_topic(p))),
              methods=["PUT"]),
        Route("/admin/v2/brokers/version", endpoint(
            lambda r, p: PlainTextResponse(next(iter(admin.broker_versions().values()))))),
        Route("/admin/v2/clusters", endpoint(lambda r, p: admin.list_clusters())),
        Route(f"/admin/v2/persistent/{TOPIC}/subscription/{{sub}}", endpoint(
            lambda r, p: admin.delete_subscription(_topic(p), p["sub"]), 204), methods=["DELETE"]),
        Route(f"/admin/v2/persistent/{TOPIC}", endpoint(lambda r, p: admin.delete_topic(_topic(p)), 204),
              methods=["DELETE"]),
        Route("/admin/v2/brokers/internal-configuration", endpoint(lambda r, p: admin.internal_configuration())),
        Route("/admin/v2/brokers/{cluster}", endpoint(lambda r, p: admin.active_brokers(p["cluster"]))),
        Route(f"/admin/v2/persistent/{TOPIC}/internalStats", endpoint(lambda r, p: admin.topic_internal_stats(_topic(p)))),
    ]
    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        return _error(getattr(exc, "detail", None) or "error", status)

    return Starlette(routes=routes + list(extra_routes or []), middleware=[Middleware(EncodedSlashes)],
                     exception_handlers={404: http_error, 405: http_error})
