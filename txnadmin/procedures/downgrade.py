"""The guided PIP-160 downgrade, backend-agnostic (it talks only to TransactionsAdmin).

1. preflight; 2. disable both batching flags (dynamic config); 3. reload every coordinator and every
topic with a pending-ack store so the stores reopen with batching off; 4. record each log's
LastBatched ledger — the largest ledger that existed before its store reopened (or, without a reload,
the largest ledger at all: the conservative choice); 5. wait until every log's oldest live ledger is
newer than its LastBatched; 6. optionally verify dumps with the scan. Every step is idempotent and
the checklist file is rewritten atomically after each one, so a killed run resumes where it was.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from ..admin.protocol import (
    PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError, NotFoundError, TransactionsAdmin,
)
from .state import load_state, new_state, save_state

PENDING_ACK_SUFFIX = "__transaction_pending_ack"
TC_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign-partition-{}"
TC_CURSOR = "transaction.subscription"
Progress = Optional[Callable[[int, int], None]]


class DowngradeError(Exception):
    """A step that cannot go on; ``exit_code`` 1 (failure / not safe) or 3 (target unreadable)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class LogStatus:
    component: str  # "coordinator" | "pending-ack"
    name: str
    last_batched_ledger_id: int
    oldest_ledger_id: Optional[int]
    done: bool
    reason: str
    suggestion: Optional[str] = None
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {"component": self.component, "name": self.name, "lastBatchedLedgerId": self.last_batched_ledger_id,
               "oldestLedgerId": self.oldest_ledger_id, "done": self.done, "reason": self.reason}
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

    @property
    def waiting(self) -> list[LogStatus]:
        return [l for l in self.logs if not l.done]

    def to_json(self) -> dict:
        return {"safe": self.safe, "flagsDisabled": self.flags_disabled,
                "logs": len(self.logs), "waiting": len(self.waiting),
                "verification": self.verification, "components": [l.to_json() for l in self.logs]}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ledger_ids(internal: dict, key: str) -> list[int]:
    return [int(l["ledgerId"]) for l in internal[key]["managedLedgerInternalStats"]["ledgers"]]


def _call(fn, *args, **kwargs):
    """Admin calls with target failures turned into exit code 3."""
    try:
        return fn(*args, **kwargs)
    except NotFoundError:
        raise
    except AdminError as exc:
        if exc.status in (0, 401, 403) or exc.status >= 500:
            raise DowngradeError(f"cannot read the target: {exc.reason}", 3) from None
        raise DowngradeError(exc.reason, 1) from None


# -- discovery ----------------------------------------------------------------------------------

def discover_pending_ack_stores(admin: TransactionsAdmin, concurrency: int = 16) -> dict[str, dict]:
    """Every `…__transaction_pending_ack` topic in every namespace, resolved to (origin topic, subscription)."""
    namespaces = [ns for tenant in _call(admin.list_tenants) for ns in _call(admin.list_namespaces, tenant)]

    def scan(ns: str) -> dict[str, dict]:
        topics = _call(admin.list_topics, ns, True)
        plain = {t for t in topics if not t.endswith(PENDING_ACK_SUFFIX)}
        found = {}
        for store in topics:
            if store.endswith(PENDING_ACK_SUFFIX):
                found[store] = _resolve_store(admin, store, plain)
        return found

    stores: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for part in pool.map(scan, namespaces):
            stores.update(part)
    return stores


def _resolve_store(admin: TransactionsAdmin, store: str, topics: set[str]) -> dict:
    """Split `<topic>-<sub>__transaction_pending_ack`; names with '-' are ambiguous, so ask the target."""
    base = store[: -len(PENDING_ACK_SUFFIX)]
    candidates = [(base[:i], base[i + 1:]) for i in range(len(base)) if base[i] == "-" and base[:i] in topics]
    candidates.sort(key=lambda c: -len(c[0]))
    for topic, sub in candidates:
        try:
            _call(admin.pending_ack_internal_stats, topic, sub)
            return {"topic": topic, "subscription": sub}
        except NotFoundError:
            continue
    if candidates:
        topic, sub = candidates[0]
        return {"topic": topic, "subscription": sub, "unresolved": True}
    cut = base.rfind("-")
    return {"topic": base[:cut], "subscription": base[cut + 1:], "unresolved": True}


# -- start ------------------------------------------------------------------------------------

def flags_disabled(admin: TransactionsAdmin) -> tuple[bool, list[str]]:
    runtime = _call(admin.runtime_config)
    enabled = [f for f in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG) if str(runtime.get(f, "false")).lower() == "true"]
    return not enabled, enabled


def start(admin: TransactionsAdmin, state_path: Path, target: str = "", reload: bool = True,
          concurrency: int = 16, progress: Progress = None) -> dict[str, Any]:
    state = load_state(state_path) or new_state(target)
    coordinators = _call(admin.list_coordinators)
    if not coordinators:
        raise DowngradeError("no transaction coordinators on the target (is transactionCoordinatorEnabled=true?)")
    disabled, enabled = flags_disabled(admin)
    if state["phase"] != "new" and not disabled:
        # Someone switched batching back on: everything recorded so far may be stale.
        state["coordinators"], state["pendingAckStores"] = {}, {}
        state["reenabledAt"] = _now_ms()
        state["phase"] = "new"
    if not disabled or state["phase"] == "new":
        for flag in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG):
            _call(admin.update_dynamic_config, flag, "false")
        state["changeTime"] = _now_ms()
        state["reload"] = reload
        state["phase"] = "disabled"
        save_state(state_path, state)

    stores = discover_pending_ack_stores(admin, concurrency)
    todo_tc = [int(c["id"]) for c in coordinators if str(c["id"]) not in state["coordinators"]]
    by_topic: dict[str, list[tuple[str, dict]]] = {}
    for store, info in stores.items():
        if store not in state["pendingAckStores"]:
            by_topic.setdefault(info["topic"], []).append((store, info))
    total, done = len(todo_tc) + len(by_topic), 0

    def record_tc(tc_id: int) -> tuple[str, dict]:
        before = max(_ledger_ids(_call(admin.coordinator_internal_stats, tc_id), "transactionLogStats"))
        if reload:
            _call(admin.unload_topic, TC_ASSIGN.format(tc_id))
            after = max(_ledger_ids(_call(admin.coordinator_internal_stats, tc_id), "transactionLogStats"))
            if after <= before:
                raise DowngradeError(f"coordinator {tc_id} did not reopen on a new ledger after the reload")
        return str(tc_id), {"lastBatchedLedgerId": before, "reloaded": reload, "recordedAt": _now_ms()}

    def record_topic(topic: str) -> list[tuple[str, dict]]:
        befores = {}
        for store, info in by_topic[topic]:
            try:
                befores[store] = max(_ledger_ids(_call(admin.pending_ack_internal_stats, info["topic"],
                                                       info["subscription"]), "pendingAckLogStats"))
            except NotFoundError:
                befores[store] = None  # not loaded: it opens with batching off, but be conservative below
        if reload:
            try:
                _call(admin.unload_topic, topic)
            except NotFoundError:
                pass
        out = []
        for store, info in by_topic[topic]:
            before = befores[store]
            if before is None:
                try:
                    before = max(_ledger_ids(_call(admin.pending_ack_internal_stats, info["topic"],
                                                   info["subscription"]), "pendingAckLogStats"))
                except NotFoundError:
                    continue  # gone: nothing to wait for
            out.append((store, dict(info, lastBatchedLedgerId=before, reloaded=reload, recordedAt=_now_ms())))
        return out

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for key, value in pool.map(record_tc, todo_tc):
            state["coordinators"][key] = value
            done += 1
            if progress:
                progress(done, total)
        save_state(state_path, state)
        for items in pool.map(record_topic, list(by_topic)):
            for store, value in items:
                state["pendingAckStores"][store] = value
            done += 1
            if progress:
                progress(done, total)
            if done % 200 == 0:
                save_state(state_path, state)
    state["phase"] = "recorded"
    state["recordedAt"] = _now_ms()
    save_state(state_path, state)
    return state


# -- status -----------------------------------------------------------------------------------

def _require_state(state_path: Path) -> dict[str, Any]:
    state = load_state(state_path)
    if state is None or state["phase"] != "recorded":
        raise DowngradeError(f"{state_path}: no recorded downgrade here; run `txnadmin downgrade start` first", 1)
    return state


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def _coordinator_status(admin: TransactionsAdmin, tc_id: int, last: int) -> LogStatus:
    name = f"__transaction_log_{tc_id}"
    try:
        internal = _call(admin.coordinator_internal_stats, tc_id)
    except NotFoundError:
        return LogStatus("coordinator", name, last, None, True, "coordinator no longer exists", extra={"coordinatorId": tc_id})
    ids = _ledger_ids(internal, "transactionLogStats")
    oldest = min(ids)
    status = LogStatus("coordinator", name, last, oldest, oldest > last, "", extra={"coordinatorId": tc_id})
    if status.done:
        status.reason = f"oldest live ledger {oldest} is newer than LastBatched {last}"
        return status
    ml = internal["transactionLogStats"]["managedLedgerInternalStats"]
    if [i for i in ids if i <= last] == [ids[-1]]:
        status.reason = f"the open ledger {ids[-1]} has not rolled over yet"
        status.suggestion = "wait for managedLedgerMaxEntriesPerLedger / managedLedgerMaxLedgerRolloverTimeMinutes"
        return status
    mark_delete = ml.get("cursors", {}).get(TC_CURSOR, {}).get("markDeletePosition", "?")
    open_txns = _call(admin.slow_transactions, 0, tc_id)
    pinned = sorted((m for m in open_txns.values() if m.get("status") == "OPEN"), key=lambda m: m["openTimestamp"])
    if pinned:
        txn = pinned[0]
        most, least = txn["txnId"].strip("()").split(",")
        status.reason = (f"open transaction {txn['txnId']} (since {_iso(txn['openTimestamp'])}"
                         f"{', owner ' + txn['owner'] if txn.get('owner') else ''}) pins trimming at {mark_delete}")
        status.suggestion = f"txnadmin transactions abort-transaction -m {most} -l {least}"
        status.extra["pinnedBy"] = txn["txnId"]
    else:
        status.reason = f"ledgers up to {last} not trimmed yet (mark-delete at {mark_delete})"
    return status


def _store_status(admin: TransactionsAdmin, store: str, info: dict) -> LogStatus:
    last = info["lastBatchedLedgerId"]
    extra = {"topic": info["topic"], "subscription": info["subscription"]}
    try:
        internal = _call(admin.pending_ack_internal_stats, info["topic"], info["subscription"])
    except NotFoundError:
        return LogStatus("pending-ack", store, last, None, True, "store deleted", extra=extra)
    ids = _ledger_ids(internal, "pendingAckLogStats")
    oldest = min(ids)
    status = LogStatus("pending-ack", store, last, oldest, oldest > last, "", extra=extra)
    if status.done:
        status.reason = f"oldest live ledger {oldest} is newer than LastBatched {last}"
    elif [i for i in ids if i <= last] == [ids[-1]]:
        status.reason = f"the open ledger {ids[-1]} has not rolled over yet"
        status.suggestion = "wait for managedLedgerMaxEntriesPerLedger / managedLedgerMaxLedgerRolloverTimeMinutes"
    else:
        status.reason = (f"waiting for subscription '{info['subscription']}' to acknowledge past what ledger "
                         f"{oldest} logged (the store trims only by its subscription's mark-delete)")
        status.suggestion = "check for stuck consumers or open transactions: txnadmin transactions list"
    return status


def status(admin: TransactionsAdmin, state_path: Path, concurrency: int = 16, progress: Progress = None) -> Report:
    state = _require_state(state_path)
    disabled, enabled = flags_disabled(admin)
    if not disabled:
        raise DowngradeError(
            f"batching was switched back on ({', '.join(f + '=true' for f in enabled)}): the recorded LastBatched "
            "ledgers no longer hold; run `txnadmin downgrade start` again to disable it and re-record", 1)
    jobs: list[Callable[[], LogStatus]] = []
    for tc_id, rec in sorted(state["coordinators"].items(), key=lambda kv: int(kv[0])):
        jobs.append(lambda tc_id=int(tc_id), last=rec["lastBatchedLedgerId"]: _coordinator_status(admin, tc_id, last))
    for store, info in sorted(state["pendingAckStores"].items()):
        jobs.append(lambda store=store, info=info: _store_status(admin, store, info))
    logs: list[LogStatus] = []
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for result in pool.map(lambda job: job(), jobs):
            logs.append(result)
            if progress:
                progress(len(logs), len(jobs))
    verification = state.get("verification")
    safe = all(l.done for l in logs) and (verification is None or verification.get("verdict") == "clean")
    return Report(safe, True, logs, verification)


def wait(admin: TransactionsAdmin, state_path: Path, timeout_s: float, interval_s: float,
         on_poll: Optional[Callable[[Report], None]] = None, concurrency: int = 16) -> Report:
    deadline = time.monotonic() + timeout_s
    while True:
        report = status(admin, state_path, concurrency)
        if on_poll:
            on_poll(report)
        if report.safe or time.monotonic() + interval_s > deadline:
            return report
        time.sleep(interval_s)


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
