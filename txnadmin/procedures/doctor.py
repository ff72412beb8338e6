"""`txnadmin doctor`: what is wrong with a cluster's transactions, why it matters, and the fix.

Backend-agnostic: everything is read through :class:`TransactionsAdmin`. One :class:`Survey` reads the
target once (coordinators, their open transactions, every transaction buffer and pending-ack store,
with bounded concurrency); each check is a small function of the survey registered in ``CHECKS`` and
returns :class:`Finding` objects. Ages are judged on the target's clock (``broker_time_ms``), never on
ours: a laptop whose clock runs an hour fast must not make ``--fix`` abort live transactions.

Severities: ``info`` and ``unknown`` (a check that could not run, with the reason) leave a target
healthy; ``warning`` and ``critical`` do not. ``strict`` counts ``unknown`` as a warning.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from ..admin.protocol import (
    PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError, NotFoundError, TargetUnreachableError, TransactionsAdmin, TxnId,
)
from ..names import (
    SYSTEM_NAMESPACE, TC_ASSIGN_TOPIC, coordinator_assign_partition, is_pending_ack_store, pending_ack_readings,
)

SEVERITIES = ("info", "unknown", "warning", "critical")
EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_UNREADABLE = 0, 1, 3
PULSAR = "apache/pulsar"
Progress = Optional[Callable[[int, int], None]]

# Thresholds (ms unless said otherwise): name → (default, what it bounds).
THRESHOLDS: dict[str, tuple[float, str]] = {
    "stuck-margin": (60_000, "an OPEN transaction this long past its own timeout is stuck (the broker aborts at the timeout)"),
    "ending": (60_000, "a transaction in COMMITTING/ABORTING for at least this long is stuck ending"),
    "stalled": (120_000, "a max read position behind the last entry while a transaction this old is ongoing is stalled"),
    "recovery": (300_000, "a recovery started this long ago without an end never ends"),
    "snapshot-share": (0.5, "a Single snapshot estimated above this share of maxMessageSize (a fraction, not ms)"),
    "idle": (7 * 86_400_000, "a pending-ack store whose subscription ended no transaction for this long is idle"),
}
# Pulsar's defaults where the target does not say (broker.conf).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
# One aborted transaction in a Single snapshot: four Avro longs (txn id most/least, marker ledger/entry) as
# zig-zag varints, about 16 bytes for real ids. An estimate, and the evidence says so.
BYTES_PER_ABORT = 16
TC_SYSTEM_NAMESPACE = SYSTEM_NAMESPACE
ENDING_STATES = ("COMMITTING", "ABORTING")
READY_STATES = {"Ready", "NoSnapshot"}  # NoSnapshot: a ready buffer that has not needed a snapshot yet


class DoctorError(Exception):
    """The target cannot be read at all, or a usage problem; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_UNREADABLE):
        super().__init__(message)
        self.code = code


@dataclass
class Finding:
    check: str
    severity: str
    subject: str
    evidence: dict
    why: str
    fix: str
    refs: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"check": self.check, "severity": self.severity, "subject": self.subject, "evidence": self.evidence,
                "why": self.why, "fix": self.fix, "refs": list(self.refs)}


def _ref(number: int) -> str:
    return f"{PULSAR}#{number}"


def parse_duration_ms(text: str) -> float:
    """``90s``, ``5m``, ``2h``, ``1d``, ``500ms`` or a bare number of ms."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if not m:
        raise ValueError(f"{text!r} is not a duration (use e.g. 500ms, 90s, 5m, 2h, 1d)")
    factor = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}[m.group(2)]
    return float(m.group(1)) * factor


def parse_thresholds(pairs: list[str]) -> dict[str, float]:
    """``name=value`` pairs over the defaults; unknown names and bad values raise ValueError naming them."""
    out = {name: default for name, (default, _) in THRESHOLDS.items()}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or name not in THRESHOLDS:
            raise ValueError(f"--threshold {pair!r}: use name=value with name one of {', '.join(THRESHOLDS)}")
        try:
            out[name] = float(value) if name == "snapshot-share" else parse_duration_ms(value)
        except ValueError as exc:
            raise ValueError(f"--threshold {pair!r}: {exc}") from None
    return out


def _age(ms: Optional[float]) -> str:
    if ms is None:
        return "unknown"
    seconds = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _position(text: Any) -> Optional[tuple[int, int]]:
    try:
        ledger, entry = str(text).split(":")[:2]
        return int(ledger), int(entry)
    except (ValueError, AttributeError):
        return None


def _txn_times(meta: dict) -> tuple[Optional[int], Optional[int], list[str]]:
    """A transaction's ``openTimestamp`` and ``timeoutAt`` as the coordinator sent them, and which are missing.

    Both are required to judge an age: reading a missing open time as 0 ("opened in 1970") would make a live
    transaction look decades overdue, and ``--fix`` would abort it. So a missing, non-integer or non-positive open
    time, or a missing or negative timeout, is reported (unknown), never judged."""
    def number(name: str, low: int) -> Optional[int]:
        value = meta.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= low else None

    opened, timeout = number("openTimestamp", 1), number("timeoutAt", 0)
    missing = [name for name, value in (("openTimestamp", opened), ("timeoutAt", timeout)) if value is None]
    return opened, timeout, missing


# What a garbled answer (a list where Pulsar sends an object, a string where it sends a number) raises in the
# code that reads it. Caught per survey part and per check: doctor reports it as unknown, never a traceback.
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def _malformed(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _problem(exc: Exception) -> str:
    if isinstance(exc, AdminError):
        return f"HTTP {exc.status}: {exc.reason}" if exc.status else exc.reason
    return f"{type(exc).__name__}: {exc}"


# -- the survey ---------------------------------------------------------------------------------


@dataclass
class Store:
    name: str  # the `…__transaction_pending_ack` topic
    topic: Optional[str]  # origin topic, None when no existing topic matches
    subscription: Optional[str]
    stats: Optional[dict] = None
    error: Optional[AdminError] = None
    others: list[tuple[str, str]] = field(default_factory=list)  # other (topic, sub) splits of an ambiguous name


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
    internal: dict[str, dict] = field(default_factory=dict)  # topic → internalStats (fetched when needed)
    runtime: Optional[dict] = None
    versions: Optional[dict] = None
    errors: dict[str, str] = field(default_factory=dict)
    metrics: Optional[tuple[Optional[str], str]] = None  # /metrics text once read, or why it could not be
    lost: Optional[str] = None  # the target stopped answering after the first call: why
    target: str = ""  # as the operator named it (keys txnadmin's record of batch-flag changes)
    answered: set[str] = field(default_factory=set)  # calls the target answered as a Pulsar broker does
    bookie_dir: Optional[Path] = None  # --bookie-dir: read by the bookie-rocksdb check only


def _read(survey: Survey, area: str, fn, *args):
    """One admin call whose failure is recorded under ``area`` (the checks turn it into an unknown finding)."""
    try:
        value = fn(*args)
        survey.answered.add(area)
        return value
    except TargetUnreachableError:
        raise
    except AdminError as exc:
        survey.errors[area] = _problem(exc)
        return None


def survey(admin: TransactionsAdmin, concurrency: int = 16, progress: Progress = None,
           need: Optional[set[str]] = None) -> Survey:
    """Read the target. Raises DoctorError (exit 3) when it cannot be read at all."""
    need = need or set(CHECKS)
    try:
        now = admin.broker_time_ms()
    except TargetUnreachableError as exc:
        raise DoctorError(f"cannot read the target: {exc.reason}") from None
    except AdminError as exc:
        if exc.status in (401, 403):
            raise DoctorError(f"cannot read the target: {_problem(exc)}") from None
        now = None
    s = Survey(now_ms=now, clock="target" if now is not None else "unknown")
    if now is None:
        s.errors["clock"] = "the target's answers carry no Date header, so ages cannot be judged on its clock"
    topics_read = False
    try:
        try:
            _survey_coordinators(admin, s, concurrency)
        except MALFORMED as exc:
            s.coordinators, s.coordinator_stats, s.transactions = None, {}, {}
            s.coordinator_errors.clear()
            s.txn_errors.clear()
            s.errors["coordinators"] = f"an answer doctor cannot read: {_malformed(exc)}"
        if need & {"max-read-position", "recovery", "snapshots", "leftovers", "batched-log", "coverage"}:
            try:
                _survey_topics(admin, s, concurrency, progress)
            except MALFORMED as exc:
                s.buffers, s.stores = {}, []
                s.errors["namespaces"] = f"an answer doctor cannot read: {_malformed(exc)}"
            topics_read = "namespaces" not in s.errors
        if need & {"batched-log", "snapshots", "coordinators"}:
            s.runtime = _read(s, "runtime-config", admin.runtime_config)
        if "versions" in need:
            s.versions = _read(s, "versions", admin.broker_versions)
    except TargetUnreachableError as exc:
        # Read once, then lost: what was read is still judged (a warning found wins, exit 1); the rest is unknown
        # and, with nothing wrong found, the run cannot call the target healthy (exit 3).
        s.lost = exc.reason
        return s
    if not (s.coordinators is not None or s.tc_disabled or topics_read or s.runtime is not None
            or s.versions is not None):
        # Every call answered, but nothing in a form doctor can use (a proxy's login page, another service, garbage):
        # checks with nothing to look at would pass vacuously, so this is "cannot tell", never "healthy".
        first = next((v for k, v in s.errors.items() if k != "clock"), "no usable answer")
        raise DoctorError(f"cannot read the target: none of its answers could be used ({first})")
    return s


def _survey_coordinators(admin: TransactionsAdmin, s: Survey, concurrency: int) -> None:
    try:
        s.coordinators = admin.list_coordinators()
        s.answered.add("coordinators")
    except TargetUnreachableError:
        raise
    except AdminError as exc:
        if exc.status == 503:
            s.tc_disabled = exc.reason
            s.answered.add("coordinators")  # a broker with transactions switched off says so with a 503
        else:
            s.errors["coordinators"] = _problem(exc)
        return
    ids = sorted(int(c["id"]) for c in s.coordinators)

    def one(tc_id: int):
        # Both calls are made whatever the first answers: a coordinator whose stats fail may still list its
        # transactions, and one whose listing fails leaves them unread — which the checks must say, not skip.
        stats = txns = stats_error = txns_error = None
        try:
            stats = admin.coordinator_stats(tc_id)
        except TargetUnreachableError:
            raise
        except AdminError as exc:
            stats_error = exc
        try:
            txns = admin.slow_transactions(0, tc_id)  # every in-memory transaction with a timeout (all of them)
        except TargetUnreachableError:
            raise
        except AdminError as exc:
            txns_error = exc
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


def _names(value: Any) -> set[str]:
    """A topic listing as Pulsar sends it: a list of strings; anything else is a malformed answer."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"expected a list of topic names, got {type(value).__name__}")
    return set(value)


def _survey_topics(admin: TransactionsAdmin, s: Survey, concurrency: int, progress: Progress) -> None:
    tenants = _read(s, "namespaces", admin.list_tenants)
    if tenants is None:
        return
    namespaces: list[str] = []
    for tenant in tenants:
        namespaces += _read(s, f"namespaces of {tenant}", admin.list_namespaces, tenant) or []
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        listed = list(pool.map(lambda ns: (ns, _read(s, f"topics of {ns}", admin.list_topics, ns, True)), namespaces))
    for ns, topics in listed:
        if topics is not None:
            s.topics[ns] = _names(topics)
    plain: list[str] = []
    stores: list[Store] = []
    for topics in s.topics.values():
        ns_plain = {t for t in topics if not _is_system(t)}
        plain += sorted(ns_plain)
        for name in sorted(t for t in topics if is_pending_ack_store(t)):
            readings = pending_ack_readings(name, ns_plain)
            topic, sub = readings[0] if readings else (None, None)
            stores.append(Store(name, topic, sub, others=readings[1:]))
    total = len(plain) + len(stores)
    done = 0

    def buffer(topic: str):
        try:
            return topic, admin.transaction_buffer_stats(topic), None
        except TargetUnreachableError:
            raise
        except AdminError as exc:
            return topic, None, exc

    def pending(store: Store):
        if store.topic is None or store.subscription is None:  # _resolve found no split: both are None
            return store
        # The name's split is a guess when topic or subscription holds '-', and Pulsar 5 URL-encodes the subscription
        # in the name (PR #25727): on a 404, try the other readings before calling the store a leftover.
        readings = [(store.topic, store.subscription)] + store.others
        for topic, sub in readings:
            try:
                store.stats = admin.pending_ack_stats(topic, sub)
                store.topic, store.subscription, store.error = topic, sub, None
                return store
            except TargetUnreachableError:
                raise
            except NotFoundError as exc:
                store.error = store.error or exc
            except AdminError as exc:
                store.error = exc
                return store
        return store

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for topic, stats, error in pool.map(buffer, plain):
            if stats is not None:
                s.buffers[topic] = stats
            elif error is not None:
                s.buffer_errors[topic] = error
            done += 1
            if progress and (done % 200 == 0 or done == total):
                progress(done, total)
        for store in pool.map(pending, stores):
            s.stores.append(store)
            done += 1
            if progress and (done % 200 == 0 or done == total):
                progress(done, total)


def _is_system(topic: str) -> bool:
    local = topic.rsplit("/", 1)[-1]
    return local.startswith("__") or is_pending_ack_store(local) or topic.startswith(
        ("persistent://pulsar/system/", "pulsar/system/"))


def _internal(admin: TransactionsAdmin, s: Survey, topic: str) -> Optional[dict]:
    if topic not in s.internal:
        try:
            s.internal[topic] = admin.topic_internal_stats(topic)
        except TargetUnreachableError:
            raise
        except AdminError as exc:
            s.errors[f"internal stats of {topic}"] = _problem(exc)
            return None
    return s.internal[topic]


# -- the checks ---------------------------------------------------------------------------------

CheckFn = Callable[[TransactionsAdmin, Survey, dict], list[Finding]]
CHECKS: dict[str, CheckFn] = {}
CHECK_HELP: dict[str, str] = {}


def check(name: str, summary: str):
    def register(fn: CheckFn) -> CheckFn:
        CHECKS[name] = fn
        CHECK_HELP[name] = summary
        return fn
    return register


def _unknown(name: str, subject: str, reason: str, fix: str) -> Finding:
    return Finding(name, "unknown", subject, {"reason": reason}, "this check could not run, so it proves nothing", fix)


def _tc_disabled_unknown(name: str, s: Survey) -> list[Finding]:
    return [_unknown(name, "cluster", f"transaction coordinators answer 503: {s.tc_disabled}",
                     "see the `coordinators` finding")]


@check("coordinators", "every coordinator answers and is Ready; the assign topic has one partition per coordinator")
def check_coordinators(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    name = "coordinators"
    if s.tc_disabled is not None:
        return [Finding(name, "warning", "cluster", {"status": 503, "reason": s.tc_disabled},
                        "transactions are switched off on this broker (transactionCoordinatorEnabled=false): a client "
                        "that begins a transaction fails",
                        "if this cluster should run transactions: set transactionCoordinatorEnabled=true in broker.conf "
                        "on every broker, run `bin/pulsar initialize-transaction-coordinator-metadata` once, restart; "
                        "if it should not, nothing to do",
                        [])]
    if s.coordinators is None:
        return [_unknown(name, "cluster", s.errors.get("coordinators", "not read"),
                         "check the admin URL and credentials (super-user needed), then run doctor again")]
    out: list[Finding] = []
    ids = sorted(int(c["id"]) for c in s.coordinators)
    if not ids:
        out.append(Finding(name, "critical", "cluster", {"coordinators": 0},
                           "no transaction coordinator exists, so no transaction can begin",
                           "run `bin/pulsar initialize-transaction-coordinator-metadata -cs <zk> -c <cluster> "
                           "--initial-num-transaction-coordinators 16` once", [_ref(17513)]))
    for tc_id in ids:
        subject = f"coordinator {tc_id}"
        if tc_id in s.coordinator_errors and tc_id not in s.coordinator_stats:
            exc = s.coordinator_errors[tc_id]
            if exc.status in (401, 403):  # doctor's role may not read it: says nothing about the coordinator
                out.append(_unknown(name, subject, f"coordinatorStats?coordinatorId={tc_id}: {_problem(exc)}",
                                    "run doctor as a super-user (transaction admin calls need one)"))
                continue
            out.append(Finding(name, "critical", subject, {"call": f"coordinatorStats?coordinatorId={tc_id}",
                                                           "status": exc.status, "reason": exc.reason},
                               "the coordinator does not answer: transactions assigned to it cannot begin or end",
                               f"unload its partition so another broker loads it: `pulsar-admin topics unload "
                               f"{coordinator_assign_partition(tc_id)}`; check that broker's log for the coordinator's recovery",
                               [_ref(18923)]))
            continue
        stats = s.coordinator_stats.get(tc_id, {})
        state = stats.get("state")
        if state != "Ready" and state != "Initializing":  # Initializing is judged by the recovery check
            out.append(Finding(name, "critical", subject, {"state": state, "stats": stats},
                               f"the coordinator is {state}, not Ready: transactions assigned to it fail",
                               f"`pulsar-admin topics unload {coordinator_assign_partition(tc_id)}` to reload it; if it stays so, "
                               "read the owning broker's log", [_ref(18923)]))
    system = s.topics.get(TC_SYSTEM_NAMESPACE)
    if system is None and "coordinators" not in s.errors and ids:
        try:
            system = _names(admin.list_topics(TC_SYSTEM_NAMESPACE, True))
        except TargetUnreachableError:
            raise
        except (AdminError, ValueError) as exc:
            reason = _problem(exc) if isinstance(exc, AdminError) else f"an answer doctor cannot read: {exc}"
            out.append(_unknown(name, "transaction_coordinator_assign", f"listing {TC_SYSTEM_NAMESPACE}: {reason}",
                                "grant the doctor's role access to pulsar/system, or run it as a super-user"))
    if system is not None and ids:
        prefix = coordinator_assign_partition("")
        partitions = sorted(int(x[len(prefix):]) for x in system if x.startswith(prefix) and x[len(prefix):].isdigit())
        if partitions != list(range(len(ids))) or partitions != ids:
            out.append(Finding(name, "warning", "transaction_coordinator_assign",
                               {"partitions": partitions, "coordinators": ids},
                               "each partition of transaction_coordinator_assign hosts the coordinator of the same id; "
                               "a partition without a coordinator (or the reverse) means transactions routed there fail",
                               "compare `pulsar-admin topics get-partitioned-topic-metadata "
                               f"{TC_ASSIGN_TOPIC}` with `pulsar-admin "
                               "transactions coordinators-list`; grow with `pulsar-admin transactions "
                               "scale-transactionCoordinators -r N`", [_ref(17513)]))
    return out


@check("stuck-transactions", "OPEN past timeout + margin, COMMITTING/ABORTING too long, and the oldest open per coordinator")
def check_stuck(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    name = "stuck-transactions"
    if s.tc_disabled is not None:
        return _tc_disabled_unknown(name, s)
    if s.coordinators is None:
        return [_unknown(name, "cluster", f"coordinators: {s.errors.get('coordinators', 'not read')}",
                         "see the coordinators finding; no transaction was checked")]
    out: list[Finding] = []
    for tc_id, exc in sorted(s.txn_errors.items()):  # its transactions were not read: nothing proven about them
        out.append(_unknown(name, f"coordinator {tc_id}", f"slowTransactions?coordinatorId={tc_id}: {_problem(exc)}",
                            "see the coordinators finding; run doctor again; if it persists, read the owning "
                            "broker's log"))
    if s.now_ms is None:
        if s.transactions:
            out.append(_unknown(name, "cluster", s.errors["clock"],
                                "put doctor behind no proxy that strips Date headers; `pulsar-admin transactions "
                                "slow-transactions -t 1h` lists long-timeout transactions without judging their age"))
        return out
    oldest: dict[int, tuple[int, dict]] = {}
    unreadable = []
    for txn_text, meta in sorted(s.transactions.items()):
        try:
            txn = TxnId.parse(txn_text)
        except ValueError:
            unreadable.append(txn_text)  # listed, so it exists: skipping it silently would pass for "not stuck"
            continue
        status = meta.get("status")
        opened, timeout, missing = _txn_times(meta)
        if opened is None or timeout is None:
            if status == "OPEN" or status in ENDING_STATES:
                out.append(Finding(
                    name, "unknown", str(txn),
                    {"reason": f"the coordinator's answer has no usable {' or '.join(missing)} for this "
                               "transaction, so its age cannot be judged", "txnId": str(txn), "status": status,
                     "openTimestamp": meta.get("openTimestamp"), "timeoutAt": meta.get("timeoutAt")},
                    "this transaction could not be judged, so nothing is proven about it (and --fix leaves it alone)",
                    f"`txnadmin transactions transaction-metadata -m {txn.most_bits} -l {txn.least_bits}` to read it "
                    "again", []))
            continue
        age = s.now_ms - opened
        evidence = {"txnId": str(txn), "status": status, "openTimestamp": opened, "age": _age(age), "ageMs": age,
                    "timeoutMs": timeout, "owner": meta.get("owner"), "targetNowMs": s.now_ms, "clock": s.clock,
                    "producedPartitions": sorted(meta.get("producedPartitions") or {}),
                    "ackedSubscriptions": sorted(f"{topic} {sub}" for topic, subs in (meta.get("ackedPartitions") or {}).items()
                                                 for sub in subs)}
        if status == "OPEN":
            if txn.most_bits not in oldest or opened < oldest[txn.most_bits][0]:
                oldest[txn.most_bits] = (opened, evidence)
            if age > timeout + t["stuck-margin"]:
                out.append(Finding(
                    name, "critical", str(txn), dict(evidence, overdueMs=age - timeout),
                    f"OPEN {_age(age - timeout)} past its own timeout of {_age(timeout)}: the broker should have "
                    "aborted it; until something does, every topic it produced to holds its max read position (consumers "
                    "see nothing newer) and the coordinator log cannot be trimmed past it",
                    f"`txnadmin doctor --fix` (aborts every such transaction after showing the plan), or "
                    f"`txnadmin transactions abort-transaction -m {txn.most_bits} -l {txn.least_bits}`",
                    [_ref(19200), _ref(19201), _ref(19786)]))
        elif status in ENDING_STATES:
            # Ending starts no later than the timeout (at the timeout the broker aborts), so the time spent ending
            # is at least now - open - timeout: a lower bound, never an overestimate of a fresh commit.
            ending_for = age - timeout
            if ending_for >= t["ending"]:
                out.append(Finding(
                    name, "critical", str(txn), dict(evidence, endingForAtLeastMs=ending_for),
                    f"{status} for at least {_age(ending_for)}: the coordinator cannot deliver the end to every "
                    "topic and subscription, which stay blocked (max read position held, acks pending)",
                    f"unload the coordinator so it recovers and drives the end again: `pulsar-admin topics unload "
                    f"{coordinator_assign_partition(txn.most_bits)}`; upgrade to a release with PR #23551",
                    [_ref(23550), _ref(23551)]))
    if unreadable:
        out.append(_unknown(name, "transactions", f"{len(unreadable)} transaction(s) listed under an id that is not "
                            f"(mostBits,leastBits): {', '.join(repr(t) for t in unreadable[:5])}",
                            "`pulsar-admin transactions slow-transactions -t 0s` to read the listing by hand"))
    for tc_id, (_, evidence) in sorted(oldest.items()):
        if any(f.subject == evidence["txnId"] for f in out):
            continue
        pins = evidence["producedPartitions"]
        out.append(Finding(
            name, "info", f"coordinator {tc_id}", evidence,
            f"the oldest open transaction on coordinator {tc_id} ({evidence['txnId']}, {evidence['age']} old, timeout "
            f"{_age(evidence['timeoutMs'])}) pins that coordinator's log (it cannot be trimmed past it)"
            + (f" and the max read position of {len(pins)} topic(s)" if pins else ""),
            "nothing while it is within its timeout; its owner should commit or abort it", []))
    return out


@check("max-read-position", "a transaction buffer's maxReadPosition behind the last entry while an old transaction is ongoing")
def check_max_read_position(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    name = "max-read-position"
    out: list[Finding] = []
    by_topic: dict[str, list[tuple[int, str, dict]]] = {}
    unproven: dict[str, list[str]] = {}  # topic → ongoing transactions whose age the answer does not give
    for txn_text, meta in s.transactions.items():
        if meta.get("status") in ("OPEN",) + ENDING_STATES:
            opened, timeout, _ = _txn_times(meta)
            for topic in meta.get("producedPartitions") or {}:
                if opened is None or timeout is None:
                    unproven.setdefault(topic, []).append(txn_text)
                else:
                    by_topic.setdefault(topic, []).append((opened, txn_text, meta))
    for topic, stats in sorted(s.buffers.items()):
        ongoing = int(stats.get("ongoingTxnSize") or 0)
        mrp = _position(stats.get("maxReadPosition"))
        if not ongoing or mrp is None:
            continue
        internal = _internal(admin, s, topic)
        if internal is None:
            out.append(_unknown(name, topic, s.errors.get(f"internal stats of {topic}", "internal stats not read"),
                                "grant the doctor's role topic access (internalStats), then run again"))
            continue
        lac = _position(internal.get("lastConfirmedEntry"))
        if lac is None or mrp >= lac:
            continue
        evidence = {"maxReadPosition": stats.get("maxReadPosition"), "lastConfirmedEntry": internal.get("lastConfirmedEntry"),
                    "ongoingTxnSize": ongoing, "clock": s.clock}
        if lac[0] == mrp[0]:
            evidence["entriesBehind"] = lac[1] - mrp[1]
        known = sorted(by_topic.get(topic, []))
        if topic in unproven:
            out.append(_unknown(name, topic, f"the max read position {stats.get('maxReadPosition')} is behind "
                                f"{internal.get('lastConfirmedEntry')} and the age of {', '.join(sorted(unproven[topic]))} "
                                "is not in the coordinator's answer (no openTimestamp or timeoutAt)",
                                "see the stuck-transactions finding for that transaction, then run again"))
            continue
        if not known:
            if s.txn_errors or s.coordinators is None:
                out.append(_unknown(name, topic, f"{ongoing} ongoing transaction(s) hold the max read position "
                                    f"{stats.get('maxReadPosition')} behind {internal.get('lastConfirmedEntry')}, and "
                                    "not every coordinator could be read to tell how old they are",
                                    "see the coordinators finding, then run again"))
                continue
            out.append(Finding(
                name, "warning", topic, evidence,
                f"{ongoing} transaction(s) hold this topic's max read position, and no coordinator lists one of them "
                "as ongoing: either they began while doctor ran, or their coordinator lost them and the buffer waits "
                "for an end that will never come",
                f"run doctor again; if this stays, unload the topic so its buffer recovers: `pulsar-admin topics unload {topic}`",
                [_ref(19200), _ref(26234)]))
            continue
        opened, txn_text, meta = known[0]
        if s.now_ms is None:
            out.append(_unknown(name, topic, s.errors["clock"], "ages need the target's clock; see the stuck-transactions check"))
            continue
        age = s.now_ms - opened
        if age < t["stalled"]:
            continue
        txn = TxnId.parse(txn_text)
        overdue = age > int(meta.get("timeoutAt") or 0) + t["stuck-margin"]
        out.append(Finding(
            name, "critical" if overdue else "warning", topic,
            dict(evidence, oldestTxn=txn_text, oldestTxnStatus=meta.get("status"), oldestTxnAge=_age(age),
                 oldestTxnAgeMs=age, oldestTxnTimeoutMs=meta.get("timeoutAt"), owner=meta.get("owner")),
            f"consumers see nothing past {stats.get('maxReadPosition')} while {txn_text} ({meta.get('status')}, "
            f"{_age(age)} old) is ongoing; every message after it, transactional or not, waits",
            (f"abort it: `txnadmin transactions abort-transaction -m {txn.most_bits} -l {txn.least_bits}` "
             "(or `txnadmin doctor --fix` once it is past its timeout)" if meta.get("status") == "OPEN" else
             f"unload its coordinator so it drives the end again: `pulsar-admin topics unload {coordinator_assign_partition(txn.most_bits)}`")
            + "; lower the client's transaction timeout if long transactions are not intended",
            [_ref(19200), _ref(22943), _ref(26234)]))
    return out


def _recovering(stats: dict, now: Optional[int], threshold: float) -> Optional[dict]:
    state = stats.get("state")
    if not isinstance(state, str):
        raise ValueError(f"stats without a state: {str(stats)[:100]}")
    if state in READY_STATES:
        return None
    start = int(stats.get("recoverStartTime") or 0)
    end = int(stats.get("recoverEndTime") or 0)
    evidence = {"state": state, "recoverStartTime": start, "recoverEndTime": end}
    if state in ("Close", "Closing", "Closed"):
        return None  # being unloaded; not a recovery
    if start and end < start and now is not None:
        evidence.update(recoveringForMs=now - start, recoveringFor=_age(now - start))
        return evidence if now - start >= threshold else None
    if not start:
        return dict(evidence, note="not Ready and no recovery started")
    return None


def _recovery_severity(evidence: dict) -> str:
    """Critical when the clock proves the recovery overran; a component not Ready that never started recovering may
    be loading right now (nothing says for how long), so that one is unknown: run again."""
    return "unknown" if "note" in evidence else "critical"


@check("recovery", "buffers, pending-ack stores and coordinators whose recovery started and never ended")
def check_recovery(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    name = "recovery"
    out: list[Finding] = []
    if s.now_ms is None:
        out.append(_unknown(name, "cluster", s.errors["clock"], "recovery durations need the target's clock"))
    for tc_id, stats in sorted(s.coordinator_stats.items()):
        ev = _recovering(stats, s.now_ms, t["recovery"])
        if ev:
            out.append(Finding(name, _recovery_severity(ev), f"coordinator {tc_id}", ev,
                               "the coordinator's log replay has not finished: every transaction on it fails until it does",
                               f"read the owning broker's log for the replay error; unload "
                               f"`{coordinator_assign_partition(tc_id)}` to retry", [_ref(18923)]))
    for topic, stats in sorted(s.buffers.items()):
        ev = _recovering(stats, s.now_ms, t["recovery"])
        if ev:
            out.append(Finding(name, _recovery_severity(ev), topic, ev,
                               "the transaction buffer never finished recovering: producers and consumers of this topic hang",
                               f"unload the topic (`pulsar-admin topics unload {topic}`) to retry; if it repeats, read the "
                               "broker log around the snapshot reader (upgrade past the fixes below)",
                               [_ref(17040), _ref(17051), _ref(18833)]))
    for store in s.stores:
        if store.stats is None:
            continue
        ev = _recovering(store.stats, s.now_ms, t["recovery"])
        if ev:
            out.append(Finding(name, _recovery_severity(ev), f"{store.topic} {store.subscription}", dict(ev, store=store.name),
                               "the pending-ack store's replay never finished: consumers of this subscription time out "
                               "on subscribe and transactional acks fail",
                               f"unload the topic (`pulsar-admin topics unload {store.topic}`) to retry; a replay that "
                               "spins after trimming needs PR #26369",
                               [_ref(26368), _ref(26369), _ref(11772)]))
    return out


def _max_message_size(s: Survey) -> tuple[int, bool]:
    try:
        return int((s.runtime or {})["maxMessageSize"]), False
    except (KeyError, TypeError, ValueError):
        return DEFAULT_MAX_MESSAGE_SIZE, True


@check("snapshots", "Single snapshots that approach maxMessageSize; segment counts and snapshot ages")
def check_snapshots(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    name = "snapshots"
    out: list[Finding] = []
    limit, assumed = _max_message_size(s)
    segmented = []
    for topic, stats in sorted(s.buffers.items()):
        aborted = int(stats.get("totalAbortedTransactions") or 0)
        kind = stats.get("snapshotType")
        if kind == "Segment":
            segmented.append((topic, stats))
            continue
        if kind != "Single" or not aborted:
            continue
        estimate = aborted * BYTES_PER_ABORT
        if estimate < t["snapshot-share"] * limit:
            continue
        last = int(stats.get("lastSnapshotTimestamps") or 0)
        out.append(Finding(
            name, "critical" if estimate >= limit else "warning", topic,
            {"snapshotType": kind, "totalAbortedTransactions": aborted, "estimatedSnapshotBytes": estimate,
             "bytesPerAbortEstimate": BYTES_PER_ABORT, "maxMessageSize": limit, "maxMessageSizeAssumed": assumed,
             "lastSnapshotAge": _age(s.now_ms - last) if (last and s.now_ms) else None},
            f"the whole aborted-transaction list is one snapshot message, estimated at {estimate:,} bytes "
            f"({estimate / limit:.0%} of maxMessageSize {limit:,}); past the limit the snapshot cannot be written, "
            "and recovery replays the topic from further back each time",
            "turn on segmented snapshots (PIP-196): transactionBufferSegmentedSnapshotEnabled=true in broker.conf "
            "on every broker, then a rolling restart; all brokers must run a release that reads them",
            [_ref(16913), _ref(20235)]))
    if segmented:
        segments = sum(int((st.get("segmentsStats") or {}).get("segmentsSize") or 0) for _, st in segmented)
        ages = [s.now_ms - int(st["lastSnapshotTimestamps"]) for _, st in segmented
                if s.now_ms and int(st.get("lastSnapshotTimestamps") or 0)]
        out.append(Finding(name, "info", "segmented snapshots",
                           {"topics": len(segmented), "segments": segments,
                            "oldestLastSnapshot": _age(max(ages)) if ages else None},
                           "PIP-196 segments keep each snapshot message bounded", "nothing to do", [_ref(16913)]))
    return out


@check("batched-log", "PIP-160 flags against what the coordinators do; writer metrics and their tuning advice")
def check_batched_log(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    from ..admin.batchlog import tc_batch_log_stat

    name = "batched-log"
    out: list[Finding] = []
    if s.runtime is None:
        return [_unknown(name, "broker configuration", s.errors.get("runtime-config", "not read"),
                         "doctor needs GET /admin/v2/brokers/configuration/runtime (super-user)")]
    flags = {f: str(s.runtime.get(f, "false")).lower() == "true" for f in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG)}
    if s.tc_disabled is None and s.coordinators:
        try:
            stat = tc_batch_log_stat(admin, s.target)
        except TargetUnreachableError:
            raise
        except (AdminError, KeyError, TypeError) as exc:
            out.append(_unknown(name, "coordinators", f"coordinator internal stats: {exc}",
                                "run `txnadmin transactions get-txn-tc-batch-log-stat` to see the reason"))
        else:
            lagging = sorted(tc for tc, reopened in stat["reopenedSinceChange"].items() if not reopened)
            if lagging:
                out.append(Finding(
                    name, "warning", "coordinators",
                    {TC_BATCH_FLAG: flags[TC_BATCH_FLAG], "notReopenedSinceChange": lagging, "lastChange": stat["lastChange"],
                     "derived": stat["derived"]},
                    "these coordinators opened before the flag last changed, so they still write as the old value said; "
                    "a downgrade plan that trusts the flag would be wrong",
                    "reopen them: `txnadmin transactions set-txn-tc-batch-log --enable|--disable --reload`, or unload "
                    "each transaction_coordinator_assign partition", []))
    out += _pending_ack_batching(admin, s, flags)
    text, reason = _metrics(admin, s)
    if text is None:
        out.append(_unknown(name, "writer metrics", f"/metrics: {reason}", "expose /metrics to doctor's host, or run "
                            "`txnadmin metrics <broker>/metrics` where it is reachable"))
        return out
    from ..metrics import MetricsError, analyze_text

    try:
        reports = analyze_text(text, {})
    except MetricsError as exc:
        if exc.unreadable:  # a login page or garbage where /metrics should be: it says nothing about the writers
            out.append(_unknown(name, "writer metrics", f"/metrics: {exc}", "point doctor at the broker itself (not a "
                                "proxy or login page), or run `txnadmin metrics <broker>/metrics` where it is reachable"))
            return out
        out.append(Finding(name, "info", "writer metrics", {"flags": flags, "metrics": str(exc)},
                           "no batched writer has flushed since the broker started (batching off, or no traffic)",
                           "nothing to do", []))
        return out
    for report in reports:
        rec = report.recommendation
        out.append(Finding(name, "info", report.component,
                           {"flushes": report.flushes, "triggerShares": report.trigger_shares(),
                            "recordsPerEntry": round(report.records.mean, 2), "flags": flags},
                           rec.get("reason", ""), ", ".join(f"set {k}={v:g}" for k, v in rec.get("set", {}).items())
                           or "nothing to do", []))
    return out


def _metrics(admin: TransactionsAdmin, s: Survey) -> tuple[Optional[str], str]:
    """The broker's /metrics text, read once per run: (text, "") or (None, why not)."""
    if s.metrics is None:
        try:
            s.metrics = (admin.metrics_text(), "")
        except TargetUnreachableError:
            s.metrics = (None, "metrics endpoint unreachable")
        except AdminError as exc:
            s.metrics = (None, _problem(exc))
    return s.metrics


def _pending_ack_batching(admin: TransactionsAdmin, s: Survey, flags: dict) -> list[Finding]:
    """Judged as `downgrade` judges it: only a flag change txnadmin recorded tells which stores reopened since."""
    from ..admin.batchlog import pending_ack_batch_log_stat, recorded_change

    name = "batched-log"
    if not recorded_change(s.target, PENDING_ACK_BATCH_FLAG):
        return [Finding(name, "info", "pending-ack stores", {PENDING_ACK_BATCH_FLAG: flags[PENDING_ACK_BATCH_FLAG],
                                                             "recordedChange": None},
                        "txnadmin recorded no change of the flag on this target, so every store is taken to follow "
                        "it since its last open; a change made with pulsar-admin is invisible here",
                        "change the flag with `txnadmin transactions set-txn-pending-ack-batch-log` so doctor and "
                        "downgrade can tell which stores reopened since", [])]
    stat = pending_ack_batch_log_stat(admin, s.target)
    lagging = [f"{r['topic']} {r['subscription']}" for r in stat["subscriptionArray"] if not r["reopenedSinceChange"]]
    if not lagging:
        return []
    return [Finding(name, "warning", "pending-ack stores",
                    {PENDING_ACK_BATCH_FLAG: flags[PENDING_ACK_BATCH_FLAG], "notReopenedSinceChange": lagging[:50],
                     "count": len(lagging), "lastChange": stat["lastChange"], "derived": stat["derived"]},
                    "these stores opened before the flag last changed and still write as the old value said",
                    "reopen them: `txnadmin transactions set-txn-pending-ack-batch-log --enable|--disable --reload`, "
                    "or unload their topics", [])]


@check("leftovers", "pending-ack stores whose topic or subscription no longer exists; idle stores (from /metrics)")
def check_leftovers(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    name = "leftovers"
    out: list[Finding] = []
    why = ("a pending-ack store outlives its subscription: its managed ledger keeps ledgers (and bookie space) and "
           "it shows up in every store listing, including a downgrade's")
    for store in s.stores:
        gone: Optional[dict[str, Any]] = None
        if store.topic is None:
            gone = {"store": store.name, "missing": "topic"}
        elif isinstance(store.error, NotFoundError):
            internal = _internal(admin, s, store.topic)
            if internal is not None and store.subscription not in (internal.get("cursors") or {}):
                gone = {"store": store.name, "topic": store.topic, "missing": "subscription",
                        "subscriptions": sorted(internal.get("cursors") or {})}
        # a store that answered anything but 404 is reported by `coverage`, which runs with this check
        if gone:
            out.append(Finding(name, "warning", store.name, gone, why,
                               f"`pulsar-admin topics delete {store.name}` (after checking the subscription is really gone)",
                               [_ref(11000), _ref(11023)]))
    out += _idle_stores(admin, s, t)
    return out


def _idle_stores(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    """Stores whose subscription ended no transaction since the broker started, when that start is old enough.

    Proof, not absence of evidence: only with /metrics exporting the per-subscription pending-ack counters
    (``pulsar_txn_tp_committed_count`` / ``_aborted_count``, topic-level metrics on) for at least one
    subscription, and the broker's ``process_start_time_seconds``; otherwise nothing is claimed."""
    from prometheus_client.parser import text_string_to_metric_families

    live = [store for store in s.stores if store.stats is not None]
    if not live or s.now_ms is None:
        return []
    text, _ = _metrics(admin, s)
    if not text:
        return []
    active: dict[tuple[Optional[str], Optional[str]], float] = {}
    started = None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "process_start_time_seconds":
                    started = sample.value * 1000
                elif sample.name.startswith(("pulsar_txn_tp_committed_count", "pulsar_txn_tp_aborted_count")) \
                        and not sample.name.endswith("_created"):
                    key = (sample.labels.get("topic", ""), sample.labels.get("subscription", ""))
                    active[key] = active.get(key, 0.0) + sample.value
    except ValueError:
        return []  # not an exposition doctor can parse; the batched-log check reports the metrics
    if started is None or not active or s.now_ms - started < t["idle"]:
        return []
    idle = sorted(f"{store.topic} {store.subscription}" for store in live
                  if active.get((store.topic, store.subscription), 0.0) == 0.0)
    if not idle:
        return []
    return [Finding("leftovers", "info", "idle pending-ack stores",
                    {"stores": len(idle), "examples": idle[:10], "brokerUp": _age(s.now_ms - started),
                     "source": "pulsar_txn_tp_committed_count / pulsar_txn_tp_aborted_count on /metrics"},
                    f"{len(idle)} subscription(s) with a pending-ack store ended no transaction in the "
                    f"{_age(s.now_ms - started)} since this broker started; each store still holds a managed ledger "
                    "and is reopened (replayed) whenever its topic loads",
                    "nothing while the subscription may use transactions again; a store only goes away with its "
                    "subscription (`pulsar-admin topics unsubscribe`), never delete it under a live subscription",
                    [_ref(11000)])]


@check("coverage", "what the survey could not read: namespaces, topics, buffers (unknown), topics not loaded (info)")
def check_coverage(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    """A check that could not read part of the target proves nothing about that part: say which part, and why."""
    name = "coverage"
    out: list[Finding] = []
    if s.lost:
        out.append(_unknown(name, "target", f"the target stopped answering mid-run: {s.lost}",
                            "check the broker and the network, then run doctor again; only what was read before "
                            "was judged"))
    for area, reason in sorted(s.errors.items()):
        if area == "namespaces" or area.startswith(("namespaces of ", "topics of ")):
            out.append(_unknown(name, area, reason, "grant doctor's role access there (tenant admin or super-user), "
                                "then run again; nothing in it was checked"))
    by_status: dict[int, list[str]] = {}
    for topic, exc in s.buffer_errors.items():
        by_status.setdefault(exc.status, []).append(topic)
    unread: dict[int, list[Store]] = {}
    for store in s.stores:
        if store.error is not None and store.stats is None and not isinstance(store.error, NotFoundError):
            unread.setdefault(store.error.status, []).append(store)
    for status, stores in sorted(unread.items()):
        names = sorted(store.name for store in stores)
        out.append(Finding(name, "unknown", "pending-ack stores",
                           {"status": status, "stores": len(names), "examples": names[:5],
                            "reason": _problem(stores[0].error) if stores[0].error else ""},
                           "these pending-ack stores could not be read, so the recovery and leftovers checks say "
                           "nothing about them", "run again; for 401/403 grant doctor's role access to those topics",
                           []))
    for status, topics in sorted(by_status.items()):
        topics.sort()
        evidence = {"status": status, "topics": len(topics), "examples": topics[:5],
                    "reason": s.buffer_errors[topics[0]].reason}
        if status == 404:
            out.append(Finding(name, "info", "topics not loaded", evidence,
                               "a topic no broker has loaded holds no transaction buffer in memory, so nothing on it "
                               "can be stalled or recovering; its buffer was not read", "nothing to do", []))
        else:
            out.append(Finding(name, "unknown", "transaction buffers", evidence,
                               "these topics' transaction buffers could not be read, so the buffer checks say nothing "
                               "about them", "run again; for 401/403 grant doctor's role access to those namespaces",
                               []))
    return out


# Known transaction bugs and the releases that fixed them. ``fixed`` maps a release line (major, minor) to the first
# fixed patch release of that line; lines newer than every key are fixed, older ones are not. Where only one line is
# listed, backports to older lines were not verified: the finding says to check the line's release notes.
# Sources per entry in docs/doctor.md (which says what was verified and how).
KNOWN_BUGS: list[dict] = [
    {"ref": 19200, "fix": 19201, "fixed": {(2, 9): (2, 9, 5), (2, 10): (2, 10, 4), (2, 11): (2, 11, 1)},
     "what": "timed-out transactions never end after a coordinator recovers (max read position frozen)"},
    {"ref": 17040, "fix": 18833, "fixed": {(2, 9): (2, 9, 5), (2, 10): (2, 10, 4), (2, 11): (2, 11, 1)},
     "what": "transaction buffer recovery blocked in the snapshot reader's readNext (transactional produce hangs)"},
    {"ref": 22943, "fix": 23189, "fixed": {(3, 0): (3, 0, 7), (3, 3): (3, 3, 2), (4, 0): (4, 0, 0)},
     "what": "high CPU from a tailing read while a transaction is ongoing (mitigated; the full fix, PR #22944, is open)"},
    {"ref": 23550, "fix": 23551, "fixed": {(3, 0): (3, 0, 15), (4, 0): (4, 0, 8), (4, 1): (4, 1, 2)},
     "what": "transactions stuck in COMMITTING"},
    {"ref": 24945, "fix": None, "fixed": {(4, 0): (4, 0, 8), (4, 1): (4, 1, 2)},
     "what": "transactional sends fail for good when they race the buffer's first snapshot"},
]


def _is_fixed(version: tuple[int, int, int], fixed: dict) -> bool:
    line = version[:2]
    if line in fixed:
        return version >= fixed[line]
    return line > max(fixed)


def _version(text: str) -> Optional[tuple[int, int, int]]:
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


@check("versions", "broker versions against known transaction bugs; Pulsar 5 scalable-topic transactions")
def check_versions(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    name = "versions"
    if s.versions is None:
        return [_unknown(name, "brokers", s.errors.get("versions", "not read"), "GET /admin/v2/brokers/version")]
    out: list[Finding] = []
    for broker, text in sorted(s.versions.items()):
        version = _version(text)
        if version is None:
            out.append(_unknown(name, broker, f"version {text!r} is not x.y.z", "compare by hand with docs/doctor.md"))
            continue
        for bug in KNOWN_BUGS:
            if _is_fixed(version, bug["fixed"]):
                continue
            fixed = [".".join(map(str, v)) for _, v in sorted(bug["fixed"].items())]
            out.append(Finding(
                name, "warning", broker, {"version": text, "fixedIn": fixed, "ref": bug["ref"]},
                f"{text} does not have the fix for: {bug['what']}",
                f"upgrade to {' / '.join(fixed)} or later (a patch release of your line may backport "
                f"{'PR #' + str(bug['fix']) if bug['fix'] else 'PR #' + str(bug['ref'])}: check its release notes)",
                [_ref(bug["ref"])] + ([_ref(bug["fix"])] if bug["fix"] else [])))
        if version >= (5, 0, 0):
            out.append(Finding(
                name, "info", broker, {"version": text},
                "Pulsar 5 runs a second coordinator for scalable (segment://) topics (PIP-473) whose transactions "
                "live in the metadata store; no admin API shows them, so doctor did not check them (not 'healthy')",
                "inspect /txn/id and /txn/op in the metadata store by hand", []))
    return out


# Checksums an older RocksDB cannot read, with the release that introduced them (RocksDB HISTORY.md).
ROCKSDB_NEW_CHECKSUMS = {"kXXH3": "6.27.0"}
ROCKSDB_FORMAT_6 = "8.6.0"  # format_version=6 (RocksDB 9's default): unreadable before 8.6.0 (RocksDB 9.0.0 notes)
TABLE_SECTION = "TableOptions/BlockBasedTable"


def _rocksdb_options(path: Path) -> dict[str, dict[str, str]]:
    """A RocksDB OPTIONS-* (or *_rocksdb.conf) file: ``[Section "name"]`` headers and ``key=value`` lines."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].split(" ", 1)[0], {})
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key.strip()] = value.strip()
    return sections


def _options_number(path: Path) -> int:
    tail = path.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


@check("bookie-rocksdb", "(with --bookie-dir) RocksDB databases an older BookKeeper cannot open; the conf files too")
def check_bookie_rocksdb(admin: TransactionsAdmin, s: Survey, t: dict) -> list[Finding]:
    name = "bookie-rocksdb"
    root = s.bookie_dir
    if root is None:
        return []
    out: list[Finding] = []
    try:
        databases = sorted({p.parent for p in root.rglob("OPTIONS-*") if (p.parent / "CURRENT").exists()})
        confs = sorted(root.rglob("*_rocksdb.conf"))
    except OSError as exc:
        return [_unknown(name, str(root), f"cannot read: {exc}", "run doctor where the bookie's files are readable")]
    configured: dict[str, dict[str, str]] = {}
    for conf in confs:
        try:
            table = _rocksdb_options(conf).get(TABLE_SECTION, {})
        except OSError as exc:
            out.append(_unknown(name, str(conf), f"cannot read: {exc}", "check the file's permissions"))
            continue
        configured[conf.name] = {k: table[k] for k in ("checksum", "format_version") if k in table}
    if not databases:
        out.append(_unknown(name, str(root), "no RocksDB database (a directory with CURRENT and OPTIONS-*) found",
                            "point --bookie-dir at the bookie's ledger directory (its current/ledgers and "
                            "current/locations hold the databases)"))
    for db in databases:
        latest = max(db.glob("OPTIONS-*"), key=_options_number)
        try:
            options = _rocksdb_options(latest)
        except OSError as exc:
            out.append(_unknown(name, str(db), f"{latest.name}: cannot read ({exc})", "check the file's permissions"))
            continue
        table = options.get(TABLE_SECTION, {})
        evidence = {"database": str(db), "optionsFile": latest.name,
                    "writtenBy": options.get("Version", {}).get("rocksdb_version"),
                    "checksum": table.get("checksum"), "format_version": table.get("format_version"),
                    "confFiles": configured}
        checksum = table.get("checksum")
        try:
            fmt = int(table.get("format_version", "0"))
        except ValueError:
            fmt = 0
        needs = []
        if checksum in ROCKSDB_NEW_CHECKSUMS:
            needs.append((ROCKSDB_NEW_CHECKSUMS[checksum], f"checksum {checksum}"))
        if fmt >= 6:
            needs.append((ROCKSDB_FORMAT_6, f"format_version={fmt}"))
        if needs:
            since = max(v for v, _ in needs)
            what = " and ".join(w for _, w in needs)
            out.append(Finding(
                name, "warning", str(db), dict(evidence, readableFromRocksDB=since),
                f"the existing files use {what}, which RocksDB before {since} cannot read (an older "
                "bookie fails to open the database, e.g. 'unknown checksum type 4'); the *_rocksdb.conf files only "
                "govern files written from now on, so changing them alone does not make the existing ones readable",
                f"before downgrading BookKeeper, check that its RocksDB is {since} or newer; otherwise set "
                "checksum=kxxHash and format_version=5 in the *_rocksdb.conf files (BookKeeper 4.16+ reads them; "
                "apache/bookkeeper#3793), have the bookie rewrite its databases (a full compaction), and run doctor "
                "again until the OPTIONS files say so",
                [_ref(22051)]))
        else:
            out.append(Finding(name, "info", str(db), evidence,
                               "the existing files use no checksum or format an older RocksDB lacks", "nothing to do",
                               [_ref(22051)]))
    return out


# -- running ------------------------------------------------------------------------------------


@dataclass
class Report:
    target: str
    checked_at: int
    clock: str
    checks: list[str]
    findings: list[Finding]
    fix: Optional[dict] = None  # with --fix: the plan, and what applying it did
    lost: Optional[str] = None  # the target stopped answering mid-run


    def counts(self) -> dict[str, int]:
        return {sev: sum(1 for f in self.findings if f.severity == sev) for sev in SEVERITIES}

    def healthy(self, strict: bool = False) -> bool:
        bad = {"warning", "critical"} | ({"unknown"} if strict else set())
        return not any(f.severity in bad for f in self.findings)

    def to_json(self, strict: bool = False) -> dict:
        return {"target": self.target,
                "checkedAt": datetime.fromtimestamp(self.checked_at / 1000, timezone.utc).isoformat(timespec="seconds"),
                "findings": [f.to_json() for f in self.findings],
                "summary": dict(self.counts(), checks=self.checks, clock=self.clock, strict=strict,
                                healthy=self.healthy(strict) and self.lost is None,
                                **({"targetLost": self.lost} if self.lost else {})),
                **({"fix": self.fix} if self.fix is not None else {})}


def exit_code(report: Report, strict: bool = False) -> int:
    """1 when anything is wrong (it wins); else 3 when the target stopped answering mid-run; else 0."""
    if not report.healthy(strict):
        return EXIT_UNHEALTHY
    return EXIT_UNREADABLE if report.lost else EXIT_HEALTHY


# Checks that judge what the topic survey read (buffers, pending-ack stores): `coverage`, which reports what that
# survey could not read (a 403 on a namespace, buffers or stores that did not answer), always runs with them, or
# `--only recovery` on a namespace doctor may not list would pass for a clean run.
TOPIC_CHECKS = ("max-read-position", "recovery", "snapshots", "leftovers")


def select_checks(only: Optional[list[str]], bookie_dir: Optional[Path] = None) -> list[str]:
    names = [n for n in CHECKS if n != "bookie-rocksdb" or bookie_dir is not None]
    if not only:
        return names
    unknown = [n for n in only if n not in CHECKS]
    if unknown:
        raise DoctorError(f"--only {','.join(unknown)}: no such check (checks: {', '.join(CHECKS)})", 2)
    if "bookie-rocksdb" in only and bookie_dir is None:
        raise DoctorError("--only bookie-rocksdb needs --bookie-dir DIR", 2)
    chosen = set(only) | ({"coverage"} if set(only) & set(TOPIC_CHECKS) else set())
    return [n for n in CHECKS if n in chosen]


def run(admin: TransactionsAdmin, target: str, only: Optional[list[str]] = None,
        thresholds: Optional[dict[str, float]] = None, concurrency: int = 16, progress: Progress = None,
        bookie_dir: Optional[Path] = None) -> Report:
    """Survey the target once and run the selected checks on it. DoctorError when it cannot be read at all."""
    names = select_checks(only, bookie_dir)
    t = parse_thresholds([]) if thresholds is None else thresholds
    s = survey(admin, concurrency, progress, set(names))
    s.bookie_dir, s.target = bookie_dir, target
    if not s.answered and s.lost is None:
        # Nothing answered as a broker does (another web server on that port, a login page, a 500 everywhere): a
        # report of "unknown" findings would exit 0 and pass for healthy. The target cannot be read at all.
        reasons = "; ".join(f"{area}: {reason}" for area, reason in sorted(s.errors.items()) if area != "clock")
        raise DoctorError(f"cannot read the target: no admin call answered as a Pulsar broker does ({reasons[:300]})")
    findings: list[Finding] = []
    for name in names:
        try:
            findings += CHECKS[name](admin, s, t)
        except TargetUnreachableError as exc:
            s.lost = s.lost or exc.reason
            findings.append(_unknown(name, "target", f"the target stopped answering: {exc.reason}",
                                     "check the broker and the network, then run doctor again"))
        except MALFORMED as exc:  # an answer not shaped as Pulsar's: this check proves nothing, the others still run
            findings.append(_unknown(name, "target", f"an answer doctor cannot read: {_malformed(exc)}",
                                     "compare the target's admin API with Pulsar's (docs/doctor.md lists the calls)"))
    order = {sev: i for i, sev in enumerate(reversed(SEVERITIES))}
    findings.sort(key=lambda f: (order[f.severity], f.check, f.subject))
    return Report(target, s.now_ms if s.now_ms is not None else int(time.time() * 1000),
                  s.clock, names, findings, lost=s.lost)


# -- --fix --------------------------------------------------------------------------------------


def fix_plan(report: Report) -> list[TxnId]:
    """Transactions doctor may abort: OPEN past their timeout plus the margin, judged on the target's clock."""
    if report.clock != "target":
        raise DoctorError("cannot plan a fix: the target's clock is unknown (no Date header), and doctor will not "
                          "judge timeouts on this machine's clock", EXIT_UNREADABLE)
    # Only findings that carry their own proof: the broker's open time and a positive overdue on its clock.
    return sorted({TxnId.parse(f.subject) for f in report.findings
                   if f.check == "stuck-transactions" and f.severity == "critical" and f.evidence.get("status") == "OPEN"
                   and f.evidence.get("clock") == "target" and isinstance(f.evidence.get("openTimestamp"), int)
                   and f.evidence["openTimestamp"] > 0 and f.evidence.get("overdueMs", 0) > 0})


def apply_fix(admin: TransactionsAdmin, plan: list[TxnId]) -> list[dict]:
    """Abort each planned transaction; one that ended meanwhile is reported, not an error."""
    results = []
    for txn in plan:
        try:
            admin.abort_transaction(txn)
            results.append({"txnId": str(txn), "result": "aborted"})
        except TargetUnreachableError:
            raise
        except AdminError as exc:
            results.append({"txnId": str(txn), "result": "not aborted", "reason": _problem(exc)})
    return results
