"""The brokers of a served engine and the bundles each owns.

What each broker has of its own, as a Pulsar broker does:

- an address, ``127.0.0.1:PORT`` (its web service), which is its id in the active brokers list;
- a runtime configuration: engine.conf, plus the dynamic overrides as its own watch last delivered them. A change to
  dynamic-config.json reaches each broker ``engineBrokerWatchDelaysMillis`` after the cluster first saw it, as a
  ZooKeeper watch fires on each broker at its own moment;
- a Prometheus registry: ``process_start_time_seconds`` (when it last started; left out for the brokers
  ``engineBrokersWithoutProcessStart`` names, though the broker still keeps its start time) and the batched writers'
  counters of the stores it opened, labelled with its id; a restart starts them again from zero;
- a claimed version (``engineBrokerVersion``, or what ``start --version`` gave it).

Ownership: each namespace bundle (bundles.py) gets one owner, the running broker owning the fewest bundles, when a
component of it is first opened or looked up (Pulsar's load manager places an unowned bundle on the least loaded
broker). A stopped broker keeps its bundles until ``engineBrokerFailoverDelayMillis`` has passed (its session
expiring); then the survivors take them over and every coordinator and loaded topic in them reopens on its new owner,
reading that broker's flags, as a bundle move does.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ...names import (
    coordinator_assign_partition, coordinator_of_assign_partition, normalize_topic, reads_batched_entries,
)
from ..broker_metrics import ProcessCpu, ScrapeTimeGauges
from ..config import EngineConfig, brokers_without_process_start, read_dynamic, watch_delays_ms
from ..pending_ack_metrics import PendingAckMetrics
from ..tb_client_metrics import TransactionBufferClientMetrics
from ..writer_metrics import broker_writer_metrics
from .bundles import bundle_of

log = logging.getLogger(__name__)
WATCH_PERIOD_S = 0.05  # how often the cluster's thread runs the brokers' watches and the failovers


class UnknownBroker(LookupError):
    """No broker of this engine has that id."""


class Broker:
    """One broker of the cluster (see the module docstring). ``config``, ``tc_metrics`` and ``ack_metrics`` are what
    a component opening on it reads (Engine.host_of)."""

    def __init__(self, index: int, port: int, version: str, watch_delay_ms: int, static: EngineConfig,
                 dynamic: dict[str, str], exports_process_start: bool = True):
        self.index = index
        self.exports_process_start = exports_process_start
        self.port = port
        self.id = f"127.0.0.1:{port}"
        self.url = f"http://{self.id}"
        self.version = version
        self.watch_delay_s = watch_delay_ms / 1000
        self._static = static
        self.config = dataclasses.replace(static)
        self.config.apply_dynamic(dynamic)  # a starting broker reads the whole configuration, no watch involved
        self._applied = dict(dynamic)
        self._changed_at: Optional[float] = None  # when the cluster first saw values this broker has not applied
        # Running from the start: the engine opens (and places its components) before the listeners come up.
        self.running = True
        self.generation = 1  # one more at each restart: what it owned under an older one goes at the failover
        self.left_at: dict[int, float] = {}  # generation -> when that process stopped
        self._started = False
        self._new_process()

    def _new_process(self) -> None:
        """A new start time and a fresh registry whose counters start from zero."""
        from prometheus_client import CollectorRegistry, Gauge

        self.started_at = time.time()  # kept either way: server.json and the lifecycle verbs tell a restart by it
        self.registry = CollectorRegistry()
        if self.exports_process_start:
            Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                  registry=self.registry).set(self.started_at)
        self.registry.register(ProcessCpu())
        self.tc_metrics, self.ack_metrics = broker_writer_metrics(self.registry, self.id,
                                                                  reads_batched_entries(self.version))
        self.tb_client_metrics = TransactionBufferClientMetrics(self.registry)  # as a coordinator's broker sends ends
        self.tp_metrics = PendingAckMetrics(self.registry)  # the ends its pending-ack stores took

    def start(self, gauges: Callable[["Broker"], Any], version: Optional[str] = None) -> None:
        """Start: the first time (as the engine opens) over the registry made with the broker, which the components
        opened meanwhile already count in; a restart as a new process. ``gauges`` makes its scrape-time gauges."""
        if version is not None:
            self.version = version
        if self._started:
            self._new_process()
            self.generation += 1
        self.registry.register(gauges(self))
        self._started = True
        self.running = True

    def stop(self, now: float) -> None:
        self.running = False
        self.left_at[self.generation] = now

    def watch(self, values: dict[str, str], now: float) -> bool:
        """Deliver the dynamic configuration ``values`` once this broker's watch delay has passed since the change was
        first seen; True when it applied something."""
        if values == self._applied:
            self._changed_at = None
            return False
        if self._changed_at is None:
            self._changed_at = now
        if now - self._changed_at < self.watch_delay_s:
            return False
        for key in EngineConfig.DYNAMIC_KEYS:  # a deleted override falls back to engine.conf
            setattr(self.config, key, getattr(self._static, key))
        self.config.apply_dynamic(values)
        self._applied = dict(values)
        self._changed_at = None
        return True


class Cluster:
    """The brokers of one engine directory, on ``ports`` (one each, in order), and who owns which bundle.

    Made before the engine opens (pass :meth:`host_of` to it), then :meth:`attach` to the opened engine, which
    starts the brokers and the thread that runs their watches and failovers."""

    def __init__(self, directory: Path, ports: list[int], clock: Callable[[], float] = time.monotonic):
        self.directory = Path(directory)
        config = EngineConfig.load(self.directory)
        static = EngineConfig.load(self.directory, dynamic=False)
        dynamic = read_dynamic(self.directory)
        delays = watch_delays_ms(config.engineBrokerWatchDelaysMillis, len(ports))
        hidden = brokers_without_process_start(config.engineBrokersWithoutProcessStart, len(ports))
        self.name = config.clusterName
        self.failover_delay_s = config.engineBrokerFailoverDelayMillis / 1000
        self.brokers = [Broker(i, port, config.engineBrokerVersion, delays[i], static, dynamic, i not in hidden)
                        for i, port in enumerate(ports)]
        self.clock = clock
        self._owners: dict[str, tuple[Broker, int]] = {}  # bundle -> (owner, the owner's generation then)
        self._lock = threading.RLock()
        self.engine: Any = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- brokers ------------------------------------------------------------------------------
    def attach(self, engine: Any) -> "Cluster":
        """Start every broker over the opened ``engine`` and the watch/failover thread."""
        self.engine = engine
        for broker in self.brokers:
            broker.start(self._gauges)
        self._thread = threading.Thread(target=self._run, name="engine-brokers", daemon=True)
        self._thread.start()
        return self

    def _gauges(self, broker: Broker) -> ScrapeTimeGauges:
        return ScrapeTimeGauges(self.engine, owns=lambda name: self.owner(name) is broker)

    def broker(self, broker_id: str) -> Broker:
        for broker in self.brokers:
            if broker.id == broker_id:
                return broker
        raise UnknownBroker(f"no broker {broker_id} in this engine (its brokers: "
                            f"{', '.join(b.id for b in self.brokers)})")

    def active(self) -> list[Broker]:
        """The running brokers, in order: what the active brokers list shows."""
        return [b for b in self.brokers if b.running]

    def stop_broker(self, broker_id: str) -> Broker:
        """Mark a broker stopped (its server is stopped by the caller); its bundles move after the failover delay."""
        broker = self.broker(broker_id)
        with self._lock:
            if broker.running:
                broker.stop(self.clock())
        return broker

    def start_broker(self, broker_id: str, version: Optional[str] = None) -> Broker:
        """Start a stopped broker as a new process (new start time, counters from zero), claiming ``version`` if
        given. It owns nothing it had before: what it held moves to the others at the failover."""
        broker = self.broker(broker_id)
        with self._lock:
            if not broker.running:
                broker.start(self._gauges, version)
                broker.watch(read_dynamic(self.directory), float("inf"))  # a start reads the configuration whole
        return broker

    # -- ownership ----------------------------------------------------------------------------
    @staticmethod
    def bundle(name: str) -> str:
        """The bundle of a topic, or of a coordinator's transaction_coordinator_assign partition."""
        return bundle_of(name)

    def owner(self, name: str) -> Broker:
        """The owner of ``name``'s bundle, given to the least loaded running broker if it has none (a lookup)."""
        bundle = bundle_of(name)
        with self._lock:
            held = self._owners.get(bundle)
            if held is not None:
                return held[0]
            broker = self._least_loaded(exclude=None) or self.brokers[0]
            self._owners[bundle] = (broker, broker.generation)
            return broker

    host_of = owner  # what the engine calls when a component opens: the broker whose flags and counters it takes

    def owner_of_coordinator(self, tc_id: int) -> Broker:
        return self.owner(coordinator_assign_partition(tc_id))

    def bundles_of(self, broker: Broker) -> list[str]:
        with self._lock:
            return sorted(b for b, (owner, _) in self._owners.items() if owner is broker)

    def _least_loaded(self, exclude: Optional[Broker]) -> Optional[Broker]:
        running = [b for b in self.brokers if b.running and b is not exclude]
        if not running:
            return None
        load = {b.id: 0 for b in running}
        for owner, _ in self._owners.values():
            if owner.id in load:
                load[owner.id] += 1
        return min(running, key=lambda b: (load[b.id], b.index))

    # -- the watch/failover thread ------------------------------------------------------------
    def tick(self, now: Optional[float] = None) -> list[str]:
        """Run every running broker's watch, then the failovers that are due; returns the bundles that moved."""
        now = self.clock() if now is None else now
        values = read_dynamic(self.directory)
        moved: list[str] = []
        with self._lock:
            for broker in self.brokers:
                if broker.running:
                    broker.watch(values, now)
            for bundle, (owner, generation) in sorted(self._owners.items()):
                left = owner.left_at.get(generation)
                if left is not None and now - left >= self.failover_delay_s:
                    heir = self._least_loaded(exclude=owner)
                    if heir is not None:
                        self._owners[bundle] = (heir, heir.generation)
                        moved.append(bundle)
        if moved:
            self._reopen(set(moved))  # outside the lock: a reopen asks host_of under the engine's lock
        return moved

    def move(self, name: str, spared: Callable[[str], bool] = lambda name: False, to: Optional[str] = None) -> str:
        """Shed the bundle of ``name`` (a topic, or a coordinator's assign partition) to the least loaded other
        running broker (or to the running broker ``to``, as `pulsar-admin namespaces unload --destinationBroker`
        does) and reopen what it holds there, as a load manager's bundle shedding does; what ``spared`` names stays
        open as it is. Returns what happened, in words; LookupError when no other broker runs."""
        bundle = bundle_of(name)
        with self._lock:
            owner = self.owner(name)
            heir = self._least_loaded(exclude=owner) if to is None else self.broker(to)
            if heir is not None and not heir.running:
                raise LookupError(f"broker {heir.id} is not running: bundle {bundle} cannot move to it")
            if heir is None:
                raise LookupError(f"no running broker besides {owner.id} to move bundle {bundle} to")
            self._owners[bundle] = (heir, heir.generation)
        coordinators, topics = self._reopen({bundle}, spared)
        return (f"bundle {bundle} moved from {owner.id} to {heir.id}: {coordinators} coordinator"
                f"{'' if coordinators == 1 else 's'} and {topics} topic{'' if topics == 1 else 's'} reopened")

    def _reopen(self, bundles: set[str], spared: Callable[[str], bool] = lambda name: False) -> tuple[int, int]:
        """Every coordinator and loaded topic of the moved bundles reopens on its new owner (new recoverStartTime,
        the new owner's flags and counters); how many coordinators and topics did."""
        engine = self.engine
        if engine is None:
            return 0, 0
        coordinators = topics = 0
        for tc_id in engine.coordinator_ids():
            partition = coordinator_assign_partition(tc_id)
            if bundle_of(partition) in bundles and not spared(partition):
                coordinators += self._attempt(f"coordinator {tc_id}", engine.reload_coordinator, tc_id)
        for topic in sorted(engine.topics):
            if coordinator_of_assign_partition(topic) is None and bundle_of(normalize_topic(topic)) in bundles \
                    and not spared(topic):
                topics += self._attempt(topic, engine.reload_topic, topic)
        return coordinators, topics

    @staticmethod
    def _attempt(what: str, reopen: Callable[[Any], Any], arg: Any) -> bool:
        try:
            reopen(arg)
        except Exception:  # one component failing to reopen must not keep the others on the old owner
            log.exception("moving %s to its new owner failed", what)
            return False
        return True

    def _run(self) -> None:
        failing: Optional[str] = None  # the failure being repeated, logged once (the thread ticks 20 times a second)
        while not self._stop.wait(WATCH_PERIOD_S):
            try:
                self.tick()
            except Exception as exc:  # the watches and failovers must keep running; the next tick retries
                if repr(exc) != failing:
                    log.exception("%s: the brokers' watch and failover tick failed", self.directory)
                    failing = repr(exc)
            else:
                if failing is not None:
                    log.info("%s: the brokers' watch and failover tick works again", self.directory)
                    failing = None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
