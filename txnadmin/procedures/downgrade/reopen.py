"""Judging a reopen nobody asked for (a bundle move, a coordinator failover): accepted only when `wait`'s watch
proves the flags stayed off and no batched writer flushed; revoked when a flush counter moves."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from ...admin.cluster import BrokerReading, ClusterView
from ...admin.protocol import TransactionsAdmin
from .evidence import RERECORD_HINT
from .report import LogStatus, Waiting
from .watch import WATCH_PERIOD_S, Watch, counter_problem, not_live


@dataclass
class Poll:
    number: int
    t_start: float  # monotonic, before the poll's first read
    wall_start: float
    t_end: Optional[float] = None  # monotonic, after its last read of a log
    wall_end: Optional[float] = None
    t_reads: Optional[float] = None  # monotonic, before its first read of a log (after its own read of the brokers)


class Session:
    """What one running `wait` knows beyond the checklist: its watch, its polls, and which poll last saw each log
    unchanged. None of it outlives the process: a bracket that spans two processes is a gap in the watch."""

    def __init__(self, admin: TransactionsAdmin, admin_url: str, baselines: dict[str, dict],
                 watch_period: float = WATCH_PERIOD_S):
        self.view = ClusterView(admin, admin_url)
        # A stopped engine's read-only view runs no broker: nothing read from it is an observation.
        self.watch: Optional[Watch] = (None if getattr(admin, "frozen", False)
                                       else Watch(self.view, baselines, watch_period))
        self.watching = False
        self.polls: dict[int, Poll] = {}
        self.seen_unchanged: dict[tuple[str, str], int] = {}  # log → the last poll that saw it unchanged
        self.pending: dict[tuple[str, str], tuple[int, int, Optional[int]]] = {}  # log → (from, seen, to)
        self.loads: dict[int, set[str]] = {}  # poll → the stores whose topic it loaded (at most once each)

    def new_poll(self, state: dict) -> "Poll":
        """The next observation, numbered after every earlier one of this wait and of the checklist. The number
        comes from this session, not from the checklist alone: a poll that changed nothing saves nothing, and a
        number read back from the file would name two polls, bracketing a reopen with a poll taken after it."""
        number = max(int(state.get("polls", 0)), max(self.polls, default=0)) + 1
        state["polls"] = number
        poll = Poll(number, time.monotonic(), time.time())
        self.polls[number] = poll
        return poll

    def start_watching(self) -> None:
        """From the first answered poll on, the brokers are read in the background every period (not before: a
        target that cannot answer a poll yet is retried by the poll loop alone). Each poll reads them once more."""
        if self.watch is not None and not self.watching:
            self.watch.__enter__()
            self.watching = True

    def close(self) -> None:
        if self.watch is not None and self.watching:
            self.watch.__exit__(None, None, None)


def _clock(wall: Optional[float]) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall)) if wall else "?"


def _judge_reopen(session: Session, key: tuple[str, str], rec: dict, poll: Poll,
                  new_start: Optional[int]) -> tuple[Optional[bool], str]:
    """Is this reopen proven harmless? (True, evidence) / (False, why not) / (None, why not yet)."""
    watch = session.watch
    if watch is None:
        return False, "not bracketed: the brokers were not watched yet"
    pending = session.pending.get(key)
    if pending is not None and pending[2] == new_start:
        first, seen = pending[0], pending[1]
    else:
        last_seen = session.seen_unchanged.get(key)
        seen = poll.number
        if last_seen is None or last_seen not in session.polls:
            return False, ("not bracketed: no poll of this `wait` saw the store unchanged before it reopened (it "
                           "reopened before this wait's first watched poll: right after `start`, while no `wait` "
                           "ran, or across a restart of `wait`)")
        first = last_seen
    # from before the first poll's reads of the logs (it saw this one unchanged at some point after) to after the
    # read that saw it reopened
    a = session.polls[first].t_reads or session.polls[first].t_start
    b = session.polls[seen].t_end or time.monotonic()
    # the flags must be read once more after the reopen was seen: wait up to two periods for that round
    watch.wait_for_round(b, 2 * watch.period + 1.0)
    flags_ok, flags_why = watch.flags_off_between(a, b)
    counters_ok, counters_why = watch.counters(b)
    if flags_ok is False:
        return False, flags_why
    if counters_ok is False:
        return False, counters_why
    if flags_ok is None or counters_ok is None:
        session.pending[key] = (first, seen, new_start)
        return None, flags_why if flags_ok is None else counters_why
    session.pending.pop(key, None)
    p, q = session.polls[first], session.polls[seen]
    return True, (f"reopened between polls {p.number} ({_clock(p.wall_start)}) and {q.number} ({_clock(q.wall_end)}) "
                  f"with batching off: {flags_why}; {counters_why}")


_REJUDGE = 3  # a log seen moving again while its last move is accepted is judged again, this many times per poll


def judge_reopened(session: Optional[Session], poll: Optional[Poll], key: tuple[str, str], job, result: LogStatus,
                   confirmed: Optional[int], again) -> tuple[LogStatus, Optional[int], bool]:
    """A log seen reopened: accept it when the watch proves it harmless, and judge it afresh; else say why not.
    Returns (its status, a confirmed ledger, whether the checklist changed)."""
    log, rec = job
    if result.reopened_to is None:  # nothing recorded to compare with: only a re-record gives it a baseline
        result.extra["proof"] = "no recoverStartTime was recorded for this store"
        result.suggestion = RERECORD_HINT
        return result, confirmed, False
    if session is None or poll is None:
        why = ("not judged: `downgrade status` keeps no watch of the brokers; `downgrade wait` judges reopens "
               "(and accepts those proven harmless)")
        result.extra["proof"] = why
        return result, confirmed, False
    changed = False
    for _ in range(_REJUDGE):
        verdict, why = _judge_reopen(session, key, rec, poll, result.reopened_to)
        if verdict is not True:
            break
        rec.setdefault("acceptedReopens", []).append(
            {"from": rec["recoverStartTime"], "to": result.reopened_to, "poll": poll.number, "evidence": why})
        rec["recoverStartTime"] = result.reopened_to
        session.seen_unchanged[key] = poll.number
        result, confirmed = again(job)
        # This poll read the log once more: every bracket ending at it now ends after that read (only ever wider).
        poll.t_end, poll.wall_end = time.monotonic(), time.time()
        changed = True
        if result.kind != Waiting.REOPENED or result.reopened_to is None or rec.get("unproven"):
            return result, confirmed, True
        # it moved again while we looked (a busy shedder): judge that move too
    else:
        return result, confirmed, changed
    result.extra["proof"] = why
    if verdict is False:
        rec["unproven"] = why
        result.reason = f"reopened since recording, not proven harmless: {why}"
        result.suggestion = RERECORD_HINT
        return result, confirmed, True
    result.reason = f"reopened since recording; proof pending: {why}"
    return result, confirmed, changed


def counted_move(view: ClusterView, brokers: list[str], baselines: dict, session: Optional[Session],
                 readings: Optional[dict[str, BrokerReading]] = None):
    """The first batched flush counted since the baselines, or None (``readings``: the brokers as just read, without
    a watch)."""
    if session is not None and session.watch is not None:
        return session.watch.moved
    for reading in (readings if readings is not None else view.read_brokers(brokers)).values():
        _, moved = counter_problem(reading, baselines)
        if moved is not None:
            return moved
    return None


def counters_cover(view: ClusterView, brokers: list[str], baselines: dict, session: Optional[Session],
                   end: float, earlier: Optional[dict[str, BrokerReading]] = None,
                   readings: Optional[dict[str, BrokerReading]] = None) -> tuple[bool, str]:
    """Counters that cover the moment ``end``: with `wait`'s watch, its rounds; without one (`downgrade status`),
    a read now (``readings``: the brokers as just read after the logs), live only if its CPU seconds moved since
    ``earlier`` (the same poll's first read)."""
    if session is not None and session.watch is not None:
        watch = session.watch
        ok, why = watch.counters(end)
        if ok is None:
            slot = max((r.cache_s for rnd in list(watch.rounds)[-1:] for r in rnd.readings.values()), default=0.0)
            watch.wait_for_round(end + slot, 2 * watch.period + slot + 1.0)
            ok, why = watch.counters(end)
        return bool(ok), why
    for reading in (readings if readings is not None else view.read_brokers(brokers)).values():
        problem, _ = counter_problem(reading, baselines)
        if problem is not None:
            return False, problem
        if reading.counters_needed and reading.cache_s:
            return False, (f"broker {reading.broker} serves cached metrics ({reading.cache_s:g} s): `downgrade "
                           "wait` waits for a read that covers its verdict")
        before = (earlier or {}).get(reading.broker)
        if reading.counters_needed and (before is None or reading.cpu is None or (
                reading.cpu == before.cpu and reading.process_start == before.process_start)):
            why = ("it exports no process_cpu_seconds_total" if reading.cpu is None else
                   "read once only" if before is None else "process_cpu_seconds_total unchanged within this poll")
            return False, not_live(reading.broker, why)
    return True, "no batched flush since `start`"


def revoke_accepted(state: dict, moved) -> bool:
    """A counter moved: every reopen accepted so far may hide an idle writer that batched; none stands."""
    changed = False
    for bucket in ("coordinators", "pendingAckStores"):
        for rec in state[bucket].values():
            if rec.get("acceptedReopens") and not rec.get("unproven"):
                rec["unproven"] = f"its accepted reopen is revoked: {moved.describe()}"
                changed = True
    return changed
