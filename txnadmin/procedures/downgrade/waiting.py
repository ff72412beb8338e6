"""`wait`: poll until safe, holding the checklist; re-record what only a re-record can prove (`--rerecord`)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

from ...admin.protocol import TransactionsAdmin
from .checklist import (
    ChecklistLock, baselines_of, discharge_flushes, flush_facts, load_state, require_state, save_state,
)
from .logs import LogReader
from .poll import status
from .recording import count_flushes, record_logs
from .reopen import Session
from .report import DowngradeError, LogStatus, Report, Waiting
from .target import active_brokers, confirm_flags_off, flush_baselines, pending_ack_stores, target_identity
from .watch import WATCH_PERIOD_S


def needs_rerecord(report: Report) -> list[LogStatus]:
    """The logs only a re-record can prove: unproven reopens, and logs created since recording."""
    return [l for l in report.waiting if l.component != "broker" and (
        (l.kind == Waiting.REOPENED and l.extra.get("proof") and "proof pending" not in l.reason
         and not l.extra["proof"].startswith("not judged")) or l.kind == Waiting.UNRECORDED)]


def every_log(state: dict, report: Report) -> list[LogStatus]:
    """Every recorded log, and every log created since recording, as a re-record takes them: what a counted
    batched flush needs re-recorded (which store wrote it is unknown, as is which broker owned what meanwhile)."""
    logs = [LogStatus("coordinator", key, None, None, False, "", extra={"coordinatorId": int(key)})
            for key in sorted(state["coordinators"], key=int)]
    logs += [LogStatus("pending-ack", key, None, None, False, "") for key in sorted(state["pendingAckStores"])]
    return logs + [l for l in report.waiting if l.kind == Waiting.UNRECORDED]


def rerecord(admin: TransactionsAdmin, state_path: Path, logs: list[LogStatus], session: Session,
             concurrency: int = 16, flushed: bool = False) -> int:
    """Reload and re-record exactly ``logs`` (as `start` does), then take new counter baselines: every log whose
    reopen was unproven has now reopened again under the watch with the flags off. ``flushed``: ``logs`` is every
    log (:func:`every_log`), re-recorded to end the counted flushes. Returns how many were recorded."""
    state = require_state(state_path)
    view = session.view
    brokers = active_brokers(admin, view.identity(), view)
    confirm_flags_off(view, brokers, 0.0)
    if flushed:
        # the counters are read again now: a flush counted since the poll is ended by this re-record too
        count_flushes(view, brokers, state)
    todo = []
    for l in logs:
        if l.component == "coordinator":
            todo.append(LogReader(admin, "coordinator", str(l.extra["coordinatorId"]), {}))
        else:
            rec = state["pendingAckStores"].get(l.name)
            info = ({"topic": rec["topic"], "subscription": rec["subscription"]} if rec else
                    {"topic": l.extra.get("topic"), "subscription": l.extra.get("subscription")})
            if info["topic"] is None:
                found = pending_ack_stores(admin, concurrency)
                if l.name not in found:
                    continue  # gone since the poll
                info = found[l.name]
            todo.append(LogReader(admin, "pending-ack", l.name, info))
    # The re-record is an observation like a poll: it read each log right after its reload, under the watch, so a
    # move that lands before the next poll is bracketed by the two (else every such move would need another).
    poll = session.new_poll(state)
    this_run = record_logs(admin, view, state, state_path, todo, brokers, True, concurrency, None, session.watch)
    poll.t_end, poll.wall_end = time.monotonic(), time.time()
    for bucket, key in this_run:
        state[bucket][key].pop("unproven", None)
        log_key = ("coordinator" if bucket == "coordinators" else "pending-ack", key)
        session.pending.pop(log_key, None)
        session.seen_unchanged[log_key] = poll.number
    if flushed:
        discharge_flushes(state, f"`wait --rerecord` reloaded and re-recorded every log ({len(this_run)})")
    revoked = [rec for bucket in ("coordinators", "pendingAckStores") for rec in state[bucket].values()
               if rec.get("unproven")]
    baselines = flush_baselines(view, brokers)
    if (flushed or not revoked) and not flush_facts(state):
        # Every log whose reopen rested on "no batched flush" was reloaded with the flags off: count afresh.
        state["flushBaselines"] = baselines
        if session.watch is not None:
            session.watch.rebase(baselines)
    if this_run:
        state.pop("safeVerdict", None)
    state["rerecordedInWait"] = int(state.get("rerecordedInWait", 0)) + len(this_run)
    save_state(state_path, state)
    return len(this_run)


_DEADLINE_GRACE_S = 1.0


def wait(admin: TransactionsAdmin, state_path: Path, timeout_s: float, interval_s: float,
         on_poll: Optional[Callable[[Report], None]] = None, concurrency: int = 16,
         on_retry: Optional[Callable[[str, float], None]] = None, target: Optional[str] = None,
         rerecord_unproven: bool = False, watch_period: float = WATCH_PERIOD_S,
         on_rerecord: Optional[Callable[[int], None]] = None) -> Report:
    """Poll until safe, holding the checklist (its one writer). Transient failures are shown (``on_retry``) and
    retried with backoff; the deadline bounds everything, hung calls included (a poll still running at the
    deadline is abandoned). A reopen the watch cannot prove harmless stops the wait at once (``report.stop``) or,
    with ``rerecord_unproven``, is reloaded and re-recorded. Returns the last report; raises DowngradeError 3 when
    the target never answered or answered permanently wrong."""
    with ChecklistLock(state_path):
        if target is not None and load_state(state_path) is None:
            target_identity(admin, target)  # a target that cannot be read says so before a missing checklist does
        state = require_state(state_path)
        session = Session(admin, target if target is not None else state["identity"]["adminUrl"],
                          baselines_of(state), watch_period)
        try:
            return wait_in_session(admin, state_path, timeout_s, interval_s, on_poll, concurrency, on_retry, target,
                                   rerecord_unproven, session, on_rerecord)
        finally:
            session.close()


def wait_in_session(admin: TransactionsAdmin, state_path: Path, timeout_s: float, interval_s: float, on_poll,
                    concurrency: int, on_retry, target: Optional[str], rerecord_unproven: bool, session: Session,
                    on_rerecord) -> Report:
    """:func:`wait`'s loop, for a caller that holds the checklist lock and runs ``session`` (the rolling walk keeps
    one watch across every broker it restarts)."""
    import concurrent.futures

    deadline = time.monotonic() + timeout_s
    backoff = min(interval_s, 1.0)
    last: Optional[Report] = None
    last_error: Optional[str] = None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="downgrade-poll")
    try:
        while True:
            remaining = deadline - time.monotonic()
            future = pool.submit(status, admin, state_path, concurrency, None, target, 0.0, session, True)
            try:
                try:
                    report = future.result(timeout=max(0.0, remaining))
                except concurrent.futures.TimeoutError:
                    # A poll that answers within a short grace is still an answer (and `--timeout 0` means "one
                    # poll"); only one still hanging after it is abandoned, which makes the CLI exit hard.
                    if not concurrent.futures.wait([future], timeout=_DEADLINE_GRACE_S).done:
                        return _timed_out(last, last_error or "a request was still hanging", timeout_s,
                                          abandoned=True)
                    report = future.result()
                    deadline = time.monotonic()  # no further poll
            except DowngradeError as exc:
                if not exc.transient:
                    raise
                last_error = str(exc)
                pause = min(backoff, max(0.0, deadline - time.monotonic()))
                if on_retry:
                    on_retry(last_error, pause)
                if time.monotonic() + pause >= deadline:
                    return _timed_out(last, last_error, timeout_s)
                time.sleep(pause)
                backoff = min(backoff * 2, max(interval_s, 1.0) * 4)
                continue
            backoff = min(interval_s, 1.0)
            last, last_error = report, None
            session.start_watching()
            if on_poll:
                on_poll(report)
            if report.safe:
                return report
            unproven = needs_rerecord(report)
            flushing = [l for l in report.waiting if l.kind == Waiting.STILL_FLUSHING]
            stopping = [l for l in unproven if l.kind == Waiting.REOPENED] + flushing
            if flushing and rerecord_unproven:
                # a counted flush: every log is re-recorded (the report names the brokers), and the wait goes on
                count = rerecord(admin, state_path, every_log(require_state(state_path), report), session,
                                 concurrency, flushed=True)
                if on_rerecord:
                    on_rerecord(count)
                continue
            if unproven and rerecord_unproven:
                count = rerecord(admin, state_path, unproven, session, concurrency)
                if on_rerecord:
                    on_rerecord(count)
                continue
            if stopping and not rerecord_unproven:
                what = ("batched flushes were counted: only a re-record of every log ends them" if flushing else
                        f"{len(stopping)} log(s) cannot be proven without a re-record (see each reason)")
                report.stop = (f"{what}; run `txnadmin downgrade wait --rerecord` to reload and re-record "
                               + ("every log" if flushing else "exactly those"))
                return report
            scan = [l for l in report.waiting if l.kind == Waiting.SCAN]
            if scan and len(scan) == len(report.waiting):
                report.stop = ("every log is done, but the recorded scan is not clean and waiting cannot change it: "
                               "take new dumps and run `txnadmin downgrade verify` again")
                return report
            if time.monotonic() + interval_s > deadline:
                return report
            time.sleep(interval_s)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _timed_out(last: Optional[Report], error: Optional[str], timeout_s: float, abandoned: bool = False) -> Report:
    if last is None:
        exc = DowngradeError(f"no answer from the target within --timeout {timeout_s:g} s"
                             + (f" (last error: {error})" if error else ""), 3)
        exc.abandoned = abandoned
        raise exc
    last.transient_error = error
    last.abandoned = abandoned
    return last
