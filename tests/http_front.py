"""A broker's front door for CLI tests: a loopback HTTP proxy to a real engine server (`txnadmin serve` or
`engine run`) that forwards every request with the server's token, and lets a test change what a real cluster
would vary: the list of active brokers (several broker processes behind one admin URL), a slow unload, a
topic whose broker has not loaded it (404 on its stats while it is listed)."""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

import httpx

# (method, path) → None to forward, or (status, JSON body) to answer instead; (status, body, content type) for
# another body than JSON (Pulsar's plain-text 500s)
Intercept = Callable[[str, str], Optional[tuple]]


class Front:
    def __init__(self, backend: str, token: str):
        self.backend = backend.rstrip("/")
        self.token = token
        self.intercepts: list[Intercept] = []
        self.before_forward: list[Callable[[str, str], None]] = []
        self.after_forward: list[Callable[[str, str], None]] = []  # once the backend answered, before the reply
        # (method, path, body) → the body to send instead (a stripped metric, a frozen copy)
        self.rewrites: list[Callable[[str, str, bytes], bytes]] = []
        self.seen: list[tuple[str, str]] = []
        self.url = ""

    @property
    def netloc(self) -> str:
        return self.url.split("://", 1)[1]


@contextmanager
def front(backend: str, token: str):
    """Yields a :class:`Front` listening on 127.0.0.1 (its ``url``)."""
    state = Front(backend, token)
    client = httpx.Client(timeout=60, follow_redirects=True)

    class Handler(BaseHTTPRequestHandler):
        def _handle(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            method, path = self.command, self.path
            state.seen.append((method, path))
            for intercept in state.intercepts:
                answer = intercept(method, path)
                if answer is not None:
                    status, payload, *kind = answer
                    return self._reply(status, payload.encode(), kind[0] if kind else "application/json")
            for hook in state.before_forward:
                hook(method, path)
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "authorization", "content-length", "connection")}
            headers["Authorization"] = f"Bearer {state.token}"
            target = state.backend + (path.rstrip("/") if path.split("?")[0] == "/metrics/" else path)
            response = client.request(method, target, content=body, headers=headers)
            for after in state.after_forward:
                after(method, path)
            payload = response.content
            for rewrite in state.rewrites:
                payload = rewrite(method, path, payload)
            self._reply(response.status_code, payload, response.headers.get("content-type", ""))

        def _reply(self, status: int, payload: bytes, content_type: str):
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_POST = do_DELETE = _handle

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        client.close()


def brokers_are(front_state: Front, *brokers: str) -> Intercept:
    """`GET /admin/v2/brokers/{cluster}` lists these brokers (host:port each, as Pulsar does)."""
    import json

    def intercept(method: str, path: str):
        if method == "GET" and re.fullmatch(r"/admin/v2/brokers/[^/?]+/?", path.split("?")[0]) and \
                not path.startswith(("/admin/v2/brokers/configuration", "/admin/v2/brokers/internal-configuration",
                                     "/admin/v2/brokers/version")):
            return 200, json.dumps(list(brokers))
        return None

    return intercept
