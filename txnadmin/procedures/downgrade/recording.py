"""`start`: switch batching off, confirm it off on every broker, reload each log and record its LastBatched
(rules 1 and 2 of the package docstring). `wait --rerecord` records through the same routine."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from ...admin.cluster import ClusterView
from ...admin.endpoints import JUDGED_COORDINATORS, judged
from ...admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError, NotFoundError, TransactionsAdmin
from ...names import coordinator_assign_partition
from .checklist import (
    ChecklistLock, baselines_of, discharge_flushes, flush_facts, load_state, new_state, recorded_logs, remember_flush,
    save_state,
)
from .logs import COORDINATOR_LOAD_WAIT_S, LogReader
from .report import DowngradeError
from .target import (
    FLAG_PROPAGATION_S, Progress, active_brokers, admin_call, check_identity, confirm_flags_off, describe_on,
    flags_on_brokers, flush_baselines, now_ms, pending_ack_stores, target_identity,
)
from .watch import WATCH_PERIOD_S, Watch, counter_problem

logger = logging.getLogger(__name__)


def _record(log: LogReader, reload: bool, previous: Optional[dict], counted: bool = False) -> Optional[dict]:
    """Record one log after the flags were confirmed off. None when the store does not exist (any more).
    ``counted``: batched flushes were counted since the last record, so whatever this store has written, its
    newest ledger included, may be batched, reopened or not (and its reopen proves nothing)."""
    try:
        before_start = log.recover_start()
        before = log.ledgers()
    except NotFoundError:
        before_start, before = None, []
    if reload:
        return None  # the caller reloads per topic and then calls _after_reload
    # Without a reload, the store batches until it reopens. A re-record after we saw it reopen (between two
    # confirmations that the flags were off) is the first baseline known to have opened with batching off.
    reopened = not counted and previous is not None and previous.get("recoverStartTime") not in (None, before_start)
    last = _last_batched(before, reopened, previous)
    rec = {"lastBatchedLedgerId": last, "recoverStartTime": before_start,
           "confirmedLedger": max(before) if before else None, "reloaded": False, "recordedAt": now_ms()}
    # an earlier "batching off" holds only for the same open store (a record voided by a switch-on has none)
    same_store = previous is not None and previous.get("recoverStartTime") == before_start
    rec["batchingOff"] = bool(reopened or (same_store and (previous or {}).get("batchingOff")))
    if before_start is None or counted:
        rec["batchingOff"] = False
    return rec


def _last_batched(ledgers: list[int], reopened: bool, previous: Optional[dict]) -> Optional[int]:
    """LastBatched for a record without a reload: every ledger while the store may still batch; once it was seen
    reopened, every ledger but the newest (a store always opens on a new ledger, and that one was written plainly).
    Never below what was recorded before for this log."""
    ids = sorted(ledgers)
    candidates = ids[:-1] if reopened else ids
    earlier = (previous or {}).get("lastBatchedLedgerId")
    if earlier is not None:
        candidates = [*candidates, int(earlier)]
    return max(candidates) if candidates else None


def _after_reload(log: LogReader, before: list[int], before_start: Optional[int]) -> dict:
    """LastBatched = the largest ledger before the reopen, re-read after it (a rollover in between moves it up)."""
    try:
        after_start = log.recover_start()
        after = log.ledgers()
    except NotFoundError:
        return {"notLoaded": True, "lastBatchedLedgerId": max(before) if before else None, "recoverStartTime": None,
                "confirmedLedger": None, "reloaded": True, "batchingOff": False, "recordedAt": now_ms()}
    if after_start is None or after_start == before_start:
        raise DowngradeError(f"{log.component} {log.key}: the store did not reopen after the reload "
                             f"(recoverStartTime still {before_start}); run `txnadmin downgrade start` again", 1)
    # The newest ledger after the reload is the one the reopen created (or newer): everything older may be batched.
    older = sorted(after)[:-1]
    last = max([*before, *older]) if (before or older) else None
    return {"lastBatchedLedgerId": last, "recoverStartTime": after_start, "confirmedLedger": max(after),
            "reloaded": True, "batchingOff": True, "recordedAt": now_ms()}


# -- start --------------------------------------------------------------------------------------

def start(admin: TransactionsAdmin, state_path: Path, target: str = "", reload: bool = True,
          concurrency: int = 16, progress: Progress = None, flag_wait_s: float = FLAG_PROPAGATION_S,
          watch_period: float = WATCH_PERIOD_S, coordinator_wait_s: float = COORDINATOR_LOAD_WAIT_S) -> dict[str, Any]:
    with ChecklistLock(state_path):
        return _start(admin, state_path, target, reload, concurrency, progress, flag_wait_s, watch_period,
                      coordinator_wait_s)


def _start(admin: TransactionsAdmin, state_path: Path, target: str, reload: bool, concurrency: int,
           progress: Progress, flag_wait_s: float, watch_period: float, coordinator_wait_s: float) -> dict[str, Any]:
    view = ClusterView(admin, target)
    ident = target_identity(admin, target, view)
    existing = load_state(state_path)
    if existing is not None:
        check_identity(existing, ident, state_path)
    state = existing or new_state(target)
    state["identity"] = ident
    coordinators = admin_call(lambda: judged(admin.list_coordinators(), JUDGED_COORDINATORS, "coordinators"))
    if not coordinators:
        raise DowngradeError("no transaction coordinators on the target (is transactionCoordinatorEnabled=true?)")
    brokers = active_brokers(admin, ident, view)
    if existing is not None and "flushBaselines" in existing:
        # Flushes counted since the last baselines are facts: kept before anything else, and ended only by the
        # re-record of every log below, never by the new baselines this run takes at its end.
        count_flushes(view, brokers, state)
    counted_facts = dict(flush_facts(state))
    counted = bool(counted_facts)
    on = flags_on_brokers(view, brokers)
    if on:
        for flag in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG):
            admin_call(admin.update_dynamic_config, flag, "false")
        state["changeTime"] = now_ms()
    confirm_flags_off(view, brokers, flag_wait_s)  # before any reload or LastBatched read
    state["reload"] = reload
    state["brokersChecked"] = brokers
    if state["phase"] == "new":
        state["phase"] = "disabled"
    save_state(state_path, state)

    stores = pending_ack_stores(admin, concurrency)
    # a coordinator answering 404 is failing over or replaying its log: asked again for a while, then exit 3
    logs = [LogReader(admin, "coordinator", str(c["id"]), {}, coordinator_wait_s) for c in coordinators]
    logs += [LogReader(admin, "pending-ack", store, info) for store, info in stores.items()]
    recorded = recorded_logs(state)

    def needs_record(log: LogReader) -> bool:
        if counted:
            return True  # which store batched is unknown (ownership over the interval is not kept): every log
        rec = recorded.get((log.component, log.key))
        if rec is None or rec.get("recoverStartTime") is None or rec.get("unproven"):
            return True
        if reload and not rec.get("batchingOff"):
            return True  # recorded without a reload before: reload it now
        try:
            return log.recover_start() != rec["recoverStartTime"]  # reopened since recording (by anyone)
        except NotFoundError:
            return False  # deleted or not loaded: status decides from the listing

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        todo = [log for log, need in zip(logs, pool.map(needs_record, logs), strict=True) if need]
    # The watch runs while we record: a flag switched on between two of the per-reload checks is seen too.
    with Watch(view, {}, watch_period) as watch:
        this_run = record_logs(admin, view, state, state_path, todo, brokers, reload, concurrency, progress, watch,
                               counted)
    if counted:
        discharge_flushes(state, f"`start` re-recorded every log ({len(this_run)}) "
                          + ("with a reload" if reload else "without a reload, up to its newest ledger"))
    state["phase"] = "recorded"
    if this_run:
        state.pop("safeVerdict", None)  # a re-record starts the proof of those logs again: the verdict is earned anew
    state["recordedAt"] = now_ms()
    state["rerecorded"] = len(this_run)
    state["flushBaselines"] = flush_baselines(view, brokers)  # what every later poll's counters compare with
    state.pop("batchedFlushesByBroker", None)
    save_state(state_path, state)
    # (not saved) what this run re-recorded every log for, so the CLI can say why
    return dict(state, countedFlushes=[fact["evidence"] for _, fact in sorted(counted_facts.items())])


def record_logs(admin: TransactionsAdmin, view: ClusterView, state: dict, state_path: Path, todo: list["LogReader"],
                brokers: list[str], reload: bool, concurrency: int, progress: Progress,
                watch: Optional[Watch], counted: bool = False) -> list[tuple[str, str]]:
    """Record ``todo`` (reloaded per topic or coordinator unless ``reload`` is off), with the flags confirmed off
    after every reload and at both ends; a LastBatched already recorded is never lowered. Used by `start` and by
    `wait --rerecord`. Returns the (bucket, key) pairs recorded."""
    recorded = recorded_logs(state)
    by_unit: dict[str, list[LogReader]] = {}
    for log in todo:
        unit = coordinator_assign_partition(log.key) if log.component == "coordinator" else log.info["topic"]
        by_unit.setdefault(unit, []).append(log)
    if reload:
        # A topic's reload reopens every store of it, not only the ones asked for: each recorded sibling is recorded
        # with them (its reopen is ours, seen under the watch). Left out, it would read "reopened since recording",
        # and where only a re-record proves a reopen, re-recording it would reopen the first again, without end.
        for key, rec in state["pendingAckStores"].items():
            members = by_unit.get(rec.get("topic", ""))
            if members is not None and members[0].component == "pending-ack" and \
                    all(m.key != key for m in members):
                members.append(LogReader(admin, "pending-ack", key, {"topic": rec["topic"],
                                                                     "subscription": rec.get("subscription")}))
    total, done = len(by_unit), 0
    this_run: list[tuple[str, str]] = []

    def record_unit(unit: str) -> list[tuple[LogReader, Optional[dict]]]:
        members = by_unit[unit]
        if not reload:
            return [(log, _record(log, False, recorded.get((log.component, log.key)), counted)) for log in members]
        befores = {}
        for log in members:
            try:
                befores[log.key] = (log.recover_start(), log.ledgers())
            except NotFoundError:
                befores[log.key] = (None, [])
        try:
            admin_call(admin.unload_topic, unit)
        except NotFoundError:
            pass
        if members[0].component == "pending-ack":
            _load_after_unload(admin, unit)
        out = []
        for log in members:
            start_before, ledgers_before = befores[log.key]
            if start_before is None and not ledgers_before:
                # Not loaded before the unload: it opens (if at all) with batching off, but we did not see it
                # before, so status treats it conservatively until it is recorded with evidence.
                out.append((log, _after_reload_unknown(log)))
            else:
                out.append((log, _after_reload(log, ledgers_before, start_before)))
        # After every reload, not only at the end: batching switched on and off again while we reload topic after
        # topic leaves both ends off, yet every store reopened meanwhile batches, and one that then stays idle
        # never shows it again. The watch narrows what can still slip through to a switch within one period.
        on_now = flags_on_brokers(view, brokers) or _watched_on(watch)
        if on_now:
            raise _SwitchedOn(on_now)
        return out

    try:
        try:
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                # (a failing unit ends the map: the units not started yet are cancelled, none is reloaded)
                for items in pool.map(record_unit, list(by_unit)):
                    for log, rec in items:
                        if rec is None:
                            continue
                        bucket = "coordinators" if log.component == "coordinator" else "pendingAckStores"
                        previous = recorded.get((log.component, log.key)) or {}
                        if previous.get("lastBatchedLedgerId") is not None:
                            # never lower: what was batched before this record stays to be trimmed
                            rec["lastBatchedLedgerId"] = max(previous["lastBatchedLedgerId"],
                                                             rec.get("lastBatchedLedgerId") or -1)
                        if previous.get("acceptedReopens"):
                            rec["acceptedReopens"] = previous["acceptedReopens"]
                        state[bucket][log.key] = dict(log.info, **rec) if log.component == "pending-ack" else rec
                        this_run.append((bucket, log.key))
                    done += 1
                    if progress:
                        progress(done, total)
                    if done % 200 == 0:
                        save_state(state_path, state)
            # Both ends: if batching was switched back on while we reloaded, those reopens prove nothing.
            on = flags_on_brokers(view, brokers) or _watched_on(watch)
        except _SwitchedOn as exc:
            on = exc.on
        if on:
            for bucket, key in this_run:
                state[bucket][key]["recoverStartTime"] = None
                state[bucket][key]["batchingOff"] = False  # nothing recorded in this run proves batching off
            state["phase"] = "disabled"
            save_state(state_path, state)
            raise DowngradeError(f"batching was switched back on while recording ({describe_on(on)}); nothing "
                                 "recorded in this run counts: switch it off (or let `txnadmin downgrade start` "
                                 "do it) and run `txnadmin downgrade start` again", 1)
    finally:
        save_state(state_path, state)
    return this_run


def count_flushes(view: ClusterView, brokers: list[str], state: dict) -> None:
    """Compare every broker's flush counters with the checklist's baselines and keep what moved as a fact."""
    baselines = baselines_of(state)
    for reading in view.read_brokers(brokers).values():
        _, moved = counter_problem(reading, baselines)
        if moved is not None:
            remember_flush(state, moved, "start")


def _load_after_unload(admin: TransactionsAdmin, topic: str) -> None:
    """Pulsar leaves an unloaded topic closed until something looks it up, so an idle subscription's store would not
    reopen: read the topic's stats, which loads it on its owner. A failure is not fatal here: the store's stats then
    answer 404 and it is recorded "not loaded" (`wait` loads it again and judges it)."""
    try:
        admin.topic_stats(topic)
    except AdminError as exc:
        logger.warning("downgrade: loading %s after its unload failed (HTTP %s): %s", topic, exc.status, exc.reason)


def _watched_on(watch: Optional[Watch]) -> dict[str, list[str]]:
    """Flags the background watch saw on at any of its reads so far ({} without a watch)."""
    if watch is None:
        return {}
    on: dict[str, list[str]] = {}
    for rnd in list(watch.rounds):
        for broker, flags in rnd.flags_on().items():
            on.setdefault(broker, sorted(set(on.get(broker, [])) | set(flags)))
    return on


class _SwitchedOn(Exception):
    """A check after a reload found a batching flag on (broker → flags)."""

    def __init__(self, on: dict[str, list[str]]):
        super().__init__(describe_on(on))
        self.on = on


def _after_reload_unknown(log: LogReader) -> Optional[dict]:
    try:
        start_now = log.recover_start()
        ids = log.ledgers()
    except NotFoundError:
        return {"notLoaded": True, "lastBatchedLedgerId": None, "recoverStartTime": None, "confirmedLedger": None,
                "reloaded": True, "batchingOff": False, "recordedAt": now_ms()}
    # Opened by our unload, after the flags were confirmed off; the ledgers before its newest may be batched.
    older = sorted(ids)[:-1]
    return {"lastBatchedLedgerId": max(older) if older else (max(ids) if ids else None), "recoverStartTime": start_now,
            "confirmedLedger": max(ids) if ids else None, "reloaded": True, "batchingOff": True,
            "recordedAt": now_ms()}
