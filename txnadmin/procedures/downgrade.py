"""The guided PIP-160 downgrade, backend-agnostic (it talks only to TransactionsAdmin).

"Safe" must be a proof that no live transaction-log or pending-ack ledger can hold a batched entry, on the
target the operator meant. The evidence, per log (a coordinator's transaction log or a pending-ack store):

1. **Flags off everywhere.** Both batching flags are switched off (dynamic config) and confirmed off in the
   runtime configuration of *every* active broker, before any store is reloaded, after each topic's reload, and
   at the end.
2. **A reopen with batching off.** A store reads the flags only when it opens. So ``start`` reads the store's
   ``recoverStartTime`` (coordinator-stats / pending-ack-stats) and its ledgers *after* the flags are confirmed
   off, reloads it, and requires a new ``recoverStartTime``: that reopen happened with batching off. LastBatched
   is the largest ledger that existed before that reopen (re-read after the reload: a rollover in between moves
   it up). Without a reload the log keeps waiting until it is seen reopened and re-recorded; that re-record takes
   every ledger but the newest (the reopen's own) as LastBatched, as the reload does.
3. **Nobody reopened it since.** Every ``status`` poll compares ``recoverStartTime`` with the recorded value: a
   store reopened by anyone since recording may have reopened with batching on, so it is never "done" ("reopened
   since recording") until ``start`` re-records it. A managed ledger always opens a new ledger, so while a log's
   newest ledger is the one already checked, it cannot have reopened: the extra stats call is made only when the
   newest ledger changed, which keeps a 10,000-store poll at one call per store in the common case. A store seen
   done stays done while it has not reopened (it writes nothing batched while open, and deleted ledgers never come
   back), so later polls read only its ``recoverStartTime`` (pending-ack-stats), not its ledgers.
4. **The batched ledgers are gone.** Done when the oldest live ledger is newer than LastBatched. A store answers
   "deleted" only when it is gone from the topic listing; a 404 while listed means "not loaded" and keeps waiting.
   A broker answers pending-ack-stats of a deleted subscription with 500 (an unchecked lookup) and only the internal
   stats with 404: a 500 there with a 404 here is a gone subscription, which the listing judges the same way.
5. **The same target.** The checklist records the admin URL, the cluster name, the metadata/BookKeeper URIs and
   each coordinator log's ledger history; a checklist from another target is refused.

Every step is idempotent and the checklist file is rewritten atomically after each one, so a killed run
resumes where it was.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from ..admin.cluster import ClusterView
from ..admin.endpoints import JUDGED_COORDINATORS, JUDGED_LEDGERS, coordinator_ids, judged, log_stats
from ..admin.protocol import (
    PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError, BadReplyError, NotFoundError, TransactionsAdmin, TxnId,
    is_transient,
)
from ..names import TC_LOG_CURSOR, coordinator_assign_partition, is_pending_ack_store, transaction_log_local_name
from .state import ChecklistLock, load_state, new_state, save_state
from .watch import WATCH_PERIOD_S, Watch, baseline_of, counter_problem

logger = logging.getLogger(__name__)
Progress = Optional[Callable[[int, int], None]]
FLAG_PROPAGATION_S = 10.0  # dynamic config reaches brokers through a metadata watch: allow it this long
COORDINATOR_LOAD_WAIT_S = 30.0  # `start` gives a coordinator failing over (or replaying its log) this long to load

# Why a log still waits (LogStatus.kind); the live view groups by these.
KIND_DONE = "done"
KIND_NOT_ROLLED = "open ledger not rolled"
KIND_PINNED = "open transaction pinning trimming"
KIND_NOT_ACKING = "subscription not acknowledging"
KIND_TRIMMING = "not trimmed yet"
KIND_NOT_REOPENED = "store not reopened"
KIND_REOPENED = "reopened since recording"
KIND_NOT_LOADED = "store not loaded"
KIND_TC_NOT_LOADED = "coordinator not loaded"
KIND_SUBSCRIPTION_GONE = "subscription gone, store still listed"
KIND_UNRECORDED = "created since recording"
KIND_STILL_FLUSHING = "batched writer still flushing"
KIND_COUNTERS = "flush counters not confirmed"


class DowngradeError(Exception):
    """A step that cannot go on; ``exit_code`` 1 (failure / not safe) or 3 (target unreadable / cannot tell)."""

    def __init__(self, message: str, exit_code: int = 1, transient: bool = False):
        super().__init__(message)
        self.exit_code = exit_code
        self.transient = transient  # worth retrying within `wait --timeout` (connection lost, 502/504, 503+Retry-After)
        self.abandoned = False  # wait timed out with a poll still hanging (its threads are left behind)


@dataclass
class LogStatus:
    component: str  # "coordinator" | "pending-ack"
    name: str
    last_batched_ledger_id: Optional[int]
    oldest_ledger_id: Optional[int]
    done: bool
    reason: str
    suggestion: Optional[str] = None
    extra: dict = field(default_factory=dict)
    kind: str = KIND_DONE
    reopened_to: Optional[int] = None  # seen reopened at this recoverStartTime (judged by status, not shown)

    def to_json(self) -> dict:
        out = {"component": self.component, "name": self.name, "lastBatchedLedgerId": self.last_batched_ledger_id,
               "oldestLedgerId": self.oldest_ledger_id, "done": self.done, "reason": self.reason,
               "waitingFor": None if self.done else self.kind}
        if self.suggestion:
            out["suggestion"] = self.suggestion
        out.update(self.extra)
        return out


@dataclass
class Report:
    safe: bool
    flags_disabled: bool
    logs: list[LogStatus]
    verification: Optional[dict]
    target: dict = field(default_factory=dict)
    brokers: list[str] = field(default_factory=list)
    transient_error: Optional[str] = None  # wait: the last poll failed transiently (shown, then retried)
    abandoned: bool = False  # wait: a poll was still hanging at the deadline (its threads are left behind)
    reopens_accepted: int = 0  # reopens the watch proved harmless, over the whole checklist
    poll: Optional[int] = None  # this poll's number (wait's polls only)
    stop: Optional[str] = None  # wait stopped before --timeout: why, and the command that goes on
    topic_loads: list[dict] = field(default_factory=list)  # wait: topics this poll loaded (see _load_its_topic)

    @property
    def waiting(self) -> list[LogStatus]:
        return [l for l in self.logs if not l.done]

    def groups(self) -> dict[str, list[LogStatus]]:
        """Waiting logs grouped by why they wait (the live view's sections)."""
        out: dict[str, list[LogStatus]] = {}
        for log in self.waiting:
            out.setdefault(log.kind, []).append(log)
        return out

    def to_json(self) -> dict:
        return {"safe": self.safe, "target": self.target, "flagsDisabled": self.flags_disabled,
                "brokersChecked": self.brokers, "logs": len(self.logs), "waiting": len(self.waiting),
                "waitingByReason": {k: len(v) for k, v in sorted(self.groups().items())},
                "verification": self.verification, "reopensAccepted": self.reopens_accepted, "poll": self.poll,
                "stopped": self.stop, "topicLoads": self.topic_loads,
                "components": [l.to_json() for l in self.logs]}


def _now_ms() -> int:
    return int(time.time() * 1000)


_PERMANENT_503 = "transactionCoordinatorEnabled"


def _failure(exc: AdminError, what: str = "cannot read the target") -> DowngradeError:
    """An admin failure as the downgrade words it: 3 when the target cannot say (transient ones marked for `wait`),
    1 when it answered no."""
    if exc.status in (401, 403):
        return DowngradeError(f"{what}: {exc.reason}", 3)
    if is_transient(exc) and not (exc.status == 503 and _PERMANENT_503 in exc.reason):
        return DowngradeError(f"{what}: {exc.reason}", 3, transient=True)
    if exc.status == 0 or exc.status >= 500:
        return DowngradeError(f"{what}: {exc.reason}", 3)
    return DowngradeError(exc.reason, 1)


def _call(fn, *args, **kwargs):
    """Admin calls with target failures turned into exit code 3 (transient ones marked for `wait`)."""
    try:
        return fn(*args, **kwargs)
    except NotFoundError:
        raise
    except AdminError as exc:
        raise _failure(exc) from None


# -- target identity and brokers (one rule each, in ClusterView) --------------------------------

def target_identity(admin: TransactionsAdmin, admin_url: str, view: Optional[ClusterView] = None) -> dict[str, Any]:
    """What a checklist is about: the admin URL, the cluster's own name and its metadata/BookKeeper URIs."""
    view = view or ClusterView(admin, admin_url)
    return dict(_call(view.identity), adminUrl=admin_url)


def check_identity(state: dict, ident: dict, state_path: Path) -> None:
    """Refuse a checklist recorded on another target (exit 3), saying how to proceed."""
    recorded = state.get("identity")
    if not recorded:
        raise DowngradeError(f"{state_path}: this checklist does not say which target it belongs to (written by an "
                             "older txnadmin); start over with `txnadmin downgrade reset` or use --state another file", 3)
    diffs = [f"{k} {recorded.get(k)!r} here vs {ident.get(k)!r} on the target"
             for k in ("adminUrl", "clusterName", "clusters", "metadataStoreUrl", "bookkeeperMetadataServiceUri")
             if recorded.get(k) != ident.get(k)]
    if diffs:
        raise DowngradeError(f"{state_path} was recorded on another target ({'; '.join(diffs)}): use --state "
                             "another file for this target, or `txnadmin downgrade reset` to discard it", 3)


def _ledger_history_fits(state: dict, tc_id: str, ids: list[int], state_path: Path) -> None:
    rec = state["coordinators"].get(tc_id)
    if rec and ids and rec.get("confirmedLedger") is not None and max(ids) < rec["confirmedLedger"]:
        raise DowngradeError(f"{state_path}: coordinator {tc_id}'s newest ledger is {max(ids)}, older than the "
                             f"{rec['confirmedLedger']} recorded here: this is not the target the checklist was "
                             "recorded on; use --state another file or `txnadmin downgrade reset`", 3)


def active_brokers(admin: TransactionsAdmin, ident: dict, view: Optional[ClusterView] = None) -> list[str]:
    view = view or ClusterView(admin, ident.get("adminUrl", ""))
    brokers = _call(view.active_brokers)
    if not brokers:
        raise DowngradeError("the target lists no active brokers (GET /admin/v2/brokers/{cluster}); cannot confirm "
                             "the batching flags are off everywhere", 3)
    return brokers


def flags_on_brokers(view: ClusterView, brokers: list[str]) -> dict[str, list[str]]:
    """Broker → batching flags still on in its runtime config ({} when off everywhere). Exit 3 if one can't say."""
    try:
        return view.flags_on_brokers(brokers)
    except AdminError as exc:
        what = ("cannot confirm the batching flags on every active broker (each must be reachable from here to "
                "prove batching is off)")
        if isinstance(exc, NotFoundError):
            raise DowngradeError(f"{what}: {exc.reason}", 3) from None
        raise _failure(exc, what) from None


def flush_baselines(view: ClusterView, brokers: list[str]) -> dict[str, dict]:
    """Each broker's process and batched-writer flush count now (the baselines every later poll compares to);
    brokers whose counters are no evidence are left out (a later reading of theirs then counts from zero)."""
    out = {}
    for broker, reading in view.read_brokers(brokers).items():
        base = baseline_of(reading)
        if base is not None:
            out[broker] = base
    return out


def _describe_on(on: dict[str, list[str]]) -> str:
    return "; ".join(f"{b}: {', '.join(f + '=true' for f in flags)}" for b, flags in sorted(on.items()))


def confirm_flags_off(view: ClusterView, brokers: list[str], wait_s: float = FLAG_PROPAGATION_S) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        on = flags_on_brokers(view, brokers)
        if not on:
            return
        if time.monotonic() >= deadline:
            raise DowngradeError(f"batching is still on after {wait_s:.0f} s: {_describe_on(on)}; check the "
                                 "brokers' dynamic config (or broker.conf) and run `txnadmin downgrade start` again", 1)
        time.sleep(0.2)


# -- discovery ----------------------------------------------------------------------------------

def _pending_ack_stores(admin: TransactionsAdmin, concurrency: int) -> dict[str, dict]:
    """Every pending-ack store of the target, as the checklist records it: store name → origin topic, subscription."""
    found = _call(ClusterView(admin).pending_ack_stores, concurrency)
    return {name: {"topic": s.topic, "subscription": s.subscription} for name, s in found.items()}


# -- plan ---------------------------------------------------------------------------------------

def plan(admin: TransactionsAdmin, concurrency: int = 16) -> dict[str, Any]:
    """What `start` would touch: counts for the confirmation (nothing is changed)."""
    coordinators = _call(admin.list_coordinators)
    stores = _pending_ack_stores(admin, concurrency)
    return {"coordinators": len(coordinators), "pendingAckStores": len(stores),
            "topics": len({info["topic"] for info in stores.values()})}


# -- per-log evidence ---------------------------------------------------------------------------

class _Log:
    """How to read one log's evidence: its ledgers and its store's recoverStartTime. ``load_wait_s``: how long a
    coordinator answering 404 is asked again before it counts as not loaded (`start` cannot record it then)."""

    def __init__(self, admin: TransactionsAdmin, component: str, key: str, info: dict, load_wait_s: float = 0.0):
        self.admin, self.component, self.key, self.info = admin, component, key, info
        self.load_wait_s = load_wait_s

    def _loaded(self, read):
        """``read()``, asked again while a coordinator answers 404 for up to ``load_wait_s``: a broker answers 404
        from the moment the coordinator's bundle moves until the new owner has replayed its log."""
        if self.component != "coordinator" or self.load_wait_s <= 0:
            return read()
        until = None
        while True:
            try:
                return read()
            except NotFoundError:
                now = time.monotonic()
                until = now + self.load_wait_s if until is None else until
                if now >= until:
                    raise DowngradeError(coordinator_not_loaded(self.key, f"for {self.load_wait_s:g} s") + "; run "
                                         "`txnadmin downgrade start` again once it answers (it resumes); if it does "
                                         f"not, {TC_OWNER_LOG}", 3) from None
                time.sleep(min(0.5, until - now))

    def ledgers(self) -> list[int]:
        return [int(l["ledgerId"]) for l in self.live_ledgers()[1]]

    def live_ledgers(self) -> tuple[Optional[str], list[dict]]:
        """(its managed ledger's name when the target says it, its ledgers as the target lists them)."""
        return self._loaded(self._live_ledgers)

    def _live_ledgers(self) -> tuple[Optional[str], list[dict]]:
        if self.component == "coordinator":
            stats = _call(lambda: log_stats(self.admin.coordinator_internal_stats(int(self.key)),
                                            "transactionLogStats", f"coordinator {self.key}'s internal stats",
                                            JUDGED_LEDGERS))
        else:
            stats = _call(lambda: log_stats(self.admin.pending_ack_internal_stats(
                self.info["topic"], self.info["subscription"]), "pendingAckLogStats",
                f"{self.key}'s internal stats", JUDGED_LEDGERS))
        name = stats.get("managedLedgerName")
        return (name if isinstance(name, str) and name else None), stats["managedLedgerInternalStats"]["ledgers"]

    def recover_start(self) -> Optional[int]:
        if self.component == "coordinator":
            stats = self._loaded(lambda: _call(self.admin.coordinator_stats, int(self.key)))
        else:
            stats = self._pending_ack_stats()
        value = stats.get("recoverStartTime")
        return int(value) if value else None  # 0: not recovered yet, no evidence

    def _pending_ack_stats(self) -> dict:
        """pendingAckStats; a server error there is _SubscriptionGone when the internal stats answer 404."""
        topic, sub = self.info["topic"], self.info["subscription"]
        try:
            return self.admin.pending_ack_stats(topic, sub)
        except NotFoundError:
            raise
        except AdminError as exc:
            if exc.status < 500 or isinstance(exc, BadReplyError):
                raise _failure(exc) from None
            failure = exc
        # Pulsar's loaded topic dereferences a missing subscription here unchecked (a NullPointerException, HTTP
        # 500) but checks it for the internal stats (404): that 404 tells a deleted subscription from a failing broker.
        try:
            self.admin.pending_ack_internal_stats(topic, sub)
        except NotFoundError:
            raise _SubscriptionGone(failure) from None
        except AdminError:
            pass  # the internal stats fail too: say what the stats call answered
        raise _failure(failure, f"cannot read the pending-ack stats of {self.key} (HTTP {failure.status})") from None


class _SubscriptionGone(NotFoundError):
    """pendingAckStats failed with a server error while pendingAckInternalStats answered 404: the subscription is
    missing from its loaded topic. A 404 to every caller that treats the store as absent; the listing decides."""

    def __init__(self, failure: AdminError):
        super().__init__(failure.reason)
        self.failure = failure


TC_OWNER_LOG = "`pulsar-admin transactions coordinators-list` names its broker, whose log says why"


def _not_this_cluster(key: str) -> DowngradeError:
    """A recorded coordinator the target does not list at all (a listed one answering 404 is only not loaded)."""
    return DowngradeError(f"coordinator {key} is not among the target's coordinators: coordinators are never "
                          "deleted, so this is not the cluster the checklist was recorded on", 3)


def coordinator_not_loaded(key: str, how_long: str = "") -> str:
    """Why a coordinator answering 404 is not judged: Pulsar's admin handlers find a coordinator only once its
    current owner has replayed its log, so a failover answers 404 for seconds (minutes for a long log)."""
    return (f"coordinator {key} is not loaded (its stats answer 404{' ' + how_long if how_long else ''}): it is "
            "failing over to another broker or replaying its transaction log")


def _record(log: _Log, reload: bool, previous: Optional[dict]) -> Optional[dict]:
    """Record one log after the flags were confirmed off. None when the store does not exist (any more)."""
    try:
        before_start = log.recover_start()
        before = log.ledgers()
    except NotFoundError:
        before_start, before = None, []
    if reload:
        return None  # the caller reloads per topic and then calls _after_reload
    # Without a reload, the store batches until it reopens. A re-record after we saw it reopen (between two
    # confirmations that the flags were off) is the first baseline known to have opened with batching off.
    reopened = previous is not None and previous.get("recoverStartTime") not in (None, before_start)
    last = _last_batched(before, reopened, previous)
    rec = {"lastBatchedLedgerId": last, "recoverStartTime": before_start,
           "confirmedLedger": max(before) if before else None, "reloaded": False, "recordedAt": _now_ms()}
    # an earlier "batching off" holds only for the same open store (a record voided by a switch-on has none)
    same_store = previous is not None and previous.get("recoverStartTime") == before_start
    rec["batchingOff"] = bool(reopened or (same_store and (previous or {}).get("batchingOff")))
    if before_start is None:
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


def _after_reload(log: _Log, before: list[int], before_start: Optional[int]) -> dict:
    """LastBatched = the largest ledger before the reopen, re-read after it (a rollover in between moves it up)."""
    try:
        after_start = log.recover_start()
        after = log.ledgers()
    except NotFoundError:
        return {"notLoaded": True, "lastBatchedLedgerId": max(before) if before else None, "recoverStartTime": None,
                "confirmedLedger": None, "reloaded": True, "batchingOff": False, "recordedAt": _now_ms()}
    if after_start is None or after_start == before_start:
        raise DowngradeError(f"{log.component} {log.key}: the store did not reopen after the reload "
                             f"(recoverStartTime still {before_start}); run `txnadmin downgrade start` again", 1)
    # The newest ledger after the reload is the one the reopen created (or newer): everything older may be batched.
    older = sorted(after)[:-1]
    last = max([*before, *older]) if (before or older) else None
    return {"lastBatchedLedgerId": last, "recoverStartTime": after_start, "confirmedLedger": max(after),
            "reloaded": True, "batchingOff": True, "recordedAt": _now_ms()}


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
    coordinators = _call(lambda: judged(admin.list_coordinators(), JUDGED_COORDINATORS, "coordinators"))
    if not coordinators:
        raise DowngradeError("no transaction coordinators on the target (is transactionCoordinatorEnabled=true?)")
    brokers = active_brokers(admin, ident, view)
    on = flags_on_brokers(view, brokers)
    if on:
        for flag in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG):
            _call(admin.update_dynamic_config, flag, "false")
        state["changeTime"] = _now_ms()
    confirm_flags_off(view, brokers, flag_wait_s)  # before any reload or LastBatched read
    state["reload"] = reload
    state["brokersChecked"] = brokers
    if state["phase"] == "new":
        state["phase"] = "disabled"
    save_state(state_path, state)

    stores = _pending_ack_stores(admin, concurrency)
    # a coordinator answering 404 is failing over or replaying its log: asked again for a while, then exit 3
    logs = [_Log(admin, "coordinator", str(c["id"]), {}, coordinator_wait_s) for c in coordinators]
    logs += [_Log(admin, "pending-ack", store, info) for store, info in stores.items()]
    recorded = _recorded(state)

    def needs_record(log: _Log) -> bool:
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
        this_run = _record_logs(admin, view, state, state_path, todo, brokers, reload, concurrency, progress, watch)
    state["phase"] = "recorded"
    state["recordedAt"] = _now_ms()
    state["rerecorded"] = len(this_run)
    state["flushBaselines"] = flush_baselines(view, brokers)  # what every later poll's counters compare with
    state.pop("batchedFlushesByBroker", None)
    save_state(state_path, state)
    return state


def _recorded(state: dict) -> dict[tuple[str, str], dict]:
    return {**{("coordinator", k): v for k, v in state["coordinators"].items()},
            **{("pending-ack", k): v for k, v in state["pendingAckStores"].items()}}


def _record_logs(admin: TransactionsAdmin, view: ClusterView, state: dict, state_path: Path, todo: list["_Log"],
                 brokers: list[str], reload: bool, concurrency: int, progress: Progress,
                 watch: Optional[Watch]) -> list[tuple[str, str]]:
    """Record ``todo`` (reloaded per topic or coordinator unless ``reload`` is off), with the flags confirmed off
    after every reload and at both ends; a LastBatched already recorded is never lowered. Used by `start` and by
    `wait --rerecord`. Returns the (bucket, key) pairs recorded."""
    recorded = _recorded(state)
    by_unit: dict[str, list[_Log]] = {}
    for log in todo:
        unit = coordinator_assign_partition(log.key) if log.component == "coordinator" else log.info["topic"]
        by_unit.setdefault(unit, []).append(log)
    total, done = len(by_unit), 0
    this_run: list[tuple[str, str]] = []

    def record_unit(unit: str) -> list[tuple[_Log, Optional[dict]]]:
        members = by_unit[unit]
        if not reload:
            return [(log, _record(log, False, recorded.get((log.component, log.key)))) for log in members]
        befores = {}
        for log in members:
            try:
                befores[log.key] = (log.recover_start(), log.ledgers())
            except NotFoundError:
                befores[log.key] = (None, [])
        try:
            _call(admin.unload_topic, unit)
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
            raise DowngradeError(f"batching was switched back on while recording ({_describe_on(on)}); nothing "
                                 "recorded in this run counts: switch it off (or let `txnadmin downgrade start` "
                                 "do it) and run `txnadmin downgrade start` again", 1)
    finally:
        save_state(state_path, state)
    return this_run


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
        super().__init__(_describe_on(on))
        self.on = on


def _after_reload_unknown(log: _Log) -> Optional[dict]:
    try:
        start_now = log.recover_start()
        ids = log.ledgers()
    except NotFoundError:
        return {"notLoaded": True, "lastBatchedLedgerId": None, "recoverStartTime": None, "confirmedLedger": None,
                "reloaded": True, "batchingOff": False, "recordedAt": _now_ms()}
    # Opened by our unload, after the flags were confirmed off; the ledgers before its newest may be batched.
    older = sorted(ids)[:-1]
    return {"lastBatchedLedgerId": max(older) if older else (max(ids) if ids else None), "recoverStartTime": start_now,
            "confirmedLedger": max(ids) if ids else None, "reloaded": True, "batchingOff": True,
            "recordedAt": _now_ms()}


# -- status -------------------------------------------------------------------------------------

def _require_state(state_path: Path) -> dict[str, Any]:
    state = load_state(state_path)
    if state is None or state["phase"] != "recorded":
        raise DowngradeError(f"{state_path}: no recorded downgrade here; run `txnadmin downgrade start` first", 1)
    return state


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


REOPENED_HINT = "run `txnadmin downgrade start` again: it re-records exactly the logs that reopened"
RERECORD_HINT = ("`txnadmin downgrade wait --rerecord` reloads and re-records exactly these logs (or run "
                 "`txnadmin downgrade start` again)")


def _evidence(log: _Log, rec: dict, listed: Optional[set[str]], state_path: Path, state: dict,
              coordinators: Optional[set[int]] = None) -> tuple[Optional[LogStatus], Optional[list[int]], Optional[int]]:
    """(a verdict already reached, or None; the ledgers; a newly confirmed newest ledger to remember).
    ``coordinators``: the ids the target lists this poll (a recorded one missing there is another cluster)."""
    name = log.key if log.component == "pending-ack" else transaction_log_local_name(log.key)
    extra = ({"topic": log.info["topic"], "subscription": log.info["subscription"]} if log.component == "pending-ack"
             else {"coordinatorId": int(log.key)})
    last = rec.get("lastBatchedLedgerId")

    def status(kind: str, reason: str, suggestion: Optional[str] = None, done: bool = False, oldest=None):
        return LogStatus(log.component, name, last, oldest, done, reason, suggestion, dict(extra), kind)

    def missing(exc: NotFoundError, stats_read: bool = True) -> LogStatus:
        if log.component == "coordinator":
            if coordinators is not None and int(log.key) not in coordinators:
                raise _not_this_cluster(log.key)
            # The identity was checked this poll: a coordinator it lists answering 404 is between two owners.
            return _tc_not_loaded(log.key, rec)
        if listed is not None and log.key not in listed:
            return status(KIND_DONE, "store deleted (gone from the topic listing)", done=True)
        if not stats_read:
            try:  # its internal stats answered 404: a topic not loaded, or (the stats' 500 says) a subscription gone
                log.recover_start()
            except _SubscriptionGone as gone:
                exc = gone
            except (NotFoundError, DowngradeError):
                pass  # not loaded, or unreadable: either way it waits as not loaded
        if isinstance(exc, _SubscriptionGone):
            # Not "not loaded": its topic is loaded and lacks the subscription, yet the store's ledgers remain,
            # and a subscription re-created under that name would replay them.
            sub = log.info["subscription"]
            return status(KIND_SUBSCRIPTION_GONE, f"subscription '{sub}' is missing from its loaded topic (its "
                          f"pending-ack stats answer HTTP {exc.failure.status}, its internal stats 404) while the "
                          "store is still listed: it cannot be judged", "if the subscription is gone for good, "
                          f"delete its leftover store (`pulsar-admin topics delete {log.key}`): the next poll counts "
                          "it deleted; if it is not gone, see the broker's log for that error")
        return status(KIND_NOT_LOADED, "store not loaded (listed, but its stats answer 404): it cannot be judged "
                      "until it is loaded", "`txnadmin downgrade wait` loads its topic itself (a read of its stats) "
                      f"and judges the reopen; or load it (`pulsar-admin topics stats {log.info['topic']}`) while a "
                      "`wait` runs")

    if log.component == "pending-ack" and listed is not None and log.key not in listed:
        # Gone from this poll's listing: one internal-stats call confirms it (404). Not the stats first: a broker
        # answers those with a 500 for a deleted subscription, which costs every poll retries and their backoff.
        try:
            log.live_ledgers()
        except NotFoundError as exc:
            return missing(exc), None, None
    if rec.get("unproven"):
        # A reopen the watch could not prove harmless (or whose acceptance a moved counter revoked): only a
        # re-record ends it. Still asked, so a store deleted meanwhile counts as deleted.
        try:
            log.recover_start()
        except NotFoundError as exc:
            return missing(exc), None, None
        unproven = status(KIND_REOPENED, f"reopened since recording, not proven harmless: {rec['unproven']}",
                          RERECORD_HINT)
        unproven.extra["proof"] = rec["unproven"]
        return unproven, None, None
    start_now, start_read = None, False
    if (log.component == "pending-ack" and rec.get("recoverStartTime") is not None and rec.get("batchingOff")
            and rec.get("provenDone") == rec["recoverStartTime"]):
        # Proven done at an earlier poll by this same open store. A store reads the batching flags only when it
        # opens, so while it has not reopened (same recoverStartTime) it writes no batched entry, and ledgers up to
        # LastBatched, once gone, never come back: it is still done. One small call instead of its ledgers.
        try:
            start_now, start_read = log.recover_start(), True
        except NotFoundError as exc:
            return missing(exc), None, None
        if start_now == rec["recoverStartTime"]:
            return (status(KIND_DONE, f"oldest live ledger {rec.get('provenOldest')} was newer than LastBatched "
                           f"{last} when last read, and the store has not reopened since (recoverStartTime "
                           "unchanged)", done=True, oldest=rec.get("provenOldest")), None, None)
    try:
        ids = log.ledgers()
    except NotFoundError as exc:
        return missing(exc, stats_read=False), None, None
    if log.component == "coordinator":
        _ledger_history_fits(state, log.key, ids, state_path)
    newest = max(ids) if ids else None
    confirmed = None
    if rec.get("recoverStartTime") is None:
        return (status(KIND_REOPENED, "no recoverStartTime was recorded for this store (it was not loaded when "
                       "recorded, or batching was switched on meanwhile)", REOPENED_HINT, oldest=min(ids, default=None)),
                ids, None)
    if start_read or newest is None or newest != rec.get("confirmedLedger"):
        # The newest ledger changed since we last saw the same recoverStartTime: a rollover, or a reopen (or the
        # store was read above and has reopened).
        try:
            now = start_now if start_read else log.recover_start()
        except NotFoundError as exc:
            return missing(exc), None, None
        if now != rec["recoverStartTime"]:
            seen = status(KIND_REOPENED, f"reopened since recording (recoverStartTime {rec['recoverStartTime']} "
                          f"→ {now}): it may have reopened with batching on", REOPENED_HINT,
                          oldest=min(ids, default=None))
            seen.reopened_to = now  # status() judges whether the watch proves this reopen harmless
            return seen, ids, None
        confirmed = newest
    if not rec.get("batchingOff"):
        return (status(KIND_NOT_REOPENED, "still batching until it reopens (recorded without a reload)",
                       "reload it (`txnadmin downgrade start` without --no-reload) or restart its broker, then run "
                       "`txnadmin downgrade start` again", oldest=min(ids, default=None)), ids, confirmed)
    return None, ids, confirmed


TC_NOT_LOADED_HINT = ("wait: it is judged again once it answers (as reopened, when it was); if it persists, "
                      + TC_OWNER_LOG)


def _tc_not_loaded(key: str, rec: dict) -> LogStatus:
    """A recorded coordinator answering 404: never done at this poll, and not seen unchanged either."""
    return LogStatus("coordinator", transaction_log_local_name(key), rec.get("lastBatchedLedgerId"), None, False,
                     coordinator_not_loaded(key) + ": it cannot be judged until it is loaded", TC_NOT_LOADED_HINT,
                     {"coordinatorId": int(key)}, KIND_TC_NOT_LOADED)


def _coordinator_status(admin: TransactionsAdmin, log: _Log, rec: dict, ids: list[int]) -> LogStatus:
    last = rec["lastBatchedLedgerId"]
    tc_id = int(log.key)
    oldest = min(ids)
    status = LogStatus("coordinator", transaction_log_local_name(tc_id), last, oldest, last is None or oldest > last,
                       "", extra={"coordinatorId": tc_id}, kind=KIND_DONE)
    if status.done:
        status.reason = f"oldest live ledger {oldest} is newer than LastBatched {last}"
        return status
    ml = _call(lambda: log_stats(admin.coordinator_internal_stats(tc_id), "transactionLogStats",
                                 f"coordinator {tc_id}'s internal stats"))["managedLedgerInternalStats"]
    if [i for i in ids if i <= last] == [ids[-1]]:
        status.kind = KIND_NOT_ROLLED
        status.reason = f"the open ledger {ids[-1]} has not rolled over yet"
        status.suggestion = "wait for managedLedgerMaxEntriesPerLedger / managedLedgerMaxLedgerRolloverTimeMinutes"
        return status
    mark_delete = ml.get("cursors", {}).get(TC_LOG_CURSOR, {}).get("markDeletePosition", "?")
    try:
        open_txns = _call(admin.slow_transactions, 0, tc_id)
    except (DowngradeError, NotFoundError) as exc:
        # Only names the pinning transaction: Pulsar cannot describe one whose acked subscription was deleted
        # (500 for the whole listing), and that must not stop the other logs' judgment. The log still waits.
        why = exc.reason if isinstance(exc, NotFoundError) else str(exc)
        status.kind = KIND_PINNED
        status.reason = (f"ledgers up to {last} not trimmed yet (mark-delete at {mark_delete}); the open transaction "
                         f"that may pin trimming could not be named: {why}")
        status.suggestion = (f"`txnadmin transactions list -c {tc_id}` names it once the broker can describe it; a "
                             "transaction that acked on a subscription deleted since cannot be described until it "
                             "ends (at its timeout)")
        return status
    pinned = sorted((m for m in open_txns.values() if m.get("status") == "OPEN"), key=lambda m: m["openTimestamp"])
    if pinned:
        txn = pinned[0]
        txn_id = TxnId.parse(txn["txnId"])
        status.kind = KIND_PINNED
        status.reason = (f"open transaction {txn['txnId']} (since {_iso(txn['openTimestamp'])}"
                         f"{', owner ' + txn['owner'] if txn.get('owner') else ''}) pins trimming at {mark_delete}")
        status.suggestion = f"txnadmin transactions abort-transaction -m {txn_id.most_bits} -l {txn_id.least_bits}"
        status.extra["pinnedBy"] = txn["txnId"]
        status.extra["pinnedSince"] = txn["openTimestamp"]
    else:
        status.kind = KIND_TRIMMING
        status.reason = f"ledgers up to {last} not trimmed yet (mark-delete at {mark_delete})"
    return status


def _store_status(log: _Log, rec: dict, ids: list[int]) -> LogStatus:
    last = rec["lastBatchedLedgerId"]
    extra = {"topic": log.info["topic"], "subscription": log.info["subscription"]}
    oldest = min(ids)
    status = LogStatus("pending-ack", log.key, last, oldest, last is None or oldest > last, "", extra=extra)
    if status.done:
        status.reason = (f"oldest live ledger {oldest} is newer than LastBatched {last}" if last is not None
                         else "reopened with batching off and had no ledger before")
    elif [i for i in ids if i <= last] == [ids[-1]]:
        status.kind = KIND_NOT_ROLLED
        status.reason = f"the open ledger {ids[-1]} has not rolled over yet"
        status.suggestion = "wait for managedLedgerMaxEntriesPerLedger / managedLedgerMaxLedgerRolloverTimeMinutes"
    else:
        status.kind = KIND_NOT_ACKING
        status.reason = (f"waiting for subscription '{log.info['subscription']}' to acknowledge past what ledger "
                         f"{oldest} logged (the store trims only by its subscription's mark-delete)")
        status.suggestion = "check for stuck consumers or open transactions: txnadmin transactions list"
    return status


def _topic_listing(admin: TransactionsAdmin, concurrency: int) -> set[str]:
    """Every topic the target lists, system topics included: one listing per namespace (ClusterView's walk)."""
    return {t for topics in _call(ClusterView(admin).topic_listing, concurrency).values() for t in topics}


@dataclass
class _Poll:
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
        self.polls: dict[int, _Poll] = {}
        self.seen_unchanged: dict[tuple[str, str], int] = {}  # log → the last poll that saw it unchanged
        self.pending: dict[tuple[str, str], tuple[int, int, Optional[int]]] = {}  # log → (from, seen, to)
        self.loads: dict[int, set[str]] = {}  # poll → the stores whose topic it loaded (at most once each)

    def new_poll(self, state: dict) -> "_Poll":
        """The next observation, numbered after every earlier one of this wait and of the checklist. The number
        comes from this session, not from the checklist alone: a poll that changed nothing saves nothing, and a
        number read back from the file would name two polls, bracketing a reopen with a poll taken after it."""
        number = max(int(state.get("polls", 0)), max(self.polls, default=0)) + 1
        state["polls"] = number
        poll = _Poll(number, time.monotonic(), time.time())
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


def _judge_reopen(session: Session, key: tuple[str, str], rec: dict, poll: _Poll,
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


def _accepted_count(state: dict) -> int:
    return sum(len(rec.get("acceptedReopens") or []) for bucket in ("coordinators", "pendingAckStores")
               for rec in state[bucket].values())


def status(admin: TransactionsAdmin, state_path: Path, concurrency: int = 16, progress: Progress = None,
           target: Optional[str] = None, flag_wait_s: float = 0.0, session: Optional[Session] = None,
           save: bool = True) -> Report:
    """One poll, read-only on the target. ``save``: remember in the checklist what this poll proved (only the
    checklist's one writer, `wait`, saves: `downgrade status` run beside it reads). ``session``: `wait`'s watch and
    polls, which let a reopen be accepted when the watch proves it harmless; without one, a reopen is unproven."""
    view = session.view if session is not None else ClusterView(admin, target or "")
    if session is not None:
        view._memo.clear()  # identity and brokers are read afresh at every poll
    # a target that cannot be read says so before a checklist is looked for: none could be about it
    ident = target_identity(admin, target, view) if target is not None else None
    state = _require_state(state_path)
    if ident is None:
        ident = target_identity(admin, state["identity"]["adminUrl"], view)
    check_identity(state, ident, state_path)
    brokers = active_brokers(admin, ident, view)
    on = flags_on_brokers(view, brokers)
    if on:
        raise DowngradeError(
            f"batching was switched back on ({_describe_on(on)}): stores that reopen now batch again; run "
            "`txnadmin downgrade start` again to disable it and re-record what reopened", 1)
    poll: Optional[_Poll] = None
    if session is not None:
        poll = session.new_poll(state)
        if session.watch is not None:
            session.watch.read_round()  # a read of every broker right before this poll's reads of the logs
        poll.t_reads = time.monotonic()
    baselines = _baselines(state)
    changed = False
    moved = _moved(view, brokers, baselines, session)
    if moved is not None:
        changed |= _revoke(state, moved)
    coord = [(_Log(admin, "coordinator", k, {}), rec) for k, rec in sorted(state["coordinators"].items(),
                                                                          key=lambda kv: int(kv[0]))]
    stores = [(_Log(admin, "pending-ack", k, rec), rec) for k, rec in sorted(state["pendingAckStores"].items())]
    jobs = coord + stores
    # Logs that exist now but were never recorded may have opened while batching was on: they are part of the
    # proof too. One listing per namespace (also what tells "deleted" from "not loaded").
    listing = _topic_listing(admin, concurrency)
    unrecorded = [LogStatus("pending-ack", name, None, None, False, "created since recording: it may have opened "
                            "while batching was on", RERECORD_HINT, kind=KIND_UNRECORDED)
                  for name in sorted(listing) if is_pending_ack_store(name)
                  and name not in state["pendingAckStores"]]
    tc_ids = set(_call(lambda: coordinator_ids(admin.list_coordinators())))
    unrecorded += [LogStatus("coordinator", transaction_log_local_name(i), None, None, False, "created since "
                             "recording (coordinators scaled up)", RERECORD_HINT, extra={"coordinatorId": i},
                             kind=KIND_UNRECORDED)
                   for i in sorted(tc_ids) if str(i) not in state["coordinators"]]

    def one(job) -> tuple[LogStatus, Optional[int]]:
        log, rec = job
        verdict, ids, confirmed = _evidence(log, rec, listing, state_path, state, tc_ids)
        if verdict is not None and verdict.kind == KIND_NOT_LOADED and session is not None and poll is not None:
            return _load_its_topic(admin, session, poll, log, verdict), confirmed
        if verdict is not None:
            return verdict, confirmed
        assert ids is not None  # _evidence gives the ledgers whenever it reaches no verdict
        if log.component == "coordinator":
            try:
                return _coordinator_status(admin, log, rec, ids), confirmed
            except NotFoundError:  # it went away between two reads of this poll
                return _tc_not_loaded(log.key, rec), None
        return _store_status(log, rec, ids), confirmed

    results: list[tuple[LogStatus, Optional[int]]] = []
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for answer in pool.map(one, jobs):
            results.append(answer)
            if progress:
                progress(len(results), len(jobs))
    if poll is not None:
        poll.t_end, poll.wall_end = time.monotonic(), time.time()
    logs: list[LogStatus] = []
    for job, (outcome, confirmed) in zip(jobs, results, strict=True):
        log, rec = job
        result = outcome
        key = (log.component, log.key)
        if result.kind == KIND_REOPENED and not rec.get("unproven"):
            result, confirmed, decided = _reopen(session, poll, key, job, result, confirmed, one)
            changed |= decided
        elif session is not None and poll is not None and result.kind not in (
                KIND_NOT_LOADED, KIND_TC_NOT_LOADED, KIND_SUBSCRIPTION_GONE) and not (
                result.done and "deleted" in result.reason):
            session.seen_unchanged[key] = poll.number  # read, and not reopened since recording
        if rec.get("acceptedReopens"):
            result.extra["acceptedReopens"] = rec["acceptedReopens"]
        logs.append(result)
        if confirmed is not None and confirmed != rec.get("confirmedLedger"):
            rec["confirmedLedger"] = confirmed
            changed = True
        if (result.component == "pending-ack" and result.done and result.oldest_ledger_id is not None
                and rec.get("provenDone") != rec.get("recoverStartTime")):
            # Done from its ledgers, with recoverStartTime confirmed unchanged in this poll (an unchanged newest
            # ledger, or the stats call): the next polls only need to see that it did not reopen.
            rec["provenDone"], rec["provenOldest"] = rec["recoverStartTime"], result.oldest_ledger_id
            changed = True
    logs += unrecorded
    loads = [l.extra["topicLoad"] for l in logs if "topicLoad" in l.extra]
    # The counters again, read after every log: the poll that says safe is covered too.
    end = poll.t_end if poll is not None and poll.t_end is not None else time.monotonic()
    moved = _moved(view, brokers, baselines, session) if moved is None else moved
    counters_needed = _accepted_count(state) > 0
    if moved is not None:
        changed |= _revoke(state, moved)
        logs.append(LogStatus("broker", moved.broker, None, None, False, moved.describe(),
                              "find the store that still batches on that broker (a broker.conf override?); then "
                              + RERECORD_HINT, kind=KIND_STILL_FLUSHING, extra={"proof": moved.describe()}))
    elif counters_needed and all(l.done for l in logs):
        # Accepted reopens rest on "no batched flush anywhere": the verdict needs counters that cover this poll.
        ok, why = _counters_cover(view, brokers, baselines, session, end)
        if not ok:
            logs.append(LogStatus("broker", "*", None, None, False, f"cannot confirm yet that no batched writer "
                                  f"flushed: {why}", "wait: the next poll reads the counters again",
                                  kind=KIND_COUNTERS, extra={"proof": why}))
    if changed and save:
        save_state(state_path, state)
    verification = state.get("verification")
    safe = bool(logs) and all(l.done for l in logs) and (verification is None or verification.get("verdict") == "clean")
    return Report(safe, not on, logs, verification, target={"adminUrl": ident["adminUrl"],
                                                            "clusterName": ident.get("clusterName")}, brokers=brokers,
                  reopens_accepted=_accepted_count(state), poll=poll.number if poll is not None else None,
                  topic_loads=loads)


def _load_its_topic(admin: TransactionsAdmin, session: Session, poll: _Poll, log: _Log,
                    verdict: LogStatus) -> LogStatus:
    """A recorded store answering 404 while listed: its topic is not loaded (unloaded, or its bundle moved, and
    nobody looked it up since). `wait` does what the suggestion asks of the operator, a read of the topic's v2
    stats, which makes its owner load it (Pulsar's getTopicIfExists) and so reopens the store. The store stays
    not done at this poll; the reopen is judged at a later one by the watch, like any other (the polls that saw
    the 404 never count as seeing it unchanged, so they stay inside the bracket)."""
    topic = log.info["topic"]
    asked = session.loads.setdefault(poll.number, set())
    if log.key in asked:  # at most once per store per poll (a re-judged log comes back here)
        return verdict
    asked.add(log.key)
    tried = f"`wait` read {topic}'s stats (`pulsar-admin topics stats {topic}`) at poll {poll.number} to load it"
    load: dict[str, Any] = {"topic": topic, "store": log.key, "poll": poll.number}
    try:
        admin.topic_stats(topic)
    except AdminError as exc:
        why = " ".join(str(exc.reason).split())[:300]  # one line, whatever the target sent
        answer = f"HTTP {exc.status}: {why}" if exc.status else why
        load["result"] = f"failed: {answer}"
        verdict.reason = (f"store not loaded (listed, but its stats answer 404); {tried}, which failed ({answer}): "
                          "it keeps waiting and tries again at the next poll")
        verdict.suggestion = (f"see why {topic} does not load: `pulsar-admin topics stats {topic}` answers the same; "
                              "its owner's broker log says why")
    else:
        load["result"] = "loaded"
        verdict.reason = (f"store not loaded at this poll (listed, but its stats answered 404); {tried}: its reopen "
                          "is judged at the next poll (accepted only if the watch proves batching stayed off)")
        verdict.suggestion = "wait: the next poll reads the reopened store"
    verdict.extra["topicLoad"] = load
    return verdict


_REJUDGE = 3  # a log seen moving again while its last move is accepted is judged again, this many times per poll


def _reopen(session: Optional[Session], poll: Optional[_Poll], key: tuple[str, str], job, result: LogStatus,
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
        if result.kind != KIND_REOPENED or result.reopened_to is None or rec.get("unproven"):
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


def _baselines(state: dict) -> dict[str, dict]:
    if "flushBaselines" in state:
        return state["flushBaselines"]
    # A checklist recorded before the process start time was kept: its counts, process unknown.
    legacy = state.get("batchedFlushesByBroker") or {}
    return {b: {"processStart": None, "flushes": v} for b, v in legacy.items()}


def _moved(view: ClusterView, brokers: list[str], baselines: dict, session: Optional[Session]):
    """The first batched flush counted since the baselines, or None."""
    if session is not None and session.watch is not None:
        return session.watch.moved
    for reading in view.read_brokers(brokers).values():
        _, moved = counter_problem(reading, baselines)
        if moved is not None:
            return moved
    return None


def _counters_cover(view: ClusterView, brokers: list[str], baselines: dict, session: Optional[Session],
                    end: float) -> tuple[bool, str]:
    if session is not None and session.watch is not None:
        watch = session.watch
        ok, why = watch.counters(end)
        if ok is None:
            slot = max((r.cache_s for rnd in list(watch.rounds)[-1:] for r in rnd.readings.values()), default=0.0)
            watch.wait_for_round(end + slot, 2 * watch.period + slot + 1.0)
            ok, why = watch.counters(end)
        return bool(ok), why
    for reading in view.read_brokers(brokers).values():
        problem, _ = counter_problem(reading, baselines)
        if problem is not None:
            return False, problem
        if reading.counters_needed and reading.cache_s:
            return False, (f"broker {reading.broker} serves cached metrics ({reading.cache_s:g} s): `downgrade "
                           "wait` waits for a read that covers its verdict")
    return True, "no batched flush since `start`"


def _revoke(state: dict, moved) -> bool:
    """A counter moved: every reopen accepted so far may hide an idle writer that batched; none stands."""
    changed = False
    for bucket in ("coordinators", "pendingAckStores"):
        for rec in state[bucket].values():
            if rec.get("acceptedReopens") and not rec.get("unproven"):
                rec["unproven"] = f"its accepted reopen is revoked: {moved.describe()}"
                changed = True
    return changed


def needs_rerecord(report: Report) -> list[LogStatus]:
    """The logs only a re-record can prove: unproven reopens, and logs created since recording."""
    return [l for l in report.waiting if l.component != "broker" and (
        (l.kind == KIND_REOPENED and l.extra.get("proof") and "proof pending" not in l.reason
         and not l.extra["proof"].startswith("not judged")) or l.kind == KIND_UNRECORDED)]


def rerecord(admin: TransactionsAdmin, state_path: Path, logs: list[LogStatus], session: Session,
             concurrency: int = 16) -> int:
    """Reload and re-record exactly ``logs`` (as `start` does), then take new counter baselines: every log whose
    reopen was unproven has now reopened again under the watch with the flags off. Returns how many were recorded."""
    state = _require_state(state_path)
    view = session.view
    brokers = active_brokers(admin, view.identity(), view)
    confirm_flags_off(view, brokers, 0.0)
    todo = []
    for l in logs:
        if l.component == "coordinator":
            todo.append(_Log(admin, "coordinator", str(l.extra["coordinatorId"]), {}))
        else:
            rec = state["pendingAckStores"].get(l.name)
            info = ({"topic": rec["topic"], "subscription": rec["subscription"]} if rec else
                    {"topic": l.extra.get("topic"), "subscription": l.extra.get("subscription")})
            if info["topic"] is None:
                found = _pending_ack_stores(admin, concurrency)
                if l.name not in found:
                    continue  # gone since the poll
                info = found[l.name]
            todo.append(_Log(admin, "pending-ack", l.name, info))
    # The re-record is an observation like a poll: it read each log right after its reload, under the watch, so a
    # move that lands before the next poll is bracketed by the two (else every such move would need another).
    poll = session.new_poll(state)
    this_run = _record_logs(admin, view, state, state_path, todo, brokers, True, concurrency, None, session.watch)
    poll.t_end, poll.wall_end = time.monotonic(), time.time()
    for bucket, key in this_run:
        state[bucket][key].pop("unproven", None)
        log_key = ("coordinator" if bucket == "coordinators" else "pending-ack", key)
        session.pending.pop(log_key, None)
        session.seen_unchanged[log_key] = poll.number
    revoked = [rec for bucket in ("coordinators", "pendingAckStores") for rec in state[bucket].values()
               if rec.get("unproven")]
    baselines = flush_baselines(view, brokers)
    if not revoked:
        # Every log whose reopen rested on "no batched flush" was reloaded with the flags off: count afresh.
        state["flushBaselines"] = baselines
        if session.watch is not None:
            session.watch.rebase(baselines)
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
        state = _require_state(state_path)
        session = Session(admin, target if target is not None else state["identity"]["adminUrl"],
                          _baselines(state), watch_period)
        try:
            return _wait(admin, state_path, timeout_s, interval_s, on_poll, concurrency, on_retry, target,
                         rerecord_unproven, session, on_rerecord)
        finally:
            session.close()


def _wait(admin: TransactionsAdmin, state_path: Path, timeout_s: float, interval_s: float, on_poll, concurrency: int,
          on_retry, target: Optional[str], rerecord_unproven: bool, session: Session, on_rerecord) -> Report:
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
            stopping = [l for l in unproven if l.kind == KIND_REOPENED] + [
                l for l in report.waiting if l.kind == KIND_STILL_FLUSHING]
            if unproven and rerecord_unproven:
                count = rerecord(admin, state_path, unproven, session, concurrency)
                if on_rerecord:
                    on_rerecord(count)
                continue
            if stopping and not rerecord_unproven:
                report.stop = (f"{len(stopping)} log(s) cannot be proven without a re-record (see each reason); run "
                               "`txnadmin downgrade wait --rerecord` to reload and re-record exactly those")
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


def record_verification(state_path: Path, result: dict) -> dict:
    with ChecklistLock(state_path):  # the checklist's one writer: refused while a `wait` holds it
        state = _require_state(state_path)
        state["verification"] = result
        save_state(state_path, state)
        return state


# -- verify -------------------------------------------------------------------------------------

_NAMED_IN_REFUSAL = 3  # ledgers a refusal names; the count says how many more


@dataclass
class _Held:
    """A ledger the target lists as live for a recorded log."""

    log: str  # how status names the log
    managed_ledger: Optional[str]
    entries: Optional[int]  # only for a closed ledger (any but the log's newest), when the target states it


def _ledger_list_digest(path: Path) -> tuple[int, str]:
    """(size, sha256) of the ledger list; the scan's own error when it cannot be read."""
    import hashlib

    from ..scan import ScanInputError

    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
                size += len(chunk)
    except OSError as exc:
        raise ScanInputError(f"{path}: cannot read ledger list ({exc.strerror or exc})") from None
    return size, digest.hexdigest()


def _held_ledgers(admin: TransactionsAdmin, state: dict, state_path: Path, concurrency: int,
                  progress: Progress) -> dict[int, _Held]:
    """Every ledger the target lists, now, as live for a log recorded in the checklist (exit 3 if it cannot say)."""
    logs = [_Log(admin, "coordinator", k, {}) for k in sorted(state["coordinators"], key=int)]
    logs += [_Log(admin, "pending-ack", k, rec) for k, rec in sorted(state["pendingAckStores"].items())]

    def one(log: _Log) -> tuple[_Log, Optional[tuple[Optional[str], list[dict]]]]:
        try:
            return log, log.live_ledgers()
        except NotFoundError:
            return log, None

    held: dict[int, _Held] = {}
    gone: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(logs)))) as pool:
        for count, (log, read) in enumerate(pool.map(one, logs), 1):
            if progress:
                progress(count, len(logs))
            if read is None:
                if log.component == "coordinator":
                    if int(log.key) not in _call(lambda: coordinator_ids(admin.list_coordinators())):
                        raise _not_this_cluster(log.key)
                    raise DowngradeError(coordinator_not_loaded(log.key) + ": cannot tell which of its ledgers are "
                                         "live; run `txnadmin downgrade verify` again once it answers; if it does "
                                         f"not, {TC_OWNER_LOG}", 3)
                gone.append(log.key)
                continue
            name, ledgers = read
            ids = [int(l["ledgerId"]) for l in ledgers]
            if log.component == "coordinator":
                _ledger_history_fits(state, log.key, ids, state_path)
            label = transaction_log_local_name(log.key) if log.component == "coordinator" else log.key
            newest = max(ids, default=None)
            for lid, info in zip(ids, ledgers, strict=True):
                entries = info.get("entries")
                closed = lid != newest and isinstance(entries, int) and not isinstance(entries, bool)
                held[lid] = _Held(label, name, entries if closed else None)
    if gone:
        # Gone from the listing: deleted, nothing of it to prove. Listed but 404: not loaded, its ledgers unknown.
        listing = _topic_listing(admin, concurrency)
        unloaded = [key for key in gone if key in listing]
        if unloaded:
            more = f" (and {len(unloaded) - 1} more)" if len(unloaded) > 1 else ""
            raise DowngradeError(f"store {unloaded[0]}{more} is listed on the target but its stats answer 404 (not "
                                 "loaded): cannot tell which of its ledgers are live; load its topic (e.g. "
                                 "`pulsar-admin topics stats <topic>`) and run `txnadmin downgrade verify` again", 3)
    return held


def _refuse_uncovered(held: dict[int, _Held], live: Optional[dict], named: frozenset, source: str,
                      state_path: Path) -> None:
    """Exit 3 when the ledger list does not hold this target's live ledgers as the scan will judge them."""
    from ..scan.job import judged_ledgers

    judged = judged_ledgers(live, named)
    missing, unnamed, differ = [], [], []
    for lid in sorted(held):
        ours, listed = held[lid], (live or {}).get(lid)
        here = ours.managed_ledger or ours.log
        if lid not in judged:
            if listed is None:
                missing.append(f"{lid} of {ours.log}")
            elif not listed.has_metadata:
                unnamed.append(f"{lid} of {ours.log}")
            else:  # the same id on another cluster: another managed ledger's, or a cursor's
                there = f"{listed.managed_ledger or 'no managed ledger'}{' cursor ' + listed.cursor if listed.cursor else ''}"
                differ.append(f"{lid}: {there} there, {here} here")
        elif listed is not None and listed.has_metadata:
            if ours.managed_ledger and listed.managed_ledger and listed.managed_ledger != ours.managed_ledger:
                differ.append(f"{lid}: {listed.managed_ledger} there, {here} here")
            elif ours.entries is not None and listed.closed and listed.last_entry_id + 1 != ours.entries:
                differ.append(f"{lid}: {listed.last_entry_id + 1} entries there, {ours.entries} here")
    if not (missing or unnamed or differ):
        return

    def few(items: list[str]) -> str:
        more = f" and {len(items) - _NAMED_IN_REFUSAL} more" if len(items) > _NAMED_IN_REFUSAL else ""
        return "; ".join(items[:_NAMED_IN_REFUSAL]) + more

    parts = [f"{len(held)} ledgers are live on the target for the logs recorded in {state_path}, but {source}"]
    if missing:
        parts.append(f"lacks {len(missing)} of them ({few(missing)})")
    if unnamed:
        parts.append(f"lists {len(unnamed)} of them without metadata and --txn-ledgers does not name them "
                     f"({few(unnamed)})")
    if differ:
        parts.append(f"holds {len(differ)} of them as other ledgers ({few(differ)})")
    raise DowngradeError(f"{parts[0]} {', '.join(parts[1:])}: these dumps are another cluster's, or older than its "
                         "ledgers; nothing recorded: copy this cluster's dumps, then take `bookkeeper shell "
                         "listledgers -meta`, and run verify again", 3)


def _dump_inputs(paths: list[str], inputs: list[dict]) -> list[dict]:
    """Each dump path as given, with how many files and bytes the scan read under it."""
    out = []
    for raw in paths:
        root = os.path.abspath(raw)
        mine = [i for i in inputs if i["path"] == root or i["path"].startswith(root.rstrip(os.sep) + os.sep)]
        out.append({"path": root, "files": len(mine), "bytes": sum(i["bytes"] for i in mine)})
    return out


def _recorded_logs(state: dict) -> tuple[list[str], list[str]]:
    return sorted(state["coordinators"]), sorted(state["pendingAckStores"])


def verify(admin: TransactionsAdmin, state_path: Path, dumps: list[str], ledgers: Optional[Path] = None,
           txn_ledgers: Optional[str] = None, ledger_id_format: str = "long", fmt: str = "auto", engine: str = "auto",
           target: Optional[str] = None, concurrency: int = 16, progress: Progress = None) -> tuple[Any, dict]:
    """Scan the bookies' dumps and fold the verdict into the checklist, if they are this target's.

    The ledger list (``ledgers``, and the ids named in ``txn_ledgers``) must hold, as the scan judges them, every
    ledger the target lists now as live for a recorded log: a clean scan of another cluster's dumps proves nothing
    here. Refused (exit 3) with nothing recorded otherwise. Returns (the ScanResult, the entry recorded, with what
    it was checked against for an audit). Scan errors: ScanUsageError (2), ScanInputError (3).
    """
    from ..scan import run_scan
    from ..scan.job import check_options, parse_txn_ledgers, read_live_list

    check_options(fmt, engine, ledger_id_format)
    named = parse_txn_ledgers(txn_ledgers, ledger_id_format)
    state = _require_state(state_path)
    digest = _ledger_list_digest(ledgers) if ledgers else None
    live = read_live_list(ledgers, ledger_id_format, named) if ledgers else None
    ident = target_identity(admin, target if target is not None else state["identity"]["adminUrl"])
    check_identity(state, ident, state_path)
    held: Optional[dict[int, _Held]] = None
    if live is not None or named:
        # (Without any list the scan cannot say clean: its verdict, incomplete, is recorded as it is.)
        held = _held_ledgers(admin, state, state_path, concurrency, progress)
        source = f"{ledgers}{' with --txn-ledgers' if named else ''}" if ledgers else "--txn-ledgers"
        _refuse_uncovered(held, live, named, source, state_path)
    paths = [str(p) for p in dumps]
    # Only a list named here was checked against the target above: a dump's own ledgers.txt is never taken unseen.
    result = run_scan(paths, ledgers_file=ledgers, engine=engine, fmt=fmt, txn_ledgers=named,
                      ledger_id_format=ledger_id_format, dump_list=False)
    if ledgers and _ledger_list_digest(ledgers) != digest:
        raise DowngradeError(f"{ledgers} changed while verify read it; nothing was recorded: run `txnadmin downgrade "
                             "verify` again with a list that stays put", 3)
    record = {"verdict": result.verdict, "liveBatchedEntries": result.live_batched_entries, "engine": result.engine,
              "reasons": result.reasons[:20], "verifiedAt": _now_ms(),
              "target": {"adminUrl": ident["adminUrl"], "clusterName": ident.get("clusterName")},
              "dumps": _dump_inputs(paths, result.inputs),
              "ledgerList": ({"path": os.path.abspath(ledgers), "bytes": digest[0], "sha256": digest[1]}
                             if ledgers and digest else None),
              "txnLedgers": txn_ledgers or None, "ledgerIdFormat": ledger_id_format,
              "liveLedgersChecked": None if held is None else len(held)}
    # Read again under the checklist's lock (its one writer; refused while a `start` or `wait` holds it): a
    # `wait` may have saved it during a long scan, and its updates stay.
    with ChecklistLock(state_path):
        now = _require_state(state_path)
        check_identity(now, ident, state_path)
        if _recorded_logs(now) != _recorded_logs(state):
            raise DowngradeError(f"{state_path}: logs were recorded while verify ran (`start` again?); nothing was "
                                 "recorded: run `txnadmin downgrade verify` again", 3)
        now["verification"] = record
        save_state(state_path, now)
    return result, record


def reset(state_path: Path) -> bool:
    path = Path(state_path)
    if path.exists():
        load_state(path)  # refuse to delete a file that is not ours
        path.unlink()
        return True
    return False
