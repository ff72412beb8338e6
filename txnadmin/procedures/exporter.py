"""`txnadmin exporter`: what `list`, `find-hanging`, `doctor` and the downgrade checklist know, as Prometheus metrics.

One poll reads the target once through doctor's survey (a :class:`~txnadmin.admin.cluster.ClusterView` that records
what it could not read), runs `find-hanging`'s rule and, when asked, `downgrade status` (never saving the checklist)
and doctor's checks on that same survey; it turns the answers into an immutable :class:`Snapshot`. The poller thread
swaps the snapshot in with one assignment, and the collector serves whatever snapshot is current: a scrape never
waits on the cluster. Nothing here judges anything itself: each number is counted from what a procedure said.

A poll that fails (the target unreachable, or lost mid-poll) leaves the last snapshot in place, so its values go on
being served with their age (``txnadmin_poll_age_seconds``), and counts one error. A poll that read the
target but not all of it publishes what it read, leaves out the series it could not prove (never a false 0), counts
an error and says what was missing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from ..admin.cluster import BATCH_FLAGS, ClusterView, flag_is_on
from ..admin.hanging import find_hanging
from ..admin.protocol import AdminError, TargetUnreachableError, TransactionsAdmin, TxnId
from . import doctor
from .doctor.checks.common import txn_times
from .doctor.checks.recovery import recovering
from .doctor.knowledge import ENDING_STATES
from .doctor.survey import BUFFERS, MALFORMED, NO_CLOCK, malformed, problem
from .downgrade import DowngradeError, Waiting, status as downgrade_status
from .downgrade.checklist import StateError, load_state

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from ..admin.target import Target

log = logging.getLogger(__name__)

PREFIX = "txnadmin_"
DEFAULT_PORT = 9721
DEFAULT_INTERVAL_S = 15.0
DEFAULT_TOP = 20
POLL_NICENESS = 10  # the poll process's CPU priority below the /metrics server's
# States a coordinator holds a transaction in until it ends: reported per coordinator even at 0, so a rule can
# compare against a series that exists.
LIVE_STATES = ("OPEN",) + ENDING_STATES
WAITING_REASONS = tuple(reason for reason in Waiting if reason is not Waiting.DONE)  # each reported even at 0
SEVERITIES = doctor.SEVERITIES

# name → (type, HELP). Every series the exporter can serve is here, with its help text.
METRICS: dict[str, tuple[str, str]] = {
    "transactions_open": ("gauge", "Transactions a coordinator holds that have not ended, by coordinator and state "
                                   "(OPEN, COMMITTING, ABORTING)."),
    "oldest_open_transaction_age_seconds": ("gauge", "Age of the oldest OPEN transaction on each coordinator, on the "
                                                     "target's clock (0 when none is open)."),
    "transactions_past_timeout": ("gauge", "OPEN transactions past their own timeout by more than doctor's "
                                           "stuck-margin: what `txnadmin doctor --fix` aborts."),
    "transactions_hanging": ("gauge", "Transactions `txnadmin transactions find-hanging` reports: open longer than "
                                      "--max-transaction-timeout, or touching partitions that no longer exist."),
    "transactions_stuck_ending": ("gauge", "Transactions held in COMMITTING or ABORTING for at least doctor's ending "
                                           "threshold (doctor's stuck-transactions rule)."),
    "transaction_buffers_recovering": ("gauge", "Transaction buffers not Ready and not closing: recovering, or never "
                                                "started recovering."),
    "transaction_buffer_recovery_age_seconds": ("gauge", "Seconds since a recovering transaction buffer started its "
                                                         "recovery, for the --top longest recoveries."),
    "max_read_position_held_seconds": ("gauge", "Age of the oldest ongoing transaction that holds a topic's "
                                                "maxReadPosition, for the --top topics held longest."),
    "downgrade_checklist_loaded": ("gauge", "1 when --checklist names a recorded downgrade checklist that could be "
                                            "read, else 0."),
    "downgrade_logs": ("gauge", "Logs of the recorded downgrade, done or waiting (as `txnadmin downgrade status`)."),
    "downgrade_waiting_logs": ("gauge", "Logs of the recorded downgrade still waiting, by why they wait."),
    "batching_enabled": ("gauge", "1 when a broker's runtime configuration has a transaction batching flag on."),
    "doctor_findings": ("gauge", "`txnadmin doctor` findings by check and severity."),
    "poll_age_seconds": ("gauge", "Seconds since the poll whose values are served finished (since the exporter "
                                  "started, before any poll did)."),
    "poll_duration_seconds": ("gauge", "How long the last poll took, whether it finished or failed."),
    "poll_errors": ("counter", "Polls that failed (the last values stay served, with their age) or read only part "
                               "of the target (what was not read is left out)."),
    "last_poll_success_timestamp_seconds": ("gauge", "Unix time at which the last poll that read everything "
                                                     "finished (the exporter's start time until one has)."),
}

Labels = tuple[tuple[str, str], ...]
Say = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """What a poll reads and how it judges (see `txnadmin exporter --help`)."""

    top: int = DEFAULT_TOP
    checklist: Optional[Path] = None
    doctor: bool = False
    thresholds: dict[str, float] = field(default_factory=lambda: doctor.parse_thresholds([]))
    max_transaction_timeout_minutes: float = 15.0
    concurrency: int = 16


@dataclass(frozen=True)
class Snapshot:
    """One poll's values: metric name (without the prefix) → its samples. Never changed once made."""

    values: dict[str, tuple[tuple[Labels, float], ...]]
    finished: float  # time.monotonic() when the poll ended
    missing: tuple[str, ...] = ()  # what the poll could not read: those series are left out


class PollError(Exception):
    """A poll that published nothing: the reason, in one line."""


def _labels(**pairs: object) -> Labels:
    return tuple((k, str(v)) for k, v in pairs.items())


class _Values:
    def __init__(self) -> None:
        self.samples: dict[str, list[tuple[Labels, float]]] = {}
        self.missing: list[str] = []

    def add(self, name: str, value: float, **labels: object) -> None:
        self.samples.setdefault(name, []).append((_labels(**labels), float(value)))

    def lack(self, what: str) -> None:
        self.missing.append(what)


def poll(admin: TransactionsAdmin, target: str, options: Options) -> Snapshot:
    """Read the target once and count what the procedures say. PollError when nothing could be published."""
    out = _Values()
    names = doctor.select_checks(None) if options.doctor else ["stuck-transactions"]
    try:
        # without --doctor, the buffers but not the pending-ack stores: no metric here judges a store
        s = doctor.survey(admin, target, set(names) | {BUFFERS}, options.concurrency)
    except doctor.DoctorError as exc:
        raise PollError(str(exc)) from None
    if not s.answered and s.lost is None:
        raise PollError("cannot read the target: no admin call answered as a Pulsar broker does")
    if s.lost is not None:  # half a cluster would replace whole values: the last poll's stay, with their age
        raise PollError(f"the target stopped answering mid-poll: {s.lost}")
    _transactions(s, options, out)
    _buffers(s, options, out)
    _hanging(admin, s, options, out)
    if options.checklist is not None:
        _checklist(admin, target, options, out)
    else:
        out.add("downgrade_checklist_loaded", 0)
    if options.doctor:
        _doctor(s, target, names, options, out)
    return Snapshot({name: tuple(samples) for name, samples in out.samples.items()}, time.monotonic(),
                    tuple(out.missing))


def _transactions(s: "doctor.Survey", options: Options, out: _Values) -> None:
    """Per coordinator whose transactions were read: counts by state, the oldest OPEN one's age, and what doctor's
    stuck-transactions rule finds (past the timeout, stuck ending)."""
    if s.tc_disabled is not None:
        return  # coordinators switched off answer 503: there are no transactions to count
    if s.coordinators is None:
        out.lack(f"coordinators: {s.errors.get('coordinators', 'not read')}")
        return
    try:
        ids = sorted(int(c["id"]) for c in s.coordinators)
    except MALFORMED as exc:
        out.lack(f"coordinators: {malformed(exc)}")
        return
    for tc_id, error in sorted(s.txn_errors.items()):
        out.lack(f"transactions of coordinator {tc_id}: {problem(error)}")
    read = [i for i in ids if i not in s.txn_errors]
    states: dict[int, dict[str, int]] = {i: dict.fromkeys(LIVE_STATES, 0) for i in read}
    oldest: dict[int, int] = {}
    for txn_text, meta in s.transactions.items():
        try:
            tc_id = TxnId.parse(txn_text).most_bits
            status = str(meta.get("status"))
        except (ValueError, AttributeError):
            out.lack(f"transaction {txn_text!r}: not an id doctor can read")
            continue
        if tc_id not in states:
            continue
        states[tc_id][status] = states[tc_id].get(status, 0) + 1
        opened, _, _ = txn_times(meta)
        if status == "OPEN" and opened is not None:
            oldest[tc_id] = min(opened, oldest.get(tc_id, opened))
    for tc_id, counts in states.items():
        for state, n in sorted(counts.items()):
            out.add("transactions_open", n, coordinator=tc_id, state=state)
    if s.now_ms is None:
        out.lack(s.errors.get("clock", NO_CLOCK))
        return  # ages and timeouts are judged on the target's clock only
    for tc_id in read:
        age_ms = s.now_ms - oldest[tc_id] if tc_id in oldest else 0
        out.add("oldest_open_transaction_age_seconds", max(0, age_ms) / 1000, coordinator=tc_id)
    past = dict.fromkeys(read, 0)
    ending = {(i, state): 0 for i in read for state in ENDING_STATES}
    for finding in doctor.CHECKS["stuck-transactions"](s, options.thresholds):
        if finding.severity == "unknown":
            out.lack(f"stuck-transactions {finding.subject}: {finding.evidence.get('reason')}")
        if finding.severity != "critical":
            continue
        tc_id = TxnId.parse(finding.subject).most_bits
        state = str(finding.evidence.get("status"))
        if state == "OPEN" and tc_id in past:
            past[tc_id] += 1
        elif (tc_id, state) in ending:
            ending[(tc_id, state)] += 1
    for tc_id, n in past.items():
        out.add("transactions_past_timeout", n, coordinator=tc_id)
    for (tc_id, state), n in ending.items():
        out.add("transactions_stuck_ending", n, coordinator=tc_id, state=state)


def _buffers(s: "doctor.Survey", options: Options, out: _Values) -> None:
    """Recovering buffers (doctor's recovery rule, at any age) and topics whose maxReadPosition an ongoing
    transaction holds, each bounded to the --top worst."""
    for topic, exc in sorted(s.buffer_errors.items())[:5]:
        out.lack(f"transaction buffer of {topic}: {problem(exc)}")
    if len(s.buffer_errors) > 5:
        out.lack(f"… and {len(s.buffer_errors) - 5} more transaction buffers")
    for area, reason in sorted(s.errors.items()):
        if area == "namespaces" or area.startswith(("namespaces of ", "topics of ")):
            out.lack(f"{area}: {reason}")
    recovering_count = 0
    ages: list[tuple[float, str]] = []
    held: list[tuple[float, str]] = []
    oldest_on: dict[str, int] = {}
    for meta in s.transactions.values():
        if meta.get("status") in LIVE_STATES:
            opened, _, _ = txn_times(meta)
            for topic in meta.get("producedPartitions") or {}:
                if opened is not None:
                    oldest_on[topic] = min(opened, oldest_on.get(topic, opened))
    for topic, stats in s.buffers.items():
        try:
            evidence = recovering(stats, s.now_ms, 0)
            ongoing = int(stats.get("ongoingTxnSize") or 0)
        except MALFORMED as exc:
            out.lack(f"transaction buffer of {topic}: {malformed(exc)}")
            continue
        if evidence is not None:
            recovering_count += 1
            if "recoveringForMs" in evidence:
                ages.append((evidence["recoveringForMs"] / 1000, topic))
        if ongoing and topic in oldest_on and s.now_ms is not None:
            held.append((max(0, s.now_ms - oldest_on[topic]) / 1000, topic))
    if not s.buffers and not s.topics and "namespaces" in s.errors:
        return  # nothing listed: no count proven
    out.add("transaction_buffers_recovering", recovering_count)
    for seconds, topic in sorted(ages, key=lambda a: (-a[0], a[1]))[:options.top]:
        out.add("transaction_buffer_recovery_age_seconds", seconds, topic=topic)
    for seconds, topic in sorted(held, key=lambda h: (-h[0], h[1]))[:options.top]:
        out.add("max_read_position_held_seconds", seconds, topic=topic)


def _hanging(admin: TransactionsAdmin, s: "doctor.Survey", options: Options, out: _Values) -> None:
    """`find-hanging`'s rule, judged on the target's clock as the survey read it. Pulsar fails the listing of every
    coordinator when one cannot answer: then each coordinator the survey read is asked on its own."""
    if s.tc_disabled is not None or s.coordinators is None or s.now_ms is None:
        return  # the missing clock or coordinators were said by _transactions
    read = sorted(int(c["id"]) for c in s.coordinators if int(c["id"]) not in s.txn_errors)
    counts = dict.fromkeys(read, 0)

    def rows(coordinator_id: Optional[int]) -> Optional[list[dict]]:
        try:
            return find_hanging(admin, options.max_transaction_timeout_minutes, coordinator_id, now_ms=s.now_ms)
        except TargetUnreachableError:
            raise
        except AdminError as exc:
            if coordinator_id is not None:
                out.lack(f"find-hanging on coordinator {coordinator_id}: {problem(exc)}")
            return None  # all coordinators at once: asked again one by one below

    found = rows(None) if not s.txn_errors else None
    if found is None:
        found = []
        for tc_id in read:
            one = rows(tc_id)
            if one is None:
                counts.pop(tc_id)
            else:
                found += one
    for row in found:
        tc_id = int(row["coordinatorId"])
        if tc_id in counts:
            counts[tc_id] += 1
    for tc_id, n in sorted(counts.items()):
        out.add("transactions_hanging", n, coordinator=tc_id)


def _checklist(admin: TransactionsAdmin, target: str, options: Options, out: _Values) -> None:
    """`downgrade status` on the checklist, read-only (save=False): the exporter never writes it. The batching flags
    are read per broker through the ClusterView, whatever the status says."""
    assert options.checklist is not None
    try:
        state = load_state(options.checklist)
    except StateError as exc:
        state, why = None, str(exc)
    else:
        why = f"{options.checklist}: no recorded downgrade here"
    loaded = state is not None and state.get("phase") == "recorded"
    out.add("downgrade_checklist_loaded", 1 if loaded else 0)
    if not loaded:
        out.lack(f"--checklist {why}")
    view = ClusterView(admin, target)
    try:
        for broker in view.active_brokers():
            runtime = view.broker_runtime_config(broker)
            for flag in BATCH_FLAGS:
                out.add("batching_enabled", 1 if flag_is_on(runtime, flag) else 0, broker=broker, flag=flag)
    except TargetUnreachableError:
        raise
    except AdminError as exc:
        out.lack(f"batching flags: {problem(exc)}")
    if not loaded:
        return
    try:
        report = downgrade_status(admin, options.checklist, options.concurrency, target=target, save=False)
    except (DowngradeError, StateError) as exc:
        if isinstance(exc, DowngradeError) and exc.transient:  # the target went away mid-poll (see survey above)
            raise PollError(f"downgrade status: {exc}") from None
        # exit 1 here is batching switched back on (batching_enabled shows where); anything else could not be read
        if not (isinstance(exc, DowngradeError) and exc.exit_code == 1):
            out.lack(f"downgrade status: {exc}")
        return
    waiting = report.groups()
    out.add("downgrade_logs", len(report.logs) - len(report.waiting), status="done")
    out.add("downgrade_logs", len(report.waiting), status="waiting")
    for reason in sorted(set(WAITING_REASONS) | set(waiting)):
        out.add("downgrade_waiting_logs", len(waiting.get(reason, [])), reason=reason)


def _doctor(s: "doctor.Survey", target: str, names: list[str], options: Options, out: _Values) -> None:
    try:
        report = doctor.judge(s, target, names, options.thresholds)
    except doctor.DoctorError as exc:
        out.lack(f"doctor: {exc}")
        return
    counts = {(check, sev): 0 for check in report.checks for sev in SEVERITIES}
    for finding in report.findings:
        counts[(finding.check, finding.severity)] = counts.get((finding.check, finding.severity), 0) + 1
    for (check, sev), n in sorted(counts.items()):
        out.add("doctor_findings", n, check=check, severity=sev)


class Stopped(Exception):
    """The exporter is stopping: the poll in progress was abandoned."""


class ChildPoller:
    """Polls in a child process, one poll at a time: the poll's threads (up to --concurrency of them parsing
    replies) never hold the interpreter lock that the process serving /metrics needs, so a scrape is answered at
    once whatever the poll is doing. The child is started when first needed and again after it dies; it opens a
    fresh admin for each poll (a local engine's lock is held only while a poll reads it; a restarted engine's
    server is found again)."""

    def __init__(self, target: "Target", options: Options):
        import multiprocessing

        self.target = target
        self.options = options
        self._context = multiprocessing.get_context("spawn")  # a fork would copy the parent's server thread
        self._process: Optional[BaseProcess] = None
        self._conn: Optional[Connection] = None

    def __call__(self, stop: threading.Event) -> Snapshot:
        if self._process is None or not self._process.is_alive():
            self.close()
            parent, child = self._context.Pipe()
            self._process = self._context.Process(target=poll_worker, args=(child, self.target, self.options),
                                                  name="txnadmin-exporter-poll", daemon=True)
            self._process.start()
            child.close()
            self._conn = parent
        assert self._conn is not None
        self._conn.send(True)
        while not self._conn.poll(0.2):
            if stop.is_set():
                self.close()  # the poll is abandoned with its process
                raise Stopped()
            if not self._process.is_alive():
                code = self._process.exitcode
                self.close()
                raise PollError(f"the poll's process ended unexpectedly (exit code {code})")
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError) as exc:
            self.close()
            raise PollError(f"the poll's process ended unexpectedly ({type(exc).__name__})") from None
        if kind != "snapshot":
            raise PollError(value)
        return value

    def close(self) -> None:
        """End the child: asked to, else terminated (a poll waiting on the target is not waited for)."""
        process, conn = self._process, self._conn
        self._process, self._conn = None, None
        if conn is not None:
            try:
                conn.send(False)
            except OSError:
                pass  # already gone: nothing to ask
            conn.close()
        if process is not None:
            process.join(0.5)
            if process.is_alive():
                process.terminate()
                process.join(5)


def poll_worker(conn: "Connection", target: "Target", options: Options) -> None:
    """The child's loop: a poll for each True received, its Snapshot (or ("error", one line)) sent back; ends on
    False or when the parent is gone."""
    import signal

    from ..admin.auth import mask
    from ..admin.target import open_admin

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent ends this
    try:
        os.nice(POLL_NICENESS)  # on a busy host the poll waits for the CPU, not the scrape
    except OSError as exc:
        log.warning("the poll process keeps its CPU priority: %s", exc)
    while True:
        try:
            if not conn.recv():
                return
        except (EOFError, OSError):
            return
        result: tuple[str, object]
        try:
            with open_admin(target, running_only=True) as admin:
                result = ("snapshot", poll(admin, target.url, options))
        except (PollError, TargetUnreachableError, AdminError) as exc:
            result = ("error", mask(exc.reason if isinstance(exc, AdminError) else str(exc)))
        except MALFORMED as exc:  # an answer shaped as no broker's: this poll proves nothing
            result = ("error", mask(f"an answer the exporter cannot read: {malformed(exc)}"))
        except Exception as exc:  # a poll must not end the exporter: said and counted, then retried
            log.debug("poll failed", exc_info=True)
            result = ("error", mask(f"unexpected {type(exc).__name__}: {exc}"))
        try:
            conn.send(result)
        except OSError:
            return  # the parent is gone


class Exporter:
    """The poll loop and what the collector serves. ``poller`` makes one poll (PollError when it fails, Stopped
    when the exporter stops meanwhile); the snapshot it returns is swapped in whole."""

    def __init__(self, poller: Callable[[threading.Event], Snapshot], target: str, interval_s: float = DEFAULT_INTERVAL_S,
                 say: Optional[Say] = None, close: Callable[[], None] = lambda: None):
        self.poller = poller
        self.target = target
        self.interval_s = interval_s
        self.say: Say = say or (lambda line: log.warning("%s", line))
        self.close = close
        self.started = time.monotonic()
        self.snapshot: Optional[Snapshot] = None  # replaced whole by the poll loop; read once per scrape
        self.errors = 0
        self.last_duration: Optional[float] = None
        # wall clock; served from the start, so that "no successful poll for 5 min" can fire for one that never had
        # any (an absent series fires no rule), counted from the exporter's start: a new one is not stale at once
        self.started_wall = time.time()
        self.last_success: Optional[float] = None
        self.polls = 0
        self.stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="exporter-poll", daemon=True)

    def start(self) -> "Exporter":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop the poll loop (a poll in progress is abandoned); False if it is somehow still running after
        ``timeout_s``, for the caller to leave without joining it."""
        self.stop_event.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def poll_once(self) -> None:
        t = time.monotonic()
        try:
            snapshot = self.poller(self.stop_event)
        except Stopped:
            return
        except PollError as exc:
            self._failed(t, str(exc))
            return
        self.snapshot = snapshot  # the one swap: a scrape sees the old snapshot or this one, whole
        self.last_duration = time.monotonic() - t
        self.polls += 1
        if snapshot.missing:
            self.errors += 1
            self.say(f"poll read only part of {self.target}: " + "; ".join(snapshot.missing[:10]))
        else:
            self.last_success = time.time()

    def _failed(self, started: float, reason: str) -> None:
        self.last_duration = time.monotonic() - started
        self.errors += 1
        age = "no values yet" if self.snapshot is None else \
            f"serving values {time.monotonic() - self.snapshot.finished:.0f} s old"
        self.say(f"poll of {self.target} failed ({age}): {reason}")

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                began = time.monotonic()
                self.poll_once()
                self.stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - began)))
        finally:
            self.close()

    # -- what a scrape serves --------------------------------------------------------------------
    def families(self) -> Iterator[tuple[str, str, str, tuple[tuple[Labels, float], ...]]]:
        """(name, type, help, samples) for every metric, from the snapshot current at the call: no I/O, no lock."""
        snapshot = self.snapshot
        values = dict(snapshot.values) if snapshot is not None else {}
        now = time.monotonic()
        values["poll_age_seconds"] = (((), now - (snapshot.finished if snapshot is not None else self.started)),)
        values["poll_errors"] = (((), float(self.errors)),)
        if self.last_duration is not None:
            values["poll_duration_seconds"] = (((), self.last_duration),)
        success = self.last_success if self.last_success is not None else self.started_wall
        values["last_poll_success_timestamp_seconds"] = (((), success),)
        for name, (kind, help_text) in METRICS.items():
            if name in values:
                yield PREFIX + name, kind, help_text, values[name]


class Collector:
    """prometheus-client's view of an :class:`Exporter`: each scrape builds its families from the current snapshot."""

    def __init__(self, exporter: Exporter):
        self.exporter = exporter

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, kind, help_text, samples in self.exporter.families():
            names = [k for k, _ in samples[0][0]] if samples else []
            family = (CounterMetricFamily(name.removesuffix("_total"), help_text, labels=names) if kind == "counter"
                      else GaugeMetricFamily(name, help_text, labels=names))
            for labels, value in samples:
                family.add_metric([v for _, v in labels], value)
            yield family


def listen(exporter: Exporter, host: str, port: int):
    """Serve ``/metrics`` for ``exporter`` on ``host:port`` in a background thread; returns the HTTP server (call
    ``shutdown()`` to stop it). OSError when the address cannot be bound."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(exporter))
    server, _ = start_http_server(port, addr=host, registry=registry)
    return server


class ListenError(Exception):
    """``/metrics`` cannot listen where it was asked to (the address in use, not ours, a port it may not bind)."""


def export(target: "Target", options: Options, interval_s: float, host: str, port: int,
           on_ready: Callable[[str], None], say: Say, on_hung_poll: Callable[[], None]) -> None:
    """`txnadmin exporter`: poll ``target`` in a child process every ``interval_s`` and serve /metrics on
    ``host:port`` until SIGTERM (returns) or Ctrl-C (KeyboardInterrupt goes on to the caller). ListenError when
    the address cannot be bound."""
    poller = ChildPoller(target, options)
    run(Exporter(poller, target.url, interval_s, say=say, close=poller.close), host, port, on_ready, on_hung_poll)


def run(exporter: Exporter, host: str, port: int, on_ready: Callable[[str], None],
        on_hung_poll: Callable[[], None]) -> None:
    """Listen, poll until SIGTERM (returns) or Ctrl-C (KeyboardInterrupt goes on to the caller), then stop both;
    ``on_hung_poll`` is called when a poll was still waiting on the target. ListenError when ``host:port`` cannot
    be bound."""
    import signal

    try:
        server = listen(exporter, host, port)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: exporter.stop_event.set())
    try:
        exporter.start()
        on_ready(f"http://{host if ':' not in host else f'[{host}]'}:{server.server_port}/metrics")
        while not exporter.stop_event.wait(0.5):
            pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not exporter.stop():
            on_hung_poll()
        server.shutdown()
        server.server_close()
