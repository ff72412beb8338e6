"""Running the REST server: in the foreground (`txnadmin serve`) or beside a workload (`engine run`).

While a server holds an engine directory it records ``{"url", "token", "pid"}`` in
``<dir>/server.json`` (mode 600, written atomically, removed on exit), so `local:PATH` commands in
other shells reach the live engine through it instead of failing on the writer lock.
"""

from __future__ import annotations

import gc
import json
import os
import secrets
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Optional

from .._fs import atomic_write_text

SERVER_FILE = "server.json"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def wait_until_listening(port: int, proc, timeout_s: float = 600.0, host: str = "127.0.0.1") -> float:
    """Block until a `txnadmin serve` child (``proc``, a Popen with stderr piped) accepts connections on ``port``;
    returns the seconds it took. Raises RuntimeError with the child's stderr if it exits first, or on timeout."""
    import time

    started = time.monotonic()
    while True:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return time.monotonic() - started
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode(errors="replace")) from None
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"serve did not listen on {host}:{port} within {timeout_s:g} s") from None
            time.sleep(0.05)


def _metrics_routes(engine) -> list:
    """``/metrics`` and ``/metrics/get`` (both paths a broker's metrics servlet answers), unauthenticated as on a
    broker with the default ``authenticateMetricsEndpoint=false``."""
    from prometheus_client import CONTENT_TYPE_LATEST
    from starlette.responses import Response
    from starlette.routing import Route

    from ..engine.broker_metrics import metrics_exposition

    def handler(request):
        return Response(metrics_exposition(engine), media_type=CONTENT_TYPE_LATEST)

    return [Route("/metrics", handler), Route("/metrics/get", handler)]


def _record(directory: Path, url: str, token: Optional[str]) -> Path:
    path = directory / SERVER_FILE
    atomic_write_text(path, json.dumps({"url": url, "token": token, "pid": os.getpid()}), mode=0o600)
    return path


def forget_server(directory: Path) -> None:
    try:
        info = json.loads((directory / SERVER_FILE).read_text())
        if info.get("pid") == os.getpid():
            (directory / SERVER_FILE).unlink()
    except (OSError, json.JSONDecodeError):
        pass


class BackgroundServer:
    """uvicorn in a thread over an engine; ``stop()`` shuts it down and removes server.json."""

    def __init__(self, engine, host: str = "127.0.0.1", port: int = 0, token: Optional[str] = None,
                 record: bool = True):
        import uvicorn

        from ..admin.local import LocalAdmin
        from .app import create_app

        self.engine = engine
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.token = token
        app = create_app(LocalAdmin(engine), token, _metrics_routes(engine))
        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=self.port, log_level="error",
                                                     access_log=False, lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, name="txnadmin-serve", daemon=True)
        self._record = record

    def start(self) -> "BackgroundServer":
        self._thread.start()
        for _ in range(200):
            if self._server.started:
                break
            threading.Event().wait(0.025)
        if self._record:
            _record(self.engine.directory, self.url, self.token)
        return self

    def stop(self) -> None:
        if self._record:
            forget_server(self.engine.directory)
        self._server.should_exit = True
        self._thread.join(timeout=10)


def serve_forever(engine_dir: Path, host: str, port: int, token: Optional[str], on_ready=None) -> None:
    """Open the engine, serve until SIGINT/SIGTERM, then close everything."""
    import uvicorn

    from ..admin.local import LocalAdmin
    from .app import create_app

    admin = LocalAdmin(engine_dir)
    engine = admin.engine
    # The opened engine (tens of thousands of objects with 10,000 topics) lives as long as the server: move it
    # out of the collector's reach so full collections stop re-walking it between requests.
    gc.collect()
    gc.freeze()
    port = port or free_port(host)
    url = f"http://{host}:{port}"
    # Other local shells get the token through server.json (mode 600).
    local_token = token or secrets.token_urlsafe(24)
    app = create_app(admin, local_token, _metrics_routes(engine))
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="error", access_log=False,
                                           lifespan="off"))
    _record(engine.directory, url, local_token)
    if on_ready:
        on_ready(url)
    # uvicorn re-raises SIGTERM after its graceful shutdown; turn it into an exit that runs the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.run()
    finally:
        forget_server(engine.directory)
        admin.close()
