"""The downgrade's watch: both batching flags and the batched writers' flush counters on every active broker, read
every ``period`` seconds in the background while ``start`` and ``wait`` run.

It is what lets ``wait`` accept a reopen that nobody asked for (a bundle move, a coordinator failover) without
asking the operator: a store reads the flags only when it opens, so a reopen is harmless when the flags were off on
every broker the whole time it could have happened, and no batched writer flushed since ``start``. The watch
answers those two questions for an interval of our monotonic clock:

- :meth:`Watch.flags_off_between` — every round from one at or before ``a`` to one at or after ``b`` read every
  listed broker with both flags off, the active list never changed, and no broker went unread for more than one
  period (a failed read is forgiven once: the next period must read it);
- :meth:`Watch.counters` — every broker that runs coordinators showed its own flush counters, none advanced past
  its baseline (a broker restarted since, recognised by its process start time or by counters that went down,
  counts from zero), read late enough to cover a given moment (a cached exposition covers only up to the start of
  its cache slot), from a live ``/metrics`` (its ``process_cpu_seconds_total`` moved between two reads in different
  cache slots), on a broker that exports its process start time (without it a restart cannot be ruled out: a
  definite "no", not a "not yet").

Nothing here compares a broker's clock with ours: times are our monotonic clock, taken around our own reads.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from ...admin.cluster import BrokerReading, ClusterView
from ...admin.protocol import AdminError

log = logging.getLogger(__name__)

WATCH_PERIOD_S = 2.0  # the bound: both flags read on every active broker at least this often
MAX_ROUNDS = 20_000  # ~11 h at 2 s; a bracket older than the oldest kept round is not proven


@dataclass(frozen=True)
class Round:
    """One read of every active broker: ``t0`` before the first request, ``t1`` after the last (monotonic)."""

    seq: int
    t0: float
    t1: float
    brokers: Optional[tuple[str, ...]]  # None: the active list itself could not be read
    readings: dict[str, BrokerReading] = field(default_factory=dict)
    error: Optional[str] = None

    def flags_on(self) -> dict[str, tuple[str, ...]]:
        return {b: r.flags_on for b, r in self.readings.items() if r.readable and r.flags_on}

    def unread(self) -> list[str]:
        return sorted(b for b, r in self.readings.items() if not r.readable)


@dataclass(frozen=True)
class Moved:
    """A flush counter that advanced: the first one seen since the baselines were taken."""

    broker: str
    before: float
    after: float
    restarted: bool
    round: int
    wall: float
    note: str = ""  # how a restart was told, when not by the process start time

    def describe(self) -> str:
        start = (f"0 (a new broker process counts from zero{self.note})" if self.restarted
                 else f"{self.before:g}")
        return (f"batched-writer flushes on broker {self.broker} went from {start} to {self.after:g} "
                f"(pulsar_txn_*_bufferedwriter_flush_trigger_*, watch round {self.round} at "
                f"{time.strftime('%H:%M:%S', time.localtime(self.wall))}): something there batched since `start`")


def baseline_of(reading: BrokerReading) -> Optional[dict]:
    """What `start` records for a broker: its process and its flush count (None when its counters are no evidence)."""
    if not reading.readable or reading.flushes is None:
        return None
    return {"processStart": reading.process_start, "flushes": reading.flushes}


def counter_problem(reading: BrokerReading, baselines: dict[str, dict]) -> tuple[Optional[str], Optional[Moved]]:
    """(why this reading is no evidence, or the movement it shows); (None, None) when it shows no batched flush."""
    if not reading.readable:
        return f"broker {reading.broker} unreadable: {reading.error}", None
    if not reading.counters_needed:
        return None, None
    if reading.flushes is None:
        return f"broker {reading.broker}: {reading.counter_error}", None
    base = baselines.get(reading.broker)
    same_process = base is not None and base.get("processStart") == reading.process_start
    note = ""
    if same_process and base is not None and reading.flushes < float(base["flushes"]):
        same_process = False  # a counter never goes down in one process: a restart, whatever the start time says
        note = ("; seen by its counters going down below the baseline's "
                f"{float(base['flushes']):g}, as it exports no process_start_time_seconds"
                if reading.process_start is None else "")
    before = float(base["flushes"]) if same_process and base is not None else 0.0
    if reading.flushes > before:
        return None, Moved(reading.broker, before, reading.flushes, not same_process, 0, time.time(), note)
    if reading.process_start is None:
        return no_process_start(reading.broker), None
    return None, None


def no_process_start(broker: str) -> str:
    return (f"broker {broker} exports no process_start_time_seconds: a restart (which zeroes its counters) cannot be "
            "ruled out, so no reopen there is proven harmless")


def not_live(broker: str, why: str) -> str:
    return f"broker {broker}'s /metrics is not live ({why}): its counters are no evidence"


class Watch:
    """Reads every active broker every ``period`` seconds in a daemon thread (``with Watch(...)``), or round by
    round with :meth:`read_round` (tests, and `status`'s single poll)."""

    def __init__(self, view: ClusterView, baselines: dict[str, dict], period: float = WATCH_PERIOD_S):
        self.view = view
        self.baselines = baselines
        self.period = period
        self.rounds: deque[Round] = deque(maxlen=MAX_ROUNDS)
        self.moved: Optional[Moved] = None
        self.started = time.monotonic()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._seq = 0
        # Is each broker's /metrics live? Two reads of it further apart than its cache slot must show its CPU
        # seconds moved (a stale copy cannot): the last read compared, and the brokers shown stale or live.
        self._compared: dict[str, BrokerReading] = {}
        self.stale: dict[str, str] = {}
        self.live: set[str] = set()

    # -- running ------------------------------------------------------------------------------
    def __enter__(self) -> "Watch":
        self._thread = threading.Thread(target=self._run, name="downgrade-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5.0)  # a round in flight ends with its requests; a hung one is left behind

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.read_round()
            except Exception as exc:  # logged, never swallowed: the missing round is a gap in the watch
                if self._stop.is_set():
                    return  # stopping (the process may be shutting down under the round)
                log.error("downgrade watch: a round failed (%s: %s); the missed round counts as a gap",
                          type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            self._stop.wait(max(0.0, self.period - (time.monotonic() - began)))

    def read_round(self) -> Round:
        t0 = time.monotonic()
        try:
            brokers: Optional[tuple[str, ...]] = tuple(self.view.active_brokers(fresh=True))
            error = None if brokers else "the target lists no active brokers"
        except AdminError as exc:
            brokers, error = None, f"active brokers: {exc.reason}"
        readings = self.view.read_brokers(list(brokers)) if brokers else {}
        with self._cond:
            self._seq += 1
            rnd = Round(self._seq, t0, time.monotonic(), brokers, readings, error)
            self.rounds.append(rnd)
            for reading in readings.values():
                self._judge_liveness(reading)
            if self.moved is None:
                for reading in readings.values():
                    _, moved = counter_problem(reading, self.baselines)
                    if moved is not None:
                        self.moved = Moved(moved.broker, moved.before, moved.after, moved.restarted, rnd.seq,
                                           time.time(), moved.note)
                        break
            self._cond.notify_all()
        return rnd

    def _judge_liveness(self, reading: BrokerReading) -> None:
        if not reading.readable or not reading.counters_needed or reading.flushes is None:
            return
        broker = reading.broker
        prev = self._compared.get(broker)
        if prev is None:
            self._compared[broker] = reading
            return
        if reading.at - prev.at <= max(reading.cache_s, prev.cache_s):
            return  # the same cache slot: the next read in another slot decides
        self._compared[broker] = reading
        if reading.cpu is None:
            self.stale[broker] = not_live(broker, "it exports no process_cpu_seconds_total, so a live scrape cannot "
                                                  "be told from a stale copy")
        elif reading.cpu == prev.cpu and reading.process_start == prev.process_start:
            self.stale[broker] = not_live(broker, f"process_cpu_seconds_total unchanged over {reading.at - prev.at:.1f}"
                                                  " s: a cached or frozen copy")
        else:
            self.stale.pop(broker, None)
            self.live.add(broker)

    def rebase(self, baselines: dict[str, dict]) -> None:
        """New baselines (after a re-record reloaded every store whose reopen was unproven): movement is forgotten."""
        with self._cond:
            self.baselines = baselines
            self.moved = None

    def wait_for_round(self, after: float, timeout: float) -> Optional[Round]:
        """The first round that began at or after ``after`` (monotonic), waiting up to ``timeout`` for it."""
        deadline = time.monotonic() + timeout
        running = self._thread is not None and self._thread.is_alive()
        with self._cond:
            while True:
                found = self._first_from(after)
                if found is not None or self._stop.is_set() or not running:  # no round will come by itself
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def _first_from(self, t: float) -> Optional[Round]:
        rounds = list(self.rounds)
        i = bisect.bisect_left([r.t0 for r in rounds], t)
        return rounds[i] if i < len(rounds) else None

    # -- judging ------------------------------------------------------------------------------
    def flags_off_between(self, a: float, b: float) -> tuple[Optional[bool], str]:
        """Were both flags off on every active broker from ``a`` to ``b``? (True, evidence), (False, why not),
        or (None, why not yet) when no round after ``b`` has read every broker yet."""
        with self._cond:
            rounds = list(self.rounds)
        before = [r for r in rounds if r.t1 <= a and r.brokers and not r.unread() and not r.error]
        if not before:
            return False, ("not bracketed: the watch has no complete read of the brokers from before the store was "
                           "last seen unchanged (wait restarted, or the reopen came right after `start`)")
        first = before[-1]
        span = [r for r in rounds if r.seq >= first.seq]
        last_complete = next((r for r in span if r.t0 >= b and r.brokers and not r.unread() and not r.error), None)
        if last_complete is not None:
            span = [r for r in span if r.seq <= last_complete.seq]
        listed = first.brokers
        last_read = {broker: first.readings[broker].at for broker in listed or ()}
        process = {broker: first.readings[broker].process_start for broker in listed or ()}
        flushes = {broker: first.readings[broker].flushes for broker in listed or ()}
        failed_at: dict[str, float] = {}  # broker → its first failed read since its last good one
        for rnd in span:
            if rnd.brokers is None:  # the active list itself could not be read: no broker was
                for broker in listed or ():
                    failed_at.setdefault(broker, rnd.t0)
                if rnd.t0 - min(last_read.values(), default=rnd.t0) > 2 * self.period:
                    return False, f"a gap in the watch: {rnd.error} for more than one period"
                continue
            if rnd.brokers != listed:
                return False, (f"the active brokers changed between the two polls ({', '.join(listed or ())} → "
                               f"{', '.join(rnd.brokers)}): a broker joined or left, so its flags were not watched")
            on = rnd.flags_on()
            if on:
                shown = "; ".join(f"{b}: {', '.join(f + '=true' for f in fl)}" for b, fl in sorted(on.items()))
                return False, f"batching was on between the two polls (watch round {rnd.seq}: {shown})"
            for broker, reading in rnd.readings.items():
                if reading.readable:
                    if reading.process_start is not None and reading.process_start != process[broker]:
                        if process[broker] is not None:
                            return False, (f"broker {broker} restarted between the two polls (a new process at watch "
                                           f"round {rnd.seq}): a restart is a gap in the watch")
                        process[broker] = reading.process_start
                    if reading.flushes is not None:
                        if flushes.get(broker) is not None and reading.flushes < (flushes[broker] or 0.0):
                            how = "" if reading.process_start is not None else (
                                "; it exports no process_start_time_seconds, so only its counters tell")
                            return False, (f"broker {broker} restarted between the two polls (its flush counters "
                                           f"went down at watch round {rnd.seq}{how}): a restart is a gap in the "
                                           "watch")
                        flushes[broker] = reading.flushes
                    since = failed_at.pop(broker, None)
                    if since is not None and reading.at - since > self.period:
                        return False, (f"a gap in the watch: broker {broker} unreadable for "
                                       f"{reading.at - since:.1f} s (more than one period)")
                    if reading.at - last_read[broker] > 2 * self.period:
                        return False, (f"a gap in the watch: broker {broker} went unread for "
                                       f"{reading.at - last_read[broker]:.1f} s (more than one period)")
                    last_read[broker] = reading.at
                else:
                    failed_at.setdefault(broker, reading.at)
                    if rnd.t1 - last_read[broker] > 2 * self.period:
                        return False, (f"a gap in the watch: broker {broker} unreadable for more than one period "
                                       f"({reading.error})")
        if last_complete is None:
            return None, "waiting for the watch to read every broker after the reopen was seen"
        return True, (f"flags off on {len(listed or ())}/{len(listed or ())} brokers at every read "
                      f"(watch rounds {first.seq}–{last_complete.seq})")

    def counters(self, covering: float) -> tuple[Optional[bool], str]:
        """No batched flush on any broker since the baselines, as read by a round that covers ``covering``:
        (True, evidence), (False, the movement) or (None, why not known yet)."""
        with self._cond:
            moved = self.moved
            rounds = list(self.rounds)
        if moved is not None:
            return False, moved.describe()
        latest: dict[str, BrokerReading] = {}
        for rnd in rounds:
            for broker, reading in rnd.readings.items():
                if reading.readable and (not reading.counters_needed or reading.flushes is not None):
                    latest[broker] = reading
        if not rounds or rounds[-1].brokers is None:
            return None, "the watch has not read the active brokers yet"
        not_yet: list[tuple[int, str]] = []  # a definite "no" outweighs every "not yet"; the likeliest named first
        for broker in rounds[-1].brokers:
            found = latest.get(broker)
            if found is None:
                last = rounds[-1].readings.get(broker)
                why = counter_problem(last, self.baselines)[0] if last is not None else "not read yet"
                not_yet.append((0, f"no flush counters from broker {broker} yet ({why})"))
                continue
            reading = found
            if not reading.counters_needed:
                continue
            if reading.process_start is None:
                return False, no_process_start(broker)
            if broker in self.stale:
                return False, self.stale[broker]
            if reading.counters_as_of < covering:
                cached = f" (its /metrics is cached for {reading.cache_s:g} s)" if reading.cache_s else ""
                not_yet.append((1, f"waiting for broker {broker}'s flush counters to cover the last poll{cached}"))
            elif broker not in self.live:
                not_yet.append((2, f"waiting for a second read of broker {broker}'s /metrics to show it live"))
        if not_yet:
            return None, min(not_yet)[1]
        return True, f"no batched flush on any of {len(rounds[-1].brokers)} broker(s) since `start`"
