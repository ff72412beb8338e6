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
- a broker restart is recognised by ``process_start_time_seconds``; a broker that does not export it cannot prove
  it did not restart (the downgrade says so), and its flush counters going down is a restart too;
- a broker's ``/metrics`` is live only when ``process_cpu_seconds_total`` (exported with the start time by every
  JVM broker, and by the engine) moved between two reads of it further apart than its cache slot: a stale copy (a
  caching proxy) shows counters that cannot move, so they are no evidence;
- a broker serving a cached exposition (``metricsBufferResponse=true``) shows counters as they were at the start
  of its cache slot (``managedLedgerStatsPeriodSeconds`` long, at least 1 s), so its counters are that much older
  than the moment we read them;
- every active broker's version is asked of that broker; a target that lists no broker at all (no cluster
  answers) is one broker, the one behind the admin URL, which speaks for itself;
- batching may be switched on only when every active broker reads batched entries (PIP-160: release
  ``BATCH_READER_VERSION`` or later): a broker older than that, or one that cannot say and that the operator did not
  vouch for by name (``--assume-version-ok``), stops it (:meth:`ClusterView.check_batch_readers`, for ``upgrade``
  and both batch-log enable commands alike); switching batching off is never held back;
- the namespaces are every tenant's; a namespace's topics are listed with the system topics (that is where the
  pending-ack stores are);
- a topic's grants are asked of the partitioned topic for a partition (``-partition-N`` cut off: Pulsar keeps and
  checks them there); a namespace's grants, its subscriptions' role lists and a tenant's admins are read once;
- a topic's producers are its stats' ``publishers``, each with the ``clientVersion`` its client reported;
- a pending-ack store's name is split into (topic, subscription) by :func:`txnadmin.names.pending_ack_readings`
  against the other topics of its namespace (the raw and the URL-encoded subscription both read); when the name
  reads more than one way, the first reading whose pending-ack internal stats the target answers is the store (a
  404 means "not this one"; none answering: the likeliest); when no listed topic matches, the name is cut at its
  last ``-`` and marked as a guess.

Error policy (``on_error``): ``"raise"`` (the downgrade, the upgrade, the batch-log commands) lets every
:class:`AdminError` through; ``"record"`` (doctor) lets only :class:`TargetUnreachableError` through and records
any other under the area it was reading (``errors``), so a walk goes on past a namespace it may not list.
:meth:`ClusterView.attempt` (and :meth:`ClusterView.ask` on it) is the one place that applies it.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TypeVar

from ..metrics.exposition import (
    DOWNGRADE_METRICS, ExpositionError, batched_flushes_by_label, parse_exposition, process_cpu_time,
    process_start_time,
)
from ..names import is_pending_ack_store, partitioned_topic, pending_ack_guess, pending_ack_readings, reads_batched_entries
from .protocol import (
    PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError, BadReplyError, NotFoundError, TargetUnreachableError,
    TransactionsAdmin, is_transient,
)

BATCH_FLAGS = (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG)
BATCH_READER_VERSION = "2.11.0"  # PIP-160's reader and writer shipped together in Pulsar 2.11.0
DEFAULT_STATS_PERIOD_S = 60.0  # Pulsar's managedLedgerStatsPeriodSeconds default
RAISE, RECORD = "raise", "record"  # the error policies (module docstring)
T = TypeVar("T")


def flag_is_on(runtime: dict[str, Any], flag: str) -> bool:
    """The one rule for "this batching flag is on" in a runtime (or dynamic) configuration."""
    return str(runtime.get(flag, "false")).strip().lower() == "true"


def flags_on(runtime: dict[str, Any]) -> list[str]:
    return [f for f in BATCH_FLAGS if flag_is_on(runtime, f)]


def _label_matches(label: str, broker: str) -> bool:
    return label == broker or label == broker.rsplit(":", 1)[0]


def parse_version(text: str) -> tuple[int, ...]:
    """A broker's release as numbers (``4.0.12`` → (4, 0, 12)); ValueError for a text that is none."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"unrecognised version {text!r}")
    return tuple(int(x or 0) for x in m.groups())


class BrokerVersionError(Exception):
    """Batching may not be switched on: a broker too old to read batched entries (``cannot_tell`` False), or the
    brokers or their versions could not be read (True)."""

    def __init__(self, message: str, cannot_tell: bool):
        super().__init__(message)
        self.cannot_tell = cannot_tell


@dataclass(frozen=True)
class VersionCheck:
    """Every active broker's version, each at least ``min_version`` (or vouched for by the operator)."""

    versions: dict[str, str]
    min_version: str

    @property
    def checked(self) -> str:
        return ("asked every active broker (GET /admin/v2/brokers/version on each): "
                + ", ".join(f"{b} runs {v}" for b, v in sorted(self.versions.items()))
                + f"; every version must be >= {self.min_version}, the first release whose brokers read batched "
                  "entries")


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
    cpu: Optional[float] = None  # process_cpu_seconds_total: moves at every live scrape (None: not exported)
    version: Optional[str] = None  # what it answered to GET /admin/v2/brokers/version just now (None: unknown)

    @property
    def readable(self) -> bool:
        return self.error is None

    @property
    def batch_writer(self) -> bool:
        """False only for a broker that said it runs a release before PIP-160 (2.11), which has no batched writer
        (nor its counters); an unknown or unreadable version keeps the writer possible."""
        return self.version is None or reads_batched_entries(self.version)

    @property
    def counters_needed(self) -> bool:
        """Only a broker that runs coordinators and stores, on a release with PIP-160, has batched writers to
        count (a rolling downgrade's older brokers have none)."""
        return self.coordinator_enabled and self.batch_writer

    @property
    def counters_as_of(self) -> float:
        """The latest moment (our clock) the counters are known to reflect."""
        return self.at - self.cache_s


@dataclass(frozen=True)
class PendingAckStore:
    """A pending-ack store found in a topic listing, and the (topic, subscription) it belongs to."""

    name: str  # the store's topic, as listed
    topic: str  # the origin topic (the partition, for partitioned topics)
    subscription: str
    origin_listed: bool  # False: no listed topic matches the name (its topic was deleted), so the split is a guess


@dataclass
class ClusterView:
    """One run's view of a cluster through ``admin`` (see the module docstring for the rules and the policies)."""

    admin: TransactionsAdmin
    admin_url: str = ""
    on_error: str = RAISE
    errors: dict[str, AdminError] = field(default_factory=dict)  # "record": area → what its read raised
    answered: set[str] = field(default_factory=set)  # areas whose read the target answered
    _memo: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.on_error not in (RAISE, RECORD):
            raise ValueError(f"on_error={self.on_error!r}: use {RAISE!r} or {RECORD!r}")

    def forget(self) -> None:
        """Everything read once so far (identity, brokers, runtime configs, listings) is read afresh from now on."""
        self._memo.clear()

    def _once(self, key: str, read):
        if key not in self._memo:
            self._memo[key] = read()
        return self._memo[key]

    # -- the error policy ---------------------------------------------------------------------
    def attempt(self, area: str, call: Callable[..., T], *args: Any,
                absent_ok: bool = False) -> tuple[Optional[T], Optional[AdminError]]:
        """``call(*args)`` under the policy: (its value, None), or with "record" (None, the error it raised, also
        kept in ``errors[area]``). An unreachable target is never recorded: nothing after it can be read either.
        ``absent_ok``: a 404 is an answer meaning "none" here, (None, None) under either policy."""
        try:
            value = call(*args)
        except TargetUnreachableError:
            raise
        except AdminError as exc:
            if absent_ok and isinstance(exc, NotFoundError):
                return None, None
            if self.on_error == RAISE:
                raise
            self.errors[area] = exc
            return None, exc
        self.answered.add(area)
        return value, None

    def ask(self, area: str, call: Callable[..., T], *args: Any, absent_ok: bool = False) -> Optional[T]:
        """``call(*args)``'s value, or None when the policy recorded its failure under ``area`` (or, with
        ``absent_ok``, when the target answered 404)."""
        return self.attempt(area, call, *args, absent_ok=absent_ok)[0]

    # -- identity and brokers -----------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What a checklist is about: the admin URL, the cluster's own name and its metadata/BookKeeper URIs."""
        def read() -> dict[str, Any]:
            clusters = self.clusters()
            internal = self.ask("internal configuration", self.admin.internal_configuration, absent_ok=True)
            if internal is None and not clusters and "clusters" not in self.answered and self.on_error == RAISE:
                # every broker answers both; a 404 to each is another web server on that port, not an empty cluster
                raise BadReplyError(f"{self.admin_url or 'the target'} answers 404 to GET /admin/v2/clusters and "
                                    "GET /admin/v2/brokers/internal-configuration, as no Pulsar broker does: is it "
                                    "the admin URL of a broker?")
            internal = internal or {}
            ident: dict[str, Any] = {"adminUrl": self.admin_url,
                                     "clusterName": clusters[0] if len(clusters) == 1 else None,
                                     "clusters": sorted(clusters)}
            for key in ("metadataStoreUrl", "bookkeeperMetadataServiceUri"):
                if isinstance(internal, dict) and internal.get(key):
                    ident[key] = internal[key]
            return ident
        return self._once("identity", read)

    def clusters(self) -> list[str]:
        """The cluster names the target lists ([] when it answers 404: it lists none)."""
        return self._once("clusters", lambda: self.ask("clusters", self.admin.list_clusters, absent_ok=True) or [])

    def active_brokers(self, fresh: bool = False) -> list[str]:
        """Every cluster's active brokers, sorted ([] when the target lists none)."""
        def read() -> list[str]:
            brokers: list[str] = []
            for cluster in self.clusters():
                brokers += self.ask(f"brokers of {cluster}", self.admin.active_brokers, cluster, absent_ok=True) or []
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

    def broker_version(self, broker: str, fresh: bool = False) -> str:
        def read() -> str:
            if self._single():
                return next(iter(self.admin.broker_versions().values()))
            return self.admin.broker_version(broker)
        if fresh:
            self._memo[f"version:{broker}"] = read()
        return self._once(f"version:{broker}", read)

    def broker_versions(self, concurrency: int = 16) -> dict[str, str]:
        """Every active broker's version, asked of each broker ("raise": AdminError from the first that cannot say;
        "record": the brokers that said, each failure under ``version of BROKER``). A target that lists no broker
        is the one broker behind the admin URL (area ``versions``)."""
        brokers = self.active_brokers()
        if not brokers:
            if any(area == "clusters" or area.startswith("brokers of ") for area in self.errors):
                return {}  # the listing failed: the answering broker cannot speak for brokers nobody listed
            return dict(self.ask("versions", self.admin.broker_versions) or {})
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(brokers)))) as pool:
            asked = list(pool.map(lambda b: (b, self.ask(f"version of {b}", self.broker_version, b)), brokers))
        return {b: v for b, v in asked if v is not None}

    def check_batch_readers(self, min_version: str = BATCH_READER_VERSION,
                            assume_ok: Optional[list[str]] = None) -> VersionCheck:
        """Every active broker asked its version before batching is switched on (the rule in the module docstring).

        BrokerVersionError names the brokers too old (``cannot_tell`` False), or those that could not be asked and
        were not vouched for by name in ``assume_ok``, or why the brokers could not be listed (True)."""
        assume = set(assume_ok or [])
        try:
            brokers = self.active_brokers()
        except AdminError as exc:
            raise BrokerVersionError(f"cannot list the brokers whose versions must be checked: {exc.reason}",
                                     exc.status in (0, 401, 403) or exc.status >= 500 or is_transient(exc)) from None
        if not brokers:
            raise BrokerVersionError("cannot read the target: it lists no active brokers (GET /admin/v2/clusters, "
                                     "/admin/v2/brokers/{cluster}), so the brokers whose versions must be checked "
                                     "are unknown", True)
        versions: dict[str, str] = {}
        unaskable: list[str] = []
        for broker in brokers:
            try:
                versions[broker] = self.broker_version(broker)
            except AdminError as exc:
                if exc.status in (401, 403):
                    raise BrokerVersionError(f"cannot read broker versions: {exc.reason}", True) from None
                if broker in assume:
                    versions[broker] = "assumed ok (--assume-version-ok)"
                else:
                    unaskable.append(f"{broker} ({exc.reason})")
                continue
            try:
                parse_version(versions[broker])
            except ValueError:
                if broker not in assume:  # an answer that is no release proves nothing about what it reads
                    unaskable.append(f"{broker} (answers {versions[broker]!r}, no release number)")
        if unaskable:
            raise BrokerVersionError("cannot ask these brokers their version directly: " + ", ".join(unaskable)
                                     + "; check them yourself and name them with --assume-version-ok BROKER,...",
                                     True)
        floor = parse_version(min_version)
        old = {b: v for b, v in versions.items() if b not in assume and parse_version(v) < floor}
        if old:
            raise BrokerVersionError("brokers too old to read batched entries: "
                                     + ", ".join(f"{b} runs {v}" for b, v in sorted(old.items()))
                                     + f" (need >= {min_version}); finish the rolling upgrade first", False)
        return VersionCheck(versions, min_version)

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
        version = self._version_now(broker)
        try:
            samples = parse_exposition(self.broker_metrics_text(broker), DOWNGRADE_METRICS)
        except (AdminError, ExpositionError) as exc:
            why = exc.reason if isinstance(exc, AdminError) else str(exc)
            return BrokerReading(broker, at, flags, coordinator_enabled=enabled, cache_s=cache_s,
                                 counter_error=f"/metrics: {why}", version=version)
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
                             process_start=process_start_time(samples), cpu=process_cpu_time(samples),
                             version=version)

    def _version_now(self, broker: str) -> Optional[str]:
        """The broker's version asked now (a rolling downgrade changes it under a running view); None when it
        cannot say, which counts as a release that may batch."""
        try:
            return self.broker_version(broker, fresh=True)
        except AdminError:
            return None

    def read_brokers(self, brokers: list[str]) -> dict[str, BrokerReading]:
        if not brokers:
            return {}
        with ThreadPoolExecutor(max_workers=min(16, len(brokers))) as pool:
            return {r.broker: r for r in pool.map(self.read_broker, brokers)}

    # -- namespaces, topics, pending-ack stores ------------------------------------------------
    def namespaces(self) -> list[str]:
        """Every tenant's namespaces (``tenant/ns``), in the order the target lists them."""
        def read() -> list[str]:
            out: list[str] = []
            for tenant in self.ask("namespaces", self.admin.list_tenants) or []:
                out += self.ask(f"namespaces of {tenant}", self.admin.list_namespaces, tenant) or []
            return out
        return self._once("namespaces", read)

    def topics(self, namespace: str) -> Optional[list[str]]:
        """Every topic of ``namespace``, system topics included; None when "record" kept its failure."""
        return self._once(f"topics:{namespace}",
                          lambda: self.ask(f"topics of {namespace}", self.admin.list_topics, namespace, True))

    def topic_listing(self, concurrency: int = 16) -> dict[str, list[str]]:
        """Namespace → its topics (system topics included), for every namespace whose listing answered."""
        namespaces = self.namespaces()
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(namespaces) or 1))) as pool:
            listed = list(pool.map(lambda ns: (ns, self.topics(ns)), namespaces))
        return {ns: topics for ns, topics in listed if topics is not None}

    def pending_ack_stores(self, concurrency: int = 16) -> dict[str, PendingAckStore]:
        """Every pending-ack store of every namespace, by store name, each split by the one rule (module
        docstring)."""
        def read() -> dict[str, PendingAckStore]:
            found: dict[str, PendingAckStore] = {}
            ambiguous: list[tuple[str, list[tuple[str, str]]]] = []
            for listed in self.topic_listing(concurrency).values():
                others = {t for t in listed if not is_pending_ack_store(t)}
                for name in (t for t in listed if is_pending_ack_store(t)):
                    readings = pending_ack_readings(name, others)
                    if len(readings) > 1:
                        ambiguous.append((name, readings))
                    elif readings:
                        found[name] = PendingAckStore(name, *readings[0], True)
                    else:
                        found[name] = PendingAckStore(name, *pending_ack_guess(name), False)
            if ambiguous:  # only these cost calls: asked in parallel
                with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(ambiguous)))) as pool:
                    found.update((s.name, s) for s in pool.map(lambda job: self._resolve(*job), ambiguous))
            return found
        return self._once("stores", read)

    # -- producers and grants --------------------------------------------------------------------
    def topic_stats(self, topic: str) -> Optional[dict[str, Any]]:
        """``topic``'s stats (its ``publishers``), read afresh; None when "record" kept its failure."""
        return self.ask(f"stats of {topic}", self.admin.topic_stats, topic)

    def namespace_grants(self, namespace: str) -> Optional[dict[str, Any]]:
        return self._once(f"grants:{namespace}", lambda: self.ask(
            f"permissions of {namespace}", self.admin.namespace_permissions, namespace))

    def topic_grants(self, topic: str) -> Optional[dict[str, Any]]:
        """The grants on ``topic``, asked of its partitioned topic when it is a partition."""
        base = partitioned_topic(topic)
        return self._once(f"grants:{base}", lambda: self.ask(
            f"permissions of {base}", self.admin.topic_permissions, base))

    def subscription_roles(self, namespace: str) -> Optional[dict[str, Any]]:
        return self._once(f"subroles:{namespace}", lambda: self.ask(
            f"subscription permissions of {namespace}", self.admin.subscription_permissions, namespace))

    def subscription_auth_mode(self, namespace: str) -> Optional[str]:
        return self._once(f"submode:{namespace}", lambda: self.ask(
            f"subscription auth mode of {namespace}", self.admin.subscription_auth_mode, namespace))

    def tenant_admins(self, tenant: str) -> Optional[dict[str, Any]]:
        return self._once(f"tenant:{tenant}", lambda: self.ask(f"tenant {tenant}", self.admin.tenant_info, tenant))

    def _resolve(self, store: str, readings: list[tuple[str, str]]) -> PendingAckStore:
        """The reading of an ambiguous store name whose pending-ack internal stats the target answers."""
        for topic, sub in readings:
            stats, error = self.attempt(f"pending-ack store {store}", self.admin.pending_ack_internal_stats,
                                        topic, sub, absent_ok=True)
            if error is not None:
                break  # "record": the target would not say which; the likeliest reading stands
            if stats is not None:
                return PendingAckStore(store, topic, sub, True)
        return PendingAckStore(store, *readings[0], True)
