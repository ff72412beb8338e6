"""`txnadmin serve`: any TransactionsAdmin (normally the embedded engine) over Pulsar's admin REST paths."""

from __future__ import annotations

import hmac
import json
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
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AdminError(f"{name} must be a number, got {value!r}", 400) from None


def create_app(admin: TransactionsAdmin, token: Optional[str] = None,
               extra_routes: Optional[list[Route]] = None) -> Starlette:
    def endpoint(fn: Callable[[Request, dict], Any], status: int = 200):
        # Async on purpose: every admin call is short and CPU-bound, and a thread hop per request costs
        # more than the call (measured in bench/downgrade_status.py).
        async def handler(request: Request) -> Response:
            if token is not None:
                given = request.headers.get("authorization", "")
                if not hmac.compare_digest(given, f"Bearer {token}"):
                    return JSONResponse({"reason": "Unauthorized"}, status_code=401)
            try:
                params = {k: v.replace(_SLASH, "/") if isinstance(v, str) else v
                          for k, v in request.path_params.items()}
                result = fn(request, params)
            except AdminError as exc:
                return JSONResponse({"reason": exc.reason}, status_code=exc.status or 500)
            if result is None:
                return Response(status_code=204)
            if isinstance(result, Response):
                return result
            return JSONResponse(result, status_code=status)
        return handler

    async def read_body(request: Request) -> Any:
        raw = await request.body()
        return json.loads(raw) if raw else None

    def scale(request: Request, p: dict):
        body = request.state.body
        admin.scale_coordinators(_int(body, "replicas"))

    async def scale_handler(request: Request) -> Response:
        try:
            request.state.body = await read_body(request)
        except json.JSONDecodeError:
            return JSONResponse({"reason": "body must be a JSON number"}, status_code=400)
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
    ]
    return Starlette(routes=routes + list(extra_routes or []), middleware=[Middleware(EncodedSlashes)])
