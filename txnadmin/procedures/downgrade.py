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
5. **The same target.** The checklist records the admin URL, the cluster name, the metadata/BookKeeper URIs and
   each coordinator log's ledger history; a checklist from another target is refused.

Every step is idempotent and the checklist file is rewritten atomically after each one, so a killed run
resumes where it was.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from ..admin.discovery import discover_pending_ack_stores
from ..admin.protocol import (
    PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError, NotFoundError, TransactionsAdmin, TxnId, is_transient,
)
from ..names import TC_LOG_CURSOR, coordinator_assign_partition, is_pending_ack_store, transaction_log_local_name
from .state import load_state, new_state, save_state

Progress = Optional[Callable[[int, int], None]]
FLAG_PROPAGATION_S = 10.0  # dynamic config reaches brokers through a metadata watch: allow it this long

# Why a log still waits (LogStatus.kind); the live view groups by these.
KIND_DONE = "done"
KIND_NOT_ROLLED = "open ledger not rolled"
KIND_PINNED = "open transaction pinning trimming"
KIND_NOT_ACKING = "subscription not acknowledging"
KIND_TRIMMING = "not trimmed yet"
KIND_NOT_REOPENED = "store not reopened"
KIND_REOPENED = "reopened since recording"
KIND_NOT_LOADED = "store not loaded"
KIND_UNRECORDED = "created since recording"
KIND_STILL_FLUSHING = "batched writer still flushing"
FLUSH_PREFIXES = ("pulsar_txn_tc_bufferedwriter_flush_trigger_", "pulsar_txn_pending_ack_store_bufferedwriter_flush_trigger_")


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
                "verification": self.verification, "components": [l.to_json() for l in self.logs]}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ledger_ids(internal: dict, key: str) -> list[int]:
    return [int(l["ledgerId"]) for l in internal[key]["managedLedgerInternalStats"]["ledgers"]]


_PERMANENT_503 = "transactionCoordinatorEnabled"


def _call(fn, *args, **kwargs):
    """Admin calls with target failures turned into exit code 3 (transient ones marked for `wait`)."""
    try:
        return fn(*args, **kwargs)
    except NotFoundError:
        raise
    except AdminError as exc:
        if exc.status in (401, 403):
            raise DowngradeError(f"cannot read the target: {exc.reason}", 3) from None
        if is_transient(exc) and not (exc.status == 503 and _PERMANENT_503 in exc.reason):
            raise DowngradeError(f"cannot read the target: {exc.reason}", 3, transient=True) from None
        if exc.status == 0 or exc.status >= 500:
            raise DowngradeError(f"cannot read the target: {exc.reason}", 3) from None
        raise DowngradeError(exc.reason, 1) from None


# -- target identity and brokers ---------------------------------------------------------------

def target_identity(admin: TransactionsAdmin, admin_url: str) -> dict[str, Any]:
    """What a checklist is about: the admin URL, the cluster's own name and its metadata/BookKeeper URIs."""
    try:
        clusters = _call(admin.list_clusters)
    except NotFoundError:
        clusters = []
    try:
        internal = _call(admin.internal_configuration)
    except NotFoundError:
        internal = {}
    ident = {"adminUrl": admin_url, "clusterName": clusters[0] if len(clusters) == 1 else None,
             "clusters": sorted(clusters)}
    for key in ("metadataStoreUrl", "bookkeeperMetadataServiceUri"):
        if internal.get(key):
            ident[key] = internal[key]
    return ident


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


def active_brokers(admin: TransactionsAdmin, ident: dict) -> list[str]:
    clusters = ident.get("clusters") or []
    brokers: list[str] = []
    for cluster in clusters:
        try:
            brokers += _call(admin.active_brokers, cluster)
        except NotFoundError:
            continue
    if not brokers:
        raise DowngradeError("the target lists no active brokers (GET /admin/v2/brokers/{cluster}); cannot confirm "
                             "the batching flags are off everywhere", 3)
    return sorted(set(brokers))


def flags_on_brokers(admin: TransactionsAdmin, brokers: list[str]) -> dict[str, list[str]]:
    """Broker → batching flags still on in its runtime config ({} when off everywhere). Exit 3 if one can't say."""
    def one(broker: str) -> tuple[str, list[str]]:
        if len(brokers) == 1:
            runtime = _call(admin.runtime_config)  # the only active broker is the one answering
        else:
            try:
                runtime = _call(admin.broker_runtime_config, broker)
            except (NotFoundError, DowngradeError) as exc:
                raise DowngradeError(f"cannot confirm the batching flags on broker {broker}: "
                                     f"{exc if isinstance(exc, DowngradeError) else exc.reason} (every active broker "
                                     "must be reachable from here to prove batching is off)", 3) from None
        on = [f for f in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG) if str(runtime.get(f, "false")).lower() == "true"]
        return broker, on

    with ThreadPoolExecutor(max_workers=min(16, len(brokers))) as pool:
        return {b: on for b, on in pool.map(one, brokers) if on}


def batched_flushes(admin: TransactionsAdmin, brokers: list[str]) -> dict[str, float]:
    """Each active broker's batched-writer flush count (coordinators + pending-ack stores), from its /metrics.

    Every broker is asked, not only the answering one: a store that still batches may live on any of them. A
    broker whose /metrics is not reachable or carries no such counters is left out: this is extra evidence where
    available, never a reason to say safe. With batching off a store writes plainly and never counts a flush.
    """
    def one(broker: str) -> tuple[str, Optional[float]]:
        try:
            # the only active broker is the one answering (its id may not be an address we can reach)
            text = admin.metrics_text() if len(brokers) == 1 else admin.broker_metrics_text(broker)
        except (AdminError, AttributeError):
            return broker, None
        return broker, _flush_total(text)

    if not brokers:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(brokers))) as pool:
        return {b: total for b, total in pool.map(one, brokers) if total is not None}


def _flush_total(text: str) -> Optional[float]:
    from prometheus_client.parser import text_string_to_metric_families

    total, seen = 0.0, False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith(FLUSH_PREFIXES) and sample.name.endswith("_total"):
                    total += sample.value
                    seen = True
    except ValueError:
        return None  # not Prometheus text: no evidence either way
    return total if seen else None


def _describe_on(on: dict[str, list[str]]) -> str:
    return "; ".join(f"{b}: {', '.join(f + '=true' for f in flags)}" for b, flags in sorted(on.items()))


def confirm_flags_off(admin: TransactionsAdmin, brokers: list[str], wait_s: float = FLAG_PROPAGATION_S) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        on = flags_on_brokers(admin, brokers)
        if not on:
            return
        if time.monotonic() >= deadline:
            raise DowngradeError(f"batching is still on after {wait_s:.0f} s: {_describe_on(on)}; check the "
                                 "brokers' dynamic config (or broker.conf) and run `txnadmin downgrade start` again", 1)
        time.sleep(0.2)


# -- discovery ----------------------------------------------------------------------------------

def _pending_ack_stores(admin: TransactionsAdmin, concurrency: int) -> dict[str, dict]:
    """Every pending-ack store of the target, as the checklist records it: store name → origin topic, subscription."""
    found = _call(discover_pending_ack_stores, admin, concurrency)
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
    """How to read one log's evidence: its ledgers and its store's recoverStartTime."""

    def __init__(self, admin: TransactionsAdmin, component: str, key: str, info: dict):
        self.admin, self.component, self.key, self.info = admin, component, key, info

    def ledgers(self) -> list[int]:
        if self.component == "coordinator":
            return _ledger_ids(_call(self.admin.coordinator_internal_stats, int(self.key)), "transactionLogStats")
        return _ledger_ids(_call(self.admin.pending_ack_internal_stats, self.info["topic"], self.info["subscription"]),
                           "pendingAckLogStats")

    def recover_start(self) -> Optional[int]:
        if self.component == "coordinator":
            stats = _call(self.admin.coordinator_stats, int(self.key))
        else:
            stats = _call(self.admin.pending_ack_stats, self.info["topic"], self.info["subscription"])
        value = stats.get("recoverStartTime")
        return int(value) if value else None  # 0: not recovered yet, no evidence


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
    rec["batchingOff"] = bool(reopened or (previous or {}).get("batchingOff"))
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
          concurrency: int = 16, progress: Progress = None, flag_wait_s: float = FLAG_PROPAGATION_S) -> dict[str, Any]:
    ident = target_identity(admin, target)
    existing = load_state(state_path)
    if existing is not None:
        check_identity(existing, ident, state_path)
    state = existing or new_state(target)
    state["identity"] = ident
    coordinators = _call(admin.list_coordinators)
    if not coordinators:
        raise DowngradeError("no transaction coordinators on the target (is transactionCoordinatorEnabled=true?)")
    brokers = active_brokers(admin, ident)
    on = flags_on_brokers(admin, brokers)
    if on:
        for flag in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG):
            _call(admin.update_dynamic_config, flag, "false")
        state["changeTime"] = _now_ms()
    confirm_flags_off(admin, brokers, flag_wait_s)  # before any reload or LastBatched read
    state["reload"] = reload
    state["brokersChecked"] = brokers
    if state["phase"] == "new":
        state["phase"] = "disabled"
    save_state(state_path, state)

    stores = _pending_ack_stores(admin, concurrency)
    logs = [_Log(admin, "coordinator", str(c["id"]), {}) for c in coordinators]
    logs += [_Log(admin, "pending-ack", store, info) for store, info in stores.items()]
    recorded = {**{("coordinator", k): v for k, v in state["coordinators"].items()},
                **{("pending-ack", k): v for k, v in state["pendingAckStores"].items()}}

    def needs_record(log: _Log) -> bool:
        rec = recorded.get((log.component, log.key))
        if rec is None or rec.get("recoverStartTime") is None:
            return True
        if reload and not rec.get("batchingOff"):
            return True  # recorded without a reload before: reload it now
        try:
            return log.recover_start() != rec["recoverStartTime"]  # reopened since recording (by anyone)
        except NotFoundError:
            return False  # deleted or not loaded: status decides from the listing

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        todo = [log for log, need in zip(logs, pool.map(needs_record, logs), strict=True) if need]
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
        # never shows it again. Only a switch shorter than one reload can still slip between two checks.
        on_now = flags_on_brokers(admin, brokers)
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
                        state[bucket][log.key] = dict(log.info, **rec) if log.component == "pending-ack" else rec
                        this_run.append((bucket, log.key))
                    done += 1
                    if progress:
                        progress(done, total)
                    if done % 200 == 0:
                        save_state(state_path, state)
            # Both ends: if batching was switched back on while we reloaded, those reopens prove nothing.
            on = flags_on_brokers(admin, brokers)
        except _SwitchedOn as exc:
            on = exc.on
        if on:
            for bucket, key in this_run:
                state[bucket][key]["recoverStartTime"] = None
            state["phase"] = "disabled"
            save_state(state_path, state)
            raise DowngradeError(f"batching was switched back on while recording ({_describe_on(on)}); nothing "
                                 "recorded in this run counts: switch it off (or let `txnadmin downgrade start` "
                                 "do it) and run `txnadmin downgrade start` again", 1)
    finally:
        save_state(state_path, state)
    state["phase"] = "recorded"
    state["recordedAt"] = _now_ms()
    state["rerecorded"] = len(this_run)
    state["batchedFlushesByBroker"] = batched_flushes(admin, brokers)  # the baselines status compares against
    save_state(state_path, state)
    return state


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


def _evidence(log: _Log, rec: dict, listed: Optional[set[str]], state_path: Path,
              state: dict) -> tuple[Optional[LogStatus], Optional[list[int]], Optional[int]]:
    """(a verdict already reached, or None; the ledgers; a newly confirmed newest ledger to remember)."""
    name = log.key if log.component == "pending-ack" else transaction_log_local_name(log.key)
    extra = ({"topic": log.info["topic"], "subscription": log.info["subscription"]} if log.component == "pending-ack"
             else {"coordinatorId": int(log.key)})
    last = rec.get("lastBatchedLedgerId")

    def status(kind: str, reason: str, suggestion: Optional[str] = None, done: bool = False, oldest=None):
        return LogStatus(log.component, name, last, oldest, done, reason, suggestion, dict(extra), kind)

    def missing() -> LogStatus:
        if log.component == "coordinator":
            raise DowngradeError(f"coordinator {log.key} not found on the target (404): coordinators are never "
                                 "deleted, so this is not the cluster the checklist was recorded on, or it is "
                                 "not serving transactions", 3)
        if listed is not None and log.key not in listed:
            return status(KIND_DONE, "store deleted (gone from the topic listing)", done=True)
        return status(KIND_NOT_LOADED, "store not loaded (listed, but its stats answer 404): it cannot be judged "
                      "until it is loaded", "load its topic (e.g. `pulsar-admin topics stats <topic>`), then run "
                      "`txnadmin downgrade start` again to record it")

    start_now, start_read = None, False
    if (log.component == "pending-ack" and rec.get("recoverStartTime") is not None and rec.get("batchingOff")
            and rec.get("provenDone") == rec["recoverStartTime"]):
        # Proven done at an earlier poll by this same open store. A store reads the batching flags only when it
        # opens, so while it has not reopened (same recoverStartTime) it writes no batched entry, and ledgers up to
        # LastBatched, once gone, never come back: it is still done. One small call instead of its ledgers.
        try:
            start_now, start_read = log.recover_start(), True
        except NotFoundError:
            return missing(), None, None
        if start_now == rec["recoverStartTime"]:
            return (status(KIND_DONE, f"oldest live ledger {rec.get('provenOldest')} was newer than LastBatched "
                           f"{last} when last read, and the store has not reopened since (recoverStartTime "
                           "unchanged)", done=True, oldest=rec.get("provenOldest")), None, None)
    try:
        ids = log.ledgers()
    except NotFoundError:
        return missing(), None, None
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
        except NotFoundError:
            return missing(), None, None
        if now != rec["recoverStartTime"]:
            return (status(KIND_REOPENED, f"reopened since recording (recoverStartTime {rec['recoverStartTime']} "
                           f"→ {now}): it may have reopened with batching on", REOPENED_HINT,
                           oldest=min(ids, default=None)), ids, None)
        confirmed = newest
    if not rec.get("batchingOff"):
        return (status(KIND_NOT_REOPENED, "still batching until it reopens (recorded without a reload)",
                       "reload it (`txnadmin downgrade start` without --no-reload) or restart its broker, then run "
                       "`txnadmin downgrade start` again", oldest=min(ids, default=None)), ids, confirmed)
    return None, ids, confirmed


def _coordinator_status(admin: TransactionsAdmin, log: _Log, rec: dict, ids: list[int]) -> LogStatus:
    last = rec["lastBatchedLedgerId"]
    tc_id = int(log.key)
    oldest = min(ids)
    status = LogStatus("coordinator", transaction_log_local_name(tc_id), last, oldest, last is None or oldest > last,
                       "", extra={"coordinatorId": tc_id}, kind=KIND_DONE)
    if status.done:
        status.reason = f"oldest live ledger {oldest} is newer than LastBatched {last}"
        return status
    internal = _call(admin.coordinator_internal_stats, tc_id)
    ml = internal["transactionLogStats"]["managedLedgerInternalStats"]
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


def status(admin: TransactionsAdmin, state_path: Path, concurrency: int = 16, progress: Progress = None,
           target: Optional[str] = None, flag_wait_s: float = 0.0) -> Report:
    """One poll. Read-only on the target; remembers in the checklist which newest ledgers were confirmed."""
    state = _require_state(state_path)
    ident = target_identity(admin, target if target is not None else state["identity"]["adminUrl"])
    check_identity(state, ident, state_path)
    brokers = active_brokers(admin, ident)
    on = flags_on_brokers(admin, brokers)
    if on:
        raise DowngradeError(
            f"batching was switched back on ({_describe_on(on)}): stores that reopen now batch again; run "
            "`txnadmin downgrade start` again to disable it and re-record what reopened", 1)
    coord = [(_Log(admin, "coordinator", k, {}), rec) for k, rec in sorted(state["coordinators"].items(),
                                                                          key=lambda kv: int(kv[0]))]
    stores = [(_Log(admin, "pending-ack", k, rec), rec) for k, rec in sorted(state["pendingAckStores"].items())]
    jobs = coord + stores
    # Logs that exist now but were never recorded may have opened while batching was on: they are part of the
    # proof too. One listing per namespace (also what tells "deleted" from "not loaded").
    namespaces = [ns for tenant in _call(admin.list_tenants) for ns in _call(admin.list_namespaces, tenant)]
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(namespaces)))) as pool:
        listing = {t for topics in pool.map(lambda ns: _call(admin.list_topics, ns, True), namespaces)
                   for t in topics}
    unrecorded = [LogStatus("pending-ack", name, None, None, False, "created since recording: it may have opened "
                            "while batching was on", REOPENED_HINT, kind=KIND_UNRECORDED)
                  for name in sorted(listing) if is_pending_ack_store(name)
                  and name not in state["pendingAckStores"]]
    unrecorded += [LogStatus("coordinator", transaction_log_local_name(c["id"]), None, None, False, "created since "
                             "recording (coordinators scaled up)", REOPENED_HINT, extra={"coordinatorId": int(c["id"])},
                             kind=KIND_UNRECORDED)
                   for c in _call(admin.list_coordinators) if str(c["id"]) not in state["coordinators"]]

    def listed() -> set[str]:
        return listing

    def one(job) -> tuple[LogStatus, Optional[int]]:
        log, rec = job
        verdict, ids, confirmed = _evidence(log, rec, listed(), state_path, state)
        if verdict is not None:
            return verdict, confirmed
        assert ids is not None  # _evidence gives the ledgers whenever it reaches no verdict
        if log.component == "coordinator":
            return _coordinator_status(admin, log, rec, ids), confirmed
        return _store_status(log, rec, ids), confirmed

    logs: list[LogStatus] = []
    changed = False
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for (_log, rec), (result, confirmed) in zip(jobs, pool.map(one, jobs), strict=True):
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
            if progress:
                progress(len(logs), len(jobs))
    logs += unrecorded
    baselines = state.get("batchedFlushesByBroker")
    if baselines is None:  # a checklist recorded before every broker was read: its one value was the answering one's
        legacy = state.get("batchedFlushes")
        baselines = {brokers[0]: legacy} if legacy is not None and len(brokers) == 1 else {}
        state["batchedFlushesByBroker"] = baselines
        changed = True
    for broker, flushes in sorted(batched_flushes(admin, brokers).items()):
        baseline = baselines.get(broker)
        if baseline is None or flushes < baseline:
            # First seen (a broker that joined since recording: its reopened stores are caught above), or its
            # counters restarted with it: from here on, any growth counts.
            baselines[broker] = flushes
            changed = True
        elif flushes > baseline:
            logs.append(LogStatus("broker", broker, None, None, False,
                                  f"batched-writer flushes on broker {broker} grew from {baseline:g} to {flushes:g} "
                                  "since recording (pulsar_txn_*_bufferedwriter_flush_trigger_*): something there "
                                  "still batches", "find the store that still batches on that broker (a broker.conf "
                                  "override?), then run `txnadmin downgrade start` again", kind=KIND_STILL_FLUSHING))
    if changed:
        save_state(state_path, state)
    verification = state.get("verification")
    safe = bool(logs) and all(l.done for l in logs) and (verification is None or verification.get("verdict") == "clean")
    return Report(safe, not on, logs, verification, target={"adminUrl": ident["adminUrl"],
                                                            "clusterName": ident.get("clusterName")}, brokers=brokers)


_DEADLINE_GRACE_S = 1.0


def wait(admin: TransactionsAdmin, state_path: Path, timeout_s: float, interval_s: float,
         on_poll: Optional[Callable[[Report], None]] = None, concurrency: int = 16,
         on_retry: Optional[Callable[[str, float], None]] = None, target: Optional[str] = None) -> Report:
    """Poll until safe. Transient failures are shown (``on_retry``) and retried with backoff; the deadline bounds
    everything, hung calls included (a poll still running at the deadline is abandoned). Returns the last report;
    raises DowngradeError 3 when the target never answered or answered permanently wrong."""
    import concurrent.futures

    deadline = time.monotonic() + timeout_s
    backoff = min(interval_s, 1.0)
    last: Optional[Report] = None
    last_error: Optional[str] = None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="downgrade-poll")
    try:
        while True:
            remaining = deadline - time.monotonic()
            future = pool.submit(status, admin, state_path, concurrency, None, target)
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
            if on_poll:
                on_poll(report)
            if report.safe or time.monotonic() + interval_s > deadline:
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
    state = _require_state(state_path)
    state["verification"] = result
    save_state(state_path, state)
    return state


def reset(state_path: Path) -> bool:
    path = Path(state_path)
    if path.exists():
        load_state(path)  # refuse to delete a file that is not ours
        path.unlink()
        return True
    return False
