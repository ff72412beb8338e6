"""Everything doctor reads, read here and nowhere else: the target through a :class:`ClusterView` that records
what it could not read per area, and the one local input, a bookie's RocksDB files (plus txnadmin's own record of
batch-flag changes).

One survey reads the target once (coordinators, their open transactions, every transaction buffer and pending-ack
store, with bounded concurrency), then only what the selected checks need of the rest (a topic's internal stats,
coordinator and store internal stats, the runtime configuration, every broker's version, ``/metrics``). The checks
judge the :class:`Survey` and read nothing themselves, so an admin error can never escape one.

Errors: an unreachable target on the first call, or a 401/403 there, is :class:`DoctorError` (exit 3); after that a
target that stops answering ends the survey (``lost``) and what was read is judged; any other admin error is
recorded where it happened (``errors`` by area, or on the coordinator, buffer or store it concerns), and the checks
turn it into ``unknown`` findings. A garbled answer (a list where Pulsar sends an object) is caught per part.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ...admin.batchlog import recorded_change
from ...admin.cluster import RECORD, ClusterView, PendingAckStore
from ...admin.endpoints import JUDGED_COORDINATORS, JUDGED_LOG, judged
from ...admin.protocol import (
    PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError, BadReplyError, NotFoundError, TargetUnreachableError,
    TransactionsAdmin,
)
from ...names import SYSTEM_NAMESPACE, is_pending_ack_store
from ..preflight import Preflight, judge
from .knowledge import ENDING_STATES, READY_STATES
from .report import DoctorError

Progress = Optional[Callable[[int, int], None]]

# What a garbled answer (a list where Pulsar sends an object, a string where it sends a number) raises in the
# code that reads it. Caught per survey part and per check: doctor reports it as unknown, never a traceback.
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)
NO_CLOCK = "the target's answers carry no Date header, so ages cannot be judged on its clock"
# Checks that judge the buffers and stores (coverage says what of them could not be read).
# Not a check: what the exporter asks for when it needs the transaction buffers but not the pending-ack stores.
BUFFERS = "transaction-buffers"
TOPIC_SURVEY = {"max-read-position", "recovery", "snapshots", "leftovers", "batched-log", "coverage", BUFFERS}
STORE_SURVEY = {"recovery", "leftovers", "batched-log", "coverage"}  # the checks that judge pending-ack stores


def malformed(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def problem(exc: Exception) -> str:
    if isinstance(exc, AdminError):
        return f"HTTP {exc.status}: {exc.reason}" if exc.status else exc.reason
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Store:
    name: str  # the `…__transaction_pending_ack` topic
    topic: Optional[str]  # origin topic, None when no existing topic matches
    subscription: Optional[str]
    stats: Optional[dict] = None
    error: Optional[AdminError] = None
    internal: Optional[dict] = None  # pendingAckInternalStats: read for batched-log when txnadmin recorded a change
    internal_error: Optional[AdminError] = None  # why not (404: not loaded)


def missing_subscription(s: "Survey", store: Store) -> Optional[list[str]]:
    """The topic's subscriptions when its internal stats prove the store's own missing, else None. Asked only of a
    store whose stats answered 404 or a server error: a broker answers a subscription missing from its loaded topic
    with a NullPointerException there (HTTP 500), and only for the internal stats with a 404."""
    if store.topic is None or not _may_be_gone(store.error):
        return None
    internal = s.internal.get(store.topic)
    if internal is None:
        return None
    cursors = internal.get("cursors") or {}
    return None if store.subscription in cursors else sorted(cursors)


def _may_be_gone(error: Optional[AdminError]) -> bool:
    if isinstance(error, NotFoundError):
        return True
    return error is not None and error.status >= 500 and not isinstance(error, BadReplyError)


@dataclass
class OptionsFile:
    """A RocksDB OPTIONS-* or *_rocksdb.conf file: ``[Section "name"]`` → key → value, or why it is unreadable."""

    path: Path
    sections: dict[str, dict[str, str]] = field(default_factory=dict)
    error: Optional[str] = None


@dataclass
class BookieFiles:
    """What --bookie-dir holds: each RocksDB database (a directory with CURRENT) and its newest OPTIONS file, and
    the *_rocksdb.conf files."""

    root: Path
    error: Optional[str] = None  # the directory could not be walked: nothing below is known
    databases: dict[Path, OptionsFile] = field(default_factory=dict)
    confs: list[OptionsFile] = field(default_factory=list)


@dataclass
class Survey:
    """What doctor read from the target, and what it could not read (``errors``: area → reason)."""

    now_ms: Optional[int]
    clock: str  # "target" or "unknown"
    coordinators: Optional[list[dict]] = None
    coordinator_stats: dict[int, dict] = field(default_factory=dict)
    coordinator_errors: dict[int, AdminError] = field(default_factory=dict)  # coordinatorStats that failed
    txn_errors: dict[int, AdminError] = field(default_factory=dict)  # coordinators whose transactions were not read
    tc_disabled: Optional[str] = None  # the 503 reason when transactionCoordinatorEnabled=false
    transactions: dict[str, dict] = field(default_factory=dict)  # "(m,l)" → TransactionMetadata
    topics: dict[str, set[str]] = field(default_factory=dict)  # namespace → every topic listed (system included)
    buffers: dict[str, dict] = field(default_factory=dict)  # topic → TransactionBufferStats
    buffer_errors: dict[str, AdminError] = field(default_factory=dict)
    stores: list[Store] = field(default_factory=list)
    internal: dict[str, dict] = field(default_factory=dict)  # topic → internalStats (read where a check needs it)
    coordinator_internals: dict[int, dict] = field(default_factory=dict)  # for batched-log
    coordinator_internal_errors: dict[int, AdminError] = field(default_factory=dict)
    batch_changes: dict[str, Optional[dict]] = field(default_factory=dict)  # flag → txnadmin's last recorded change
    runtime: Optional[dict] = None
    versions: Optional[dict[str, str]] = None  # broker → version, every active broker asked; None: not read
    brokers: Optional[list[str]] = None  # the active brokers ([]: none listed, or the listing failed: see errors)
    errors: dict[str, str] = field(default_factory=dict)
    metrics: Optional[tuple[Optional[str], str]] = None  # /metrics text once read, or why it could not be
    lost: Optional[str] = None  # the target stopped answering after the first call: why
    target: str = ""  # as the operator named it (keys txnadmin's record of batch-flag changes)
    answered: set[str] = field(default_factory=set)  # areas the target answered as a Pulsar broker does
    bookie: Optional[BookieFiles] = None  # --bookie-dir: read for the bookie-rocksdb check only
    txn_topics: list[str] = field(default_factory=list)  # topics ongoing transactions produce to (client-versions)
    topic_stats: dict[str, dict] = field(default_factory=dict)  # topic → its stats (publishers)
    preflight: Optional[Preflight] = None  # transaction-permissions: the owners seen and their grants judged


def survey(admin: TransactionsAdmin, target: str, need: set[str], concurrency: int = 16, progress: Progress = None,
           bookie_dir: Optional[Path] = None) -> Survey:
    """Read what the checks in ``need`` judge. Raises DoctorError (exit 3) when the target cannot be read at all."""
    try:
        now = admin.broker_time_ms()
    except TargetUnreachableError as exc:
        raise DoctorError(f"cannot read the target: {exc.reason}") from None
    except AdminError as exc:
        if exc.status in (401, 403):
            raise DoctorError(f"cannot read the target: {problem(exc)}") from None
        now = None
    view = ClusterView(admin, target, on_error=RECORD)
    s = Survey(now_ms=now, clock="target" if now is not None else "unknown", target=target, answered=view.answered)
    notes: dict[str, str] = {}  # what the survey itself found unreadable (beyond the view's admin errors)
    if now is None:
        notes["clock"] = NO_CLOCK
    if bookie_dir is not None and "bookie-rocksdb" in need:
        s.bookie = read_bookie_files(bookie_dir)
    try:
        _read_target(view, s, need, concurrency, progress, notes)
    except TargetUnreachableError as exc:
        # Read once, then lost: what was read is still judged (a warning found wins, exit 1); the rest is unknown
        # and, with nothing wrong found, the run cannot call the target healthy (exit 3).
        s.lost = exc.reason
    s.errors = {area: problem(exc) for area, exc in view.errors.items()}
    if s.tc_disabled is not None:
        s.errors.pop("coordinators", None)  # a 503 that says transactions are off is an answer, judged as such
    s.errors.update(notes)
    return s


def _read_target(view: ClusterView, s: Survey, need: set[str], concurrency: int, progress: Progress,
                 notes: dict[str, str]) -> None:
    try:
        _coordinators(view, s, concurrency)
    except MALFORMED as exc:
        s.coordinators, s.coordinator_stats, s.transactions = None, {}, {}
        s.coordinator_errors.clear()
        s.txn_errors.clear()
        notes["coordinators"] = f"an answer doctor cannot read: {malformed(exc)}"
    if need & TOPIC_SURVEY:
        try:
            _topics(view, s, concurrency, progress, stores=bool(need & STORE_SURVEY))
        except MALFORMED as exc:
            s.buffers, s.stores = {}, []
            notes["namespaces"] = f"an answer doctor cannot read: {malformed(exc)}"
    if need & {"batched-log", "snapshots", "coordinators"}:
        s.runtime = view.ask("runtime-config", view.admin.runtime_config)
    if "versions" in need or _fix_needs_versions(s, need):
        s.versions = view.broker_versions(concurrency)
    if "coordinators" in need and s.coordinators:
        s.brokers = view.active_brokers()  # how many brokers share the coordinators (skew)
    if "client-versions" in need and s.coordinators is not None:
        try:
            _producers(view, s, concurrency)
        except MALFORMED as exc:
            s.txn_topics, s.topic_stats = [], {}
            notes["producers"] = f"an answer doctor cannot read: {malformed(exc)}"
    if "transaction-permissions" in need and s.coordinators is not None and s.tc_disabled is None:
        if s.runtime is None:
            s.runtime = view.ask("runtime-config", view.admin.runtime_config)
        try:
            s.preflight = judge(view, s.runtime, s.transactions)
        except MALFORMED as exc:
            notes["grants"] = f"an answer doctor cannot read: {malformed(exc)}"
    if "coordinators" in need and s.coordinators and "coordinators" not in notes:
        listed = view.topics(SYSTEM_NAMESPACE)  # the assign topic's partitions (memoised: read once at most)
        if listed is not None:
            s.topics[SYSTEM_NAMESPACE] = set(listed)
    _internal_stats(view, s, need, concurrency)
    if "batched-log" in need and s.runtime is not None:
        _batch_log(view, s, concurrency)
    if ("batched-log" in need and s.runtime is not None) or (
            "leftovers" in need and s.now_ms is not None and any(st.stats is not None for st in s.stores)):
        try:
            text, error = view.attempt("metrics", view.admin.metrics_text)
            s.metrics = (text, "") if error is None else (None, problem(error))
        except TargetUnreachableError:  # /metrics may be served elsewhere than the admin API: not the target lost
            s.metrics = (None, "metrics endpoint unreachable")


def _producers(view: ClusterView, s: Survey, concurrency: int) -> None:
    """The producers of every topic an ongoing transaction produces to (the coordinators' listing, and any buffer
    read with transactions ongoing)."""
    topics = {str(t) for meta in s.transactions.values() if isinstance(meta, dict)
              for t in (meta.get("producedPartitions") or {})}
    topics |= {t for t, st in s.buffers.items() if isinstance(st, dict) and st.get("ongoingTxnSize")}
    s.txn_topics = sorted(topics)
    if not topics:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(topics)))) as pool:
        read = list(pool.map(lambda t: (t, view.topic_stats(t)), s.txn_topics))
    s.topic_stats.update((t, st) for t, st in read if isinstance(st, dict))


def _fix_needs_versions(s: Survey, need: set[str]) -> bool:
    """A fix line that names an upgrade must fit the brokers' releases: read them when such a line may be written (a
    transaction ending, a buffer or store not Ready), and only then."""
    ending = "stuck-transactions" in need and any(
        isinstance(meta, dict) and meta.get("status") in ENDING_STATES for meta in s.transactions.values())
    loading = "recovery" in need and any(
        isinstance(stats, dict) and stats.get("state") not in READY_STATES
        for stats in [*s.buffers.values(), *(st.stats for st in s.stores if st.stats is not None)])
    return ending or loading or "transaction-permissions" in need


def _coordinators(view: ClusterView, s: Survey, concurrency: int) -> None:
    # judged here: every check after this one reads coordinators by id, and a reply without ids is unknown, said once
    coordinators, error = view.attempt(
        "coordinators", lambda: judged(view.admin.list_coordinators(), JUDGED_COORDINATORS, "coordinators"))
    if error is not None:
        if error.status == 503:
            s.tc_disabled = error.reason
            s.answered.add("coordinators")  # a broker with transactions switched off says so with a 503
        return
    s.coordinators = coordinators
    ids = sorted(int(c["id"]) for c in coordinators or [])

    def one(tc_id: int):
        # Both calls are made whatever the first answers: a coordinator whose stats fail may still list its
        # transactions, and one whose listing fails leaves them unread — which the checks must say, not skip.
        stats, stats_error = view.attempt(f"coordinatorStats {tc_id}", view.admin.coordinator_stats, tc_id)
        # every in-memory transaction with a timeout (all of them)
        txns, txns_error = view.attempt(f"slowTransactions {tc_id}", view.admin.slow_transactions, 0, tc_id)
        return tc_id, stats, txns, stats_error, txns_error

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for tc_id, stats, txns, stats_error, txns_error in pool.map(one, ids):
            if stats is not None:
                s.coordinator_stats[tc_id] = stats
            if txns is not None:
                s.transactions.update(txns)
            if stats_error is not None:
                s.coordinator_errors[tc_id] = stats_error
            if txns_error is not None:
                s.txn_errors[tc_id] = txns_error


def is_system(topic: str) -> bool:
    """A system topic: no transaction buffer of a user's topic lives there."""
    local = topic.rsplit("/", 1)[-1]
    return local.startswith("__") or is_pending_ack_store(local) or topic.startswith(
        ("persistent://pulsar/system/", "pulsar/system/"))


def _topics(view: ClusterView, s: Survey, concurrency: int, progress: Progress, stores: bool = True) -> None:
    s.topics.update((ns, set(topics)) for ns, topics in view.topic_listing(concurrency).items())
    plain = sorted(t for topics in s.topics.values() for t in topics if not is_system(t))
    found = sorted(view.pending_ack_stores(concurrency).values(), key=lambda store: store.name) if stores else []
    total = len(plain) + len(found)
    done = 0

    def buffer(topic: str):
        return (topic, *view.attempt(f"transactionBufferStats {topic}", view.admin.transaction_buffer_stats, topic))

    def pending(found: PendingAckStore) -> Store:
        if not found.origin_listed:  # no listed topic matches its name: nothing to ask
            return Store(found.name, None, None)
        store = Store(found.name, found.topic, found.subscription)
        store.stats, store.error = view.attempt(f"pendingAckStats {found.name}", view.admin.pending_ack_stats,
                                                found.topic, found.subscription)
        return store

    def step() -> None:
        nonlocal done
        done += 1
        if progress and (done % 200 == 0 or done == total):
            progress(done, total)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for topic, stats, error in pool.map(buffer, plain):
            if stats is not None:
                s.buffers[topic] = stats
            elif error is not None:
                s.buffer_errors[topic] = error
            step()
        for store in pool.map(pending, found):
            s.stores.append(store)
            step()


def position(text: Any) -> Optional[tuple[int, int]]:
    """``ledger:entry`` as a pair; None when it is not one."""
    try:
        ledger, entry = str(text).split(":")[:2]
        return int(ledger), int(entry)
    except (ValueError, AttributeError):
        return None


def stalled_candidates(buffers: dict[str, dict]) -> list[str]:
    """Topics whose buffer holds ongoing transactions at a readable max read position: their last entry decides."""
    out = []
    for topic, stats in sorted(buffers.items()):
        try:
            if int(stats.get("ongoingTxnSize") or 0) and position(stats.get("maxReadPosition")) is not None:
                out.append(topic)
        except MALFORMED:
            continue  # the check reads the same answer and reports it as one it cannot read
    return out


def _internal_stats(view: ClusterView, s: Survey, need: set[str], concurrency: int) -> None:
    """A topic's internal stats where a check needs them: the last entry a stalled buffer is behind
    (max-read-position), the subscriptions of a topic whose store answered 404 or a server error (leftovers)."""
    topics: set[str] = set()
    if "max-read-position" in need:
        topics.update(stalled_candidates(s.buffers))
    if "leftovers" in need:
        topics.update(st.topic for st in s.stores if st.topic is not None and _may_be_gone(st.error))
    elif need & STORE_SURVEY:  # coverage tells a leftover (its stats' 500) from a failing broker only by the cursors
        topics.update(st.topic for st in s.stores if st.topic is not None and _may_be_gone(st.error)
                      and not isinstance(st.error, NotFoundError))
    if not topics:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(topics)))) as pool:
        read = list(pool.map(lambda t: (t, view.ask(f"internal stats of {t}", view.admin.topic_internal_stats, t)),
                             sorted(topics)))
    s.internal.update((topic, stats) for topic, stats in read if stats is not None)


def _batch_log(view: ClusterView, s: Survey, concurrency: int) -> None:
    """What batched-log judges besides the flags: which coordinators and stores reopened since txnadmin's last flag
    change (their newest ledger's creation), read only where a change was recorded (stores) or ever (coordinators,
    whose ledger histories are few)."""
    s.batch_changes = {flag: recorded_change(s.target, flag) for flag in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG)}
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        if s.tc_disabled is None and s.coordinators:
            ids = sorted(int(c["id"]) for c in s.coordinators)
            for tc_id, (stats, error) in zip(ids, pool.map(
                    lambda i: view.attempt(f"coordinator internal stats {i}", lambda: judged(
                        view.admin.coordinator_internal_stats(i), ("obj", {"transactionLogStats": JUDGED_LOG}),
                        f"coordinator {i}'s internal stats")),
                    ids), strict=True):
                if stats is not None:
                    s.coordinator_internals[tc_id] = stats
                elif error is not None:
                    s.coordinator_internal_errors[tc_id] = error
        if s.batch_changes[PENDING_ACK_BATCH_FLAG] is not None:
            def one(job: tuple[Store, str, str]) -> None:
                store, topic, sub = job
                store.internal, store.internal_error = view.attempt(
                    f"pendingAckInternalStats {store.name}", view.admin.pending_ack_internal_stats, topic, sub)
            list(pool.map(one, [(st, st.topic, st.subscription) for st in s.stores
                                if st.topic is not None and st.subscription is not None]))


# -- the local input: a bookie's files ----------------------------------------------------------


def read_options(path: Path) -> OptionsFile:
    """A RocksDB OPTIONS-* (or *_rocksdb.conf) file: ``[Section "name"]`` headers and ``key=value`` lines."""
    out = OptionsFile(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        out.error = str(exc)
        return out
    current: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = out.sections.setdefault(line[1:-1].split(" ", 1)[0], {})
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key.strip()] = value.strip()
    return out


def _options_number(path: Path) -> int:
    tail = path.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def read_bookie_files(root: Path) -> BookieFiles:
    files = BookieFiles(root)
    try:
        databases = sorted({p.parent for p in root.rglob("OPTIONS-*") if (p.parent / "CURRENT").exists()})
        confs = sorted(root.rglob("*_rocksdb.conf"))
    except OSError as exc:
        files.error = str(exc)
        return files
    files.confs = [read_options(conf) for conf in confs]
    files.databases = {db: read_options(max(db.glob("OPTIONS-*"), key=_options_number)) for db in databases}
    return files
