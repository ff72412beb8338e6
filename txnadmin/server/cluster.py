"""Serving an engine of several brokers (``engineBrokers`` > 1): one listener per broker, all in this process.

Each broker of the engine's :class:`~txnadmin.engine.cluster.Cluster` gets its own uvicorn server on its own
127.0.0.1 port, over a :class:`BrokerAdmin`: the engine's admin as that broker answers it (its runtime
configuration, version, ``/metrics``, the active brokers), redirecting (307) a call about a topic or coordinator
another broker owns, as Pulsar's ``validateTopicOwnership`` does. ``server.json`` names every broker; its ``url`` is
the first running one, which is where ``-u local:DIR`` goes in.

Lifecycle: ``POST /txnadmin/brokers/{broker}/{stop|start|restart}[?version=V]`` (with the server's token) stops a
broker's listener (its address refuses connections), starts it again as a new process (new start time, counters from
zero, the claimed version if given) or both. The change runs after the reply, so a broker may be asked to stop
itself; :func:`broker_lifecycle` is the client, which waits until the change shows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Optional

from .._fs import atomic_write_text
from ..admin.endpoints import Endpoint
from ..admin.local import LocalAdmin
from ..admin.protocol import AdminError, NotFoundError
from ..names import coordinator_assign_partition, normalize_topic
from .run import SERVER_FILE, forget_server, free_port

log = logging.getLogger(__name__)
ACTIONS = ("stop", "start", "restart")
VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?")  # what `--version` may claim
CONTROL_PATH = "/txnadmin/brokers/{broker}/{action}"
# The calls whose coordinator is named by an argument: Pulsar validates ownership of its assign partition.
_COORDINATOR_ARG = {"coordinator_internal_stats": "coordinator_id", "coordinator_stats": "coordinator_id",
                    "slow_transactions": "coordinator_id"}
_TXN_COORDINATOR = ("transaction_metadata", "abort_transaction")


def brokers_of(directory: Path) -> int:
    """How many brokers the engine in ``directory`` plays (engine.conf's ``engineBrokers``)."""
    from ..engine.config import EngineConfig

    return EngineConfig.load(directory).engineBrokers


def served_cluster(directory: Path, first_port: int = 0) -> Any:
    """The Cluster to open the engine in ``directory`` with (its ``host_of``), or None for a one-broker engine.
    The first broker listens on ``first_port`` (0: any free port), the others on free ports."""
    from ..engine.cluster import Cluster

    count = brokers_of(directory)
    if count <= 1:
        return None
    ports: list[int] = []
    while len(ports) < count:
        port = first_port if not ports and first_port else free_port()
        if port not in ports:
            ports.append(port)
    return Cluster(directory, ports)


class BrokerAdmin(LocalAdmin):
    """The engine's admin as one broker of its cluster answers it."""

    def __init__(self, engine: Any, cluster: Any, broker: Any):
        super().__init__(engine)
        self.cluster = cluster
        self.broker = broker

    def runtime_config(self) -> dict[str, str]:
        return self.broker.config.to_text()

    def broker_versions(self) -> dict[str, str]:
        return {self.broker.id: self.broker.version}

    def list_coordinators(self) -> list[dict]:
        """Each coordinator with its owner, as Pulsar lists them from a lookup of every assign partition (the owner
        named as the lookup endpoint names it)."""
        listed = super().list_coordinators()
        return [{**c, "brokerServiceUrl": f"pulsar://{self.cluster.owner_of_coordinator(c['id']).id}"} for c in listed]

    def active_brokers(self, cluster: str) -> list[str]:
        if cluster != self.cluster.name:
            raise NotFoundError("Cluster does not exist")
        return [b.id for b in self.cluster.active()]

    def _running(self, broker_id: str) -> Any:
        from ..engine.cluster import UnknownBroker

        try:
            broker = self.cluster.broker(broker_id)
        except UnknownBroker as exc:
            raise NotFoundError(str(exc)) from None
        if not broker.running:
            raise AdminError(f"Broker {broker_id} is not running", 503)
        return broker

    def broker_runtime_config(self, broker: str) -> dict[str, str]:
        return self._running(broker).config.to_text()

    def broker_metrics_text(self, broker: str) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self._running(broker).registry).decode()

    def broker_version(self, broker: str) -> str:
        return self._running(broker).version

    def metrics_text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.broker.registry).decode()


def owned_name(row: Endpoint, args: list) -> Optional[str]:
    """The topic (or a coordinator's assign partition) whose owner must answer this call; None for calls any
    broker answers (listings, configuration, the fan-out over every coordinator)."""
    if "topic" in row.args:
        try:
            return normalize_topic(args[row.args.index("topic")])
        except ValueError:
            return None  # the call itself answers 412 for a name that does not parse
    if row.call in _COORDINATOR_ARG:
        tc_id = args[row.args.index(_COORDINATOR_ARG[row.call])]
        return None if tc_id is None else coordinator_assign_partition(tc_id)
    if row.call in _TXN_COORDINATOR:
        return coordinator_assign_partition(args[row.args.index("txn")].most_bits)
    return None


class ClusterServer:
    """The listeners of every broker of ``cluster`` over ``engine`` (see the module docstring)."""

    def __init__(self, engine: Any, cluster: Any, token: Optional[str], record: bool = True):
        self.engine = engine
        self.cluster = cluster
        self.token = token
        self._record_file = record
        self._listeners: dict[str, tuple[Any, concurrent.futures.Future]] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._lock = threading.RLock()
        self._closed = False

    @property
    def url(self) -> str:
        running = self.cluster.active()
        return (running[0] if running else self.cluster.brokers[0]).url

    def start(self) -> "ClusterServer":
        self._record()  # before the first broker listens, as serve_forever does: whoever connects finds the token
        for broker in self.cluster.brokers:
            self._listen(broker)
        return self

    def _app(self, broker: Any) -> Any:
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route

        from ..engine.broker_metrics import metrics_exposition
        from .app import authorized, create_app

        def _error(reason: str, status: int) -> Response:
            return JSONResponse({"reason": reason}, status_code=status)

        cluster = self.cluster

        def metrics(request):
            from prometheus_client import CONTENT_TYPE_LATEST

            return Response(metrics_exposition(self.engine, broker.registry), media_type=CONTENT_TYPE_LATEST)

        def lookup(request):
            if not authorized(request, self.token):
                return _error("Unauthorized", 401)
            p = request.path_params
            try:
                topic = normalize_topic(f"{p['domain']}://{p['tenant']}/{p['namespace']}/{p['topic']}")
            except ValueError as exc:
                return _error(str(exc), 412)
            owner = cluster.owner(topic)
            # The engine speaks no binary protocol: brokerUrl names the owner by its id.
            return JSONResponse({"brokerUrl": f"pulsar://{owner.id}", "brokerUrlTls": None, "httpUrl": owner.url,
                                 "httpUrlTls": None, "nativeUrl": f"pulsar://{owner.id}"})

        def owned_namespaces(request):
            """The bundles this broker owns (BrokersBase.getOwnedNamespaces); asked of another broker, a 307 to it,
            same path and query (validateBrokerName), whether or not it is ours."""
            if not authorized(request, self.token):
                return _error("Unauthorized", 401)
            p = request.path_params
            if p["cluster"] != cluster.name:
                return _error("Cluster does not exist", 404)
            named = p["broker"]
            if named != broker.id:
                host, sep, port = named.rpartition(":")
                if not sep or not host or not port.isdigit():
                    return _error(f"Invalid broker url {named[:80]}", 500)  # Pulsar's checkArgument, unhandled
                raw = (request.scope.get("raw_path") or request.url.path.encode()).decode("latin-1")
                query = f"?{request.url.query}" if request.url.query else ""
                return Response(status_code=307, headers={"Location": f"http://{named}{raw}{query}"})
            status = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
            return JSONResponse({bundle: status for bundle in cluster.bundles_of(broker)})

        def control(request):
            if not authorized(request, self.token):
                return _error("Unauthorized", 401)
            action = request.path_params["action"]
            if action not in ACTIONS:
                return _error(f"unknown action {action!r} (use {', '.join(ACTIONS)})", 404)
            try:
                target = cluster.broker(request.path_params["broker"])
            except LookupError as exc:
                return _error(str(exc), 404)
            if action == "stop" and target.running and cluster.active() == [target]:
                return _error(f"broker {target.id} is the last one running: with it stopped nothing could start a "
                              "broker again; stop the engine instead", 409)
            version = request.query_params.get("version") or None
            if version is not None and not VERSION.fullmatch(version):
                return _error(f"version {version[:40]!r}: expected a Pulsar version such as 4.0.13", 400)
            threading.Thread(target=self.lifecycle, args=(target.id, action, version), daemon=True).start()
            return JSONResponse({"broker": target.id, "action": action}, status_code=202)

        def owner_of(row: Endpoint, args: list) -> Optional[tuple[str, bool]]:
            name = owned_name(row, args)
            if name is None:
                return None
            owner = cluster.owner(name)
            if owner is broker:
                return None
            running = cluster.active()
            return owner.url, bool(running) and running[0] is broker  # the first running broker leads

        routes = [Route("/metrics", metrics), Route("/metrics/get", metrics),
                  Route("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", lookup),
                  Route("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", owned_namespaces),
                  Route(CONTROL_PATH, control, methods=["POST"])]
        return create_app(BrokerAdmin(self.engine, cluster, broker), self.token, routes, owner_of=owner_of)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The one event loop every broker's listener runs on. One loop, not a thread per broker: the brokers share
        one interpreter and its lock anyway, and a loop per thread had three threads contend for it (measured in
        bench/downgrade_status.py --brokers 1,3; numbers in docs/benchmarks.md)."""
        if self._loop is None:
            try:
                import uvloop  # what uvicorn itself picks when it is there

                loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            except ImportError:
                loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="txnadmin-brokers", daemon=True).start()
            self._loop = loop
        return self._loop

    def _listen(self, broker: Any) -> None:
        import uvicorn

        server = uvicorn.Server(uvicorn.Config(self._app(broker), host="127.0.0.1", port=broker.port,
                                               log_level="error", access_log=False, lifespan="off"))
        serving = asyncio.run_coroutine_threadsafe(server.serve(), self._event_loop())
        deadline = time.monotonic() + 10
        while not server.started and not serving.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not server.started:
            serving.cancel()
            raise OSError(f"broker {broker.id} could not listen on port {broker.port}")
        self._listeners[broker.id] = (server, serving)

    def _silence(self, broker: Any) -> None:
        held = self._listeners.pop(broker.id, None)
        if held is not None:
            server, serving = held
            server.should_exit = True
            try:
                serving.result(timeout=10)
            except Exception:  # its address must stop answering all the same: say why it did not end cleanly
                log.exception("broker %s: its listener did not stop cleanly", broker.id)

    def lifecycle(self, broker_id: str, action: str, version: Optional[str] = None) -> None:
        """Stop, start or restart one broker (its listener and its process state), then record server.json."""
        with self._lock:
            if self._closed:
                return
            try:
                broker = self.cluster.broker(broker_id)
                if action in ("stop", "restart") and broker.running:
                    self.cluster.stop_broker(broker_id)
                    self._silence(broker)
                if action in ("start", "restart") and not broker.running:
                    self.cluster.start_broker(broker_id, version)
                    self._listen(broker)
            except Exception:  # the verb's client sees the state not change, and says so
                log.exception("broker %s: %s failed", broker_id, action)
            self._record()

    def _record(self) -> None:
        if not self._record_file:
            return
        brokers = [{"id": b.id, "url": b.url, "running": b.running, "version": b.version,
                    "processStartTime": b.started_at} for b in self.cluster.brokers]
        info = {"url": self.url, "token": self.token, "pid": os.getpid(), "brokers": brokers}
        atomic_write_text(self.cluster.directory / SERVER_FILE, json.dumps(info), mode=0o600)

    def stop(self) -> None:
        with self._lock:  # after a lifecycle change in progress; none starts (nor writes server.json) after this
            self._closed = True
            if self._record_file:
                forget_server(self.cluster.directory)
            for broker in self.cluster.brokers:
                self._silence(broker)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
        self.cluster.close()


class LifecycleError(Exception):
    """A broker verb that cannot be done; ``exit_code`` as the CLI should end (3: nothing to reach, 1: failed)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def _server_info(directory: Path) -> dict:
    try:
        info = json.loads((directory / SERVER_FILE).read_text())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        raise LifecycleError(f"{directory}: the engine is not running (no live server.json): start it with "
                             "`txnadmin engine run` or `txnadmin serve`", 3) from None
    if not isinstance(info.get("brokers"), list):
        raise LifecycleError(f"{directory}: this engine plays one broker; a broker of it cannot be stopped on its "
                             "own (create one with `txnadmin engine init DIR --brokers N`)", 3)
    return info


def _accepts(broker_id: str) -> bool:
    import socket

    host, _, port = broker_id.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
        return True
    except OSError:
        return False


def broker_lifecycle(directory: Path, broker_id: str, action: str, version: Optional[str] = None,
                     timeout_s: float = 30.0) -> dict:
    """Stop, start or restart ``broker_id`` of the engine served from ``directory``; returns the broker as
    server.json then names it, once the change shows (a stopped address refuses, a started one accepts with a new
    process start time). LifecycleError otherwise."""
    import urllib.error
    import urllib.request
    from urllib.parse import quote

    if version is not None and not VERSION.fullmatch(version):
        raise LifecycleError(f"--version {version!r}: expected a Pulsar version such as 4.0.13", 2)
    info = _server_info(directory)
    brokers = {b["id"]: b for b in info["brokers"]}
    if broker_id not in brokers:
        raise LifecycleError(f"{directory}: no broker {broker_id} (its brokers: {', '.join(brokers)})", 3)
    before = brokers[broker_id]
    running = [b for b in info["brokers"] if b["running"]]
    if action == "stop" and before["running"] and len(running) == 1:
        raise LifecycleError(f"broker {broker_id} is the last one running: with it stopped nothing could start a "
                             "broker again; stop the engine instead", 1)
    via = next((b for b in running if b["id"] != broker_id), None) or next(iter(running), None)
    if via is None:
        raise LifecycleError(f"{directory}: no broker is running to take the request", 3)
    url = f"{via['url']}{CONTROL_PATH.format(broker=quote(broker_id, safe=''), action=action)}"
    if version:
        url += f"?version={quote(version, safe='')}"
    request = urllib.request.Request(url, method="POST", data=b"",
                                     headers={"Authorization": f"Bearer {info.get('token')}"})
    try:
        with urllib.request.urlopen(request, timeout=10):
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise LifecycleError(f"{via['id']}: the {action} request for broker {broker_id} failed ({exc})", 1) from None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = {b["id"]: b for b in _server_info(directory)["brokers"]}[broker_id]
        if action == "stop" and not now["running"] and not _accepts(broker_id):
            return now
        restarted = action == "start" or now["processStartTime"] != before["processStartTime"]
        if action != "stop" and now["running"] and restarted and _accepts(broker_id):
            return now
        time.sleep(0.05)
    raise LifecycleError(f"broker {broker_id}: the {action} did not show within {timeout_s:g} s", 1)


def start_server(engine: Any, cluster: Any, token: Optional[str]) -> Any:
    """The server beside a workload (`engine run`): every broker of ``cluster``, or the one broker when it is None.
    Either has ``stop()`` and ``url``."""
    from .run import BackgroundServer

    if cluster is None:
        return BackgroundServer(engine, token=token).start()
    cluster.attach(engine)
    return ClusterServer(engine, cluster, token).start()


def open_served_cluster(engine_dir: Path) -> "ClusterServer":
    """An engine of several brokers opened and served in this process, as `engine run` serves it (server.json
    written; ``stop()`` then ``engine.close()`` ends it): what `rehearse --brokers N` runs its cluster on."""
    import secrets

    from ..admin.local import open_engine

    cluster = served_cluster(engine_dir)
    if cluster is None:
        raise ValueError(f"{engine_dir}: this engine plays one broker (engineBrokers=1)")
    engine = open_engine(engine_dir, host_of=cluster.host_of)
    try:
        return start_server(engine, cluster, secrets.token_urlsafe(24))
    except BaseException:
        engine.close()
        raise


def serve_engine(engine_dir: Path, host: str, port: int, token: Optional[str], on_ready=None) -> None:
    """`txnadmin serve`: a one-broker engine as :func:`~txnadmin.server.run.serve_forever` serves it; an engine of
    several brokers with a listener per broker (the first on ``port``) until SIGINT/SIGTERM. ValueError for a
    non-loopback ``host`` with several brokers (each broker's id is its 127.0.0.1 address)."""
    import secrets
    import signal

    from ..admin.local import open_engine
    from .run import serve_forever

    cluster = served_cluster(engine_dir, port)
    if cluster is None:
        serve_forever(engine_dir, host, port, token, on_ready=on_ready)
        return
    if host != "127.0.0.1":
        raise ValueError(f"--host {host}: an engine of several brokers serves each on its own 127.0.0.1 address")
    engine = open_engine(engine_dir, host_of=cluster.host_of)
    server = None
    stop = threading.Event()
    try:
        cluster.attach(engine)
        server = ClusterServer(engine, cluster, token or secrets.token_urlsafe(24)).start()
        if on_ready:
            on_ready(f"{server.url} (brokers: {', '.join(b.id for b in cluster.brokers)})")
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        while not stop.wait(0.5):
            pass
    finally:
        if server is not None:
            server.stop()
        else:
            cluster.close()
        engine.close()


class RollingRestart:
    """``engine run --fault rolling-restart=SECONDS``: every ``period_s`` seconds the next broker of ``server`` is
    restarted (stopped, then started as a new process), in turn; ``say`` gets one line per restart."""

    def __init__(self, server: ClusterServer, period_s: float, say):
        self.server = server
        self.period_s = period_s
        self.say = say
        self.restarts = 0
        self._next = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-rolling-restart", daemon=True)

    def start(self) -> "RollingRestart":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        brokers = self.server.cluster.brokers
        while not self._stop.wait(self.period_s):
            broker = brokers[self._next % len(brokers)]
            self._next += 1
            before = broker.started_at
            self.server.lifecycle(broker.id, "restart")
            if broker.running and broker.started_at != before:
                self.restarts += 1
                self.say(f"rolling-restart: restarted broker {broker.id}")
            else:
                self.say(f"rolling-restart: restarting broker {broker.id} failed; the rotation goes on")
