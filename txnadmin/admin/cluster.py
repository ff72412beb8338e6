"""The facts about a cluster that need a broker's answer, each read by one rule, for every procedure.

:class:`ClusterView` wraps one :class:`TransactionsAdmin` for one run. What does not change within a run
(identity, the active brokers, each broker's version and runtime configuration) is read once and memoised;
:meth:`ClusterView.read_broker` reads a broker afresh, for the downgrade's watch, which must see the flags and
counters move. Admin failures are raised as the admin raised them (:class:`AdminError`): each procedure words
them its own way.

The rules live here and nowhere else:

- a batching flag is on when the broker's runtime configuration says ``true`` (any case);
- every active broker is asked itself (its flags, its ``/metrics``, its version), except when it is the only one:
  then the admin URL is that broker, and its broker id may not be an address we can reach;
- a broker's batched-writer flush counters are those carrying its own ``broker`` label (its id, or the host of
  its id, as Pulsar labels them with the advertised address): counters labelled for another broker are not its own;
- a broker restart is recognised by ``process_start_time_seconds``, never by counters going down;
- a broker serving a cached exposition (``metricsBufferResponse=true``) shows counters as they were at the start
  of its cache slot (``managedLedgerStatsPeriodSeconds`` long, at least 1 s), so its counters are that much older
  than the moment we read them.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

from ..metrics.exposition import (
    DOWNGRADE_METRICS, ExpositionError, batched_flushes_by_label, parse_exposition, process_start_time,
)
from .protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError, NotFoundError, TransactionsAdmin

BATCH_FLAGS = (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG)
DEFAULT_STATS_PERIOD_S = 60.0  # Pulsar's managedLedgerStatsPeriodSeconds default


def flag_is_on(runtime: dict[str, Any], flag: str) -> bool:
    """The one rule for "this batching flag is on" in a runtime (or dynamic) configuration."""
    return str(runtime.get(flag, "false")).strip().lower() == "true"


def flags_on(runtime: dict[str, Any]) -> list[str]:
    return [f for f in BATCH_FLAGS if flag_is_on(runtime, f)]


def _label_matches(label: str, broker: str) -> bool:
    return label == broker or label == broker.rsplit(":", 1)[0]


@dataclass(frozen=True)
class BrokerReading:
    """One broker read at one moment (``at``: our monotonic clock, taken before the first request)."""

    broker: str
    at: float
    flags_on: tuple[str, ...] = ()
    error: Optional[str] = None  # the broker could not be read: nothing below is known
    coordinator_enabled: bool = True
    flushes: Optional[float] = None  # its own batched flush count; None when unknown (see counter_error)
    counter_error: Optional[str] = None  # why its counters are not evidence (absent, another broker's, unreadable)
    process_start: Optional[float] = None  # process_start_time_seconds (its clock): a new value is a new process
    cache_s: float = 0.0  # > 0: counters are served from a cache slot this long

    @property
    def readable(self) -> bool:
        return self.error is None

    @property
    def counters_needed(self) -> bool:
        """Only a broker that runs coordinators and stores has batched writers to count."""
        return self.coordinator_enabled

    @property
    def counters_as_of(self) -> float:
        """The latest moment (our clock) the counters are known to reflect."""
        return self.at - self.cache_s


@dataclass
class ClusterView:
    """One run's view of a cluster through ``admin`` (see the module docstring for the rules)."""

    admin: TransactionsAdmin
    admin_url: str = ""
    _memo: dict[str, Any] = field(default_factory=dict)

    def _once(self, key: str, read):
        if key not in self._memo:
            self._memo[key] = read()
        return self._memo[key]

    # -- identity and brokers -----------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What a checklist is about: the admin URL, the cluster's own name and its metadata/BookKeeper URIs."""
        def read() -> dict[str, Any]:
            try:
                clusters = self.admin.list_clusters()
            except NotFoundError:
                clusters = []
            try:
                internal = self.admin.internal_configuration()
            except NotFoundError:
                internal = {}
            ident: dict[str, Any] = {"adminUrl": self.admin_url,
                                     "clusterName": clusters[0] if len(clusters) == 1 else None,
                                     "clusters": sorted(clusters)}
            for key in ("metadataStoreUrl", "bookkeeperMetadataServiceUri"):
                if isinstance(internal, dict) and internal.get(key):
                    ident[key] = internal[key]
            return ident
        return self._once("identity", read)

    def active_brokers(self, fresh: bool = False) -> list[str]:
        """Every cluster's active brokers, sorted ([] when the target lists none)."""
        def read() -> list[str]:
            brokers: list[str] = []
            for cluster in self.identity().get("clusters") or []:
                try:
                    brokers += self.admin.active_brokers(cluster)
                except NotFoundError:
                    continue
            return sorted(set(brokers))
        if fresh:
            self._memo["brokers"] = read()
        return self._once("brokers", read)

    # -- per broker ---------------------------------------------------------------------------
    def _single(self) -> bool:
        return len(self.active_brokers()) <= 1

    def broker_runtime_config(self, broker: str, fresh: bool = False) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            return self.admin.runtime_config() if self._single() else self.admin.broker_runtime_config(broker)
        if fresh:
            self._memo[f"runtime:{broker}"] = read()
        return self._once(f"runtime:{broker}", read)

    def broker_metrics_text(self, broker: str) -> str:
        """Always fresh: counters move."""
        return self.admin.metrics_text() if self._single() else self.admin.broker_metrics_text(broker)

    def broker_version(self, broker: str) -> str:
        def read() -> str:
            if self._single():
                return next(iter(self.admin.broker_versions().values()))
            return self.admin.broker_version(broker)
        return self._once(f"version:{broker}", read)

    def broker_versions(self) -> dict[str, str]:
        """Every active broker's version, asked of each broker (AdminError from the first that cannot say)."""
        return {b: self.broker_version(b) for b in self.active_brokers()}

    def flags_on_brokers(self, brokers: Optional[list[str]] = None) -> dict[str, list[str]]:
        """Broker → batching flags on in its runtime config, read afresh ({} when off everywhere); AdminError when a
        broker cannot say."""
        brokers = self.active_brokers() if brokers is None else brokers
        if not brokers:
            return {}
        def one(broker: str) -> tuple[str, list[str]]:
            try:
                return broker, flags_on(self.broker_runtime_config(broker, fresh=True))
            except AdminError as exc:
                if len(brokers) > 1:
                    exc.reason = f"broker {broker}: {exc.reason}"  # which of several could not say
                raise

        with ThreadPoolExecutor(max_workers=min(16, len(brokers))) as pool:
            return {b: on for b, on in pool.map(one, brokers) if on}

    def read_broker(self, broker: str) -> BrokerReading:
        """``broker``'s flags, counters and process identity, read now; failures are recorded, never raised."""
        at = time.monotonic()
        try:
            runtime = self.broker_runtime_config(broker, fresh=True)
        except AdminError as exc:
            return BrokerReading(broker, at, error=f"runtime configuration: {exc.reason}")
        enabled = str(runtime.get("transactionCoordinatorEnabled", "true")).strip().lower() != "false"
        cache_s = 0.0
        if str(runtime.get("metricsBufferResponse", "false")).strip().lower() == "true":
            try:
                cache_s = max(1.0, float(runtime.get("managedLedgerStatsPeriodSeconds", DEFAULT_STATS_PERIOD_S)))
            except (TypeError, ValueError):
                cache_s = DEFAULT_STATS_PERIOD_S
        flags = tuple(flags_on(runtime))
        try:
            samples = parse_exposition(self.broker_metrics_text(broker), DOWNGRADE_METRICS)
        except (AdminError, ExpositionError) as exc:
            why = exc.reason if isinstance(exc, AdminError) else str(exc)
            return BrokerReading(broker, at, flags, coordinator_enabled=enabled, cache_s=cache_s,
                                 counter_error=f"/metrics: {why}")
        by_label = batched_flushes_by_label(samples)
        own = [v for label, v in by_label.items() if _label_matches(label, broker)]
        counter_error = None
        if not by_label:
            counter_error = "its /metrics has no batched-writer flush counters"
        elif not own:
            counter_error = (f"its /metrics carries batched-writer counters labelled for "
                             f"{', '.join(sorted(repr(l) for l in by_label))}, not for {broker}")
        return BrokerReading(broker, at, flags, coordinator_enabled=enabled, cache_s=cache_s,
                             flushes=sum(own) if own else None, counter_error=counter_error,
                             process_start=process_start_time(samples))

    def read_brokers(self, brokers: list[str]) -> dict[str, BrokerReading]:
        if not brokers:
            return {}
        with ThreadPoolExecutor(max_workers=min(16, len(brokers))) as pool:
            return {r.broker: r for r in pool.map(self.read_broker, brokers)}
