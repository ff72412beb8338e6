"""Per-log evidence: has the store reopened since it was recorded, and are the ledgers up to LastBatched gone
(rules 3 and 4 of the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from ...admin.endpoints import log_stats
from ...admin.protocol import NotFoundError, TransactionsAdmin, TxnId
from ...names import TC_LOG_CURSOR, transaction_log_local_name
from .logs import TC_OWNER_LOG, LogReader, SubscriptionGone, coordinator_not_loaded
from .report import DowngradeError, LogStatus, Waiting
from .target import admin_call, ledger_history_fits, not_this_cluster


def iso_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


REOPENED_HINT = "run `txnadmin downgrade start` again: it re-records exactly the logs that reopened"
RERECORD_HINT = ("`txnadmin downgrade wait --rerecord` reloads and re-records exactly these logs (or run "
                 "`txnadmin downgrade start` again)")
FLUSHED_HINT = ("`txnadmin downgrade wait --rerecord` (or `txnadmin downgrade start` again) reloads and re-records "
                "every log, which is what ends a counted flush")
SCAN_HINT = ("copy the bookies' entry logs (or `readledger` dumps) and `listledgers -meta` again, then run "
             "`txnadmin downgrade verify` with the new dumps: waiting cannot change a recorded scan")


@dataclass(frozen=True)
class Evidence:
    """What one read of a log established."""

    verdict: Optional[LogStatus]  # a verdict already reached, or None (then ``ledgers`` is set)
    ledgers: Optional[list[int]]  # its ledgers, when read
    confirmed: Optional[int]  # a newly confirmed newest ledger to remember


def read_evidence(log: LogReader, rec: dict, listed: Optional[set[str]], state_path: Path, state: dict,
                  coordinators: Optional[set[int]] = None) -> Evidence:
    """What this poll's reads of one log established (see :class:`Evidence`).
    ``coordinators``: the ids the target lists this poll (a recorded one missing there is another cluster)."""
    name = log.key if log.component == "pending-ack" else transaction_log_local_name(log.key)
    extra = ({"topic": log.info["topic"], "subscription": log.info["subscription"]} if log.component == "pending-ack"
             else {"coordinatorId": int(log.key)})
    last = rec.get("lastBatchedLedgerId")

    def status(kind: Waiting, reason: str, suggestion: Optional[str] = None, done: bool = False, oldest=None):
        return LogStatus(log.component, name, last, oldest, done, reason, suggestion, dict(extra), kind)

    def missing(exc: NotFoundError, stats_read: bool = True) -> LogStatus:
        if log.component == "coordinator":
            if coordinators is not None and int(log.key) not in coordinators:
                raise not_this_cluster(log.key)
            # The identity was checked this poll: a coordinator it lists answering 404 is between two owners.
            return tc_not_loaded(log.key, rec)
        if listed is not None and log.key not in listed:
            return status(Waiting.DONE, "store deleted (gone from the topic listing)", done=True)
        if not stats_read:
            try:  # its internal stats answered 404: a topic not loaded, or (the stats' 500 says) a subscription gone
                log.recover_start()
            except SubscriptionGone as gone:
                exc = gone
            except (NotFoundError, DowngradeError):
                pass  # not loaded, or unreadable: either way it waits as not loaded
        if isinstance(exc, SubscriptionGone):
            # Not "not loaded": its topic is loaded and lacks the subscription, yet the store's ledgers remain,
            # and a subscription re-created under that name would replay them.
            sub = log.info["subscription"]
            return status(Waiting.SUBSCRIPTION_GONE, f"subscription '{sub}' is missing from its loaded topic (its "
                          f"pending-ack stats answer HTTP {exc.failure.status}, its internal stats 404) while the "
                          "store is still listed: it cannot be judged", "if the subscription is gone for good, "
                          f"delete its leftover store (`pulsar-admin topics delete {log.key}`): the next poll counts "
                          "it deleted; if it is not gone, see the broker's log for that error")
        return status(Waiting.NOT_LOADED, "store not loaded (listed, but its stats answer 404): it cannot be judged "
                      "until it is loaded", "`txnadmin downgrade wait` loads its topic itself (a read of its stats) "
                      f"and judges the reopen; or load it (`pulsar-admin topics stats {log.info['topic']}`) while a "
                      "`wait` runs")

    if log.component == "pending-ack" and listed is not None and log.key not in listed:
        # Gone from this poll's listing: one internal-stats call confirms it (404). Not the stats first: a broker
        # answers those with a 500 for a deleted subscription, which costs every poll retries and their backoff.
        try:
            log.live_ledgers()
        except NotFoundError as exc:
            return Evidence(missing(exc), None, None)
    if rec.get("unproven"):
        # A reopen the watch could not prove harmless (or whose acceptance a moved counter revoked): only a
        # re-record ends it. Still asked, so a store deleted meanwhile counts as deleted.
        try:
            log.recover_start()
        except NotFoundError as exc:
            return Evidence(missing(exc), None, None)
        unproven = status(Waiting.REOPENED, f"reopened since recording, not proven harmless: {rec['unproven']}",
                          RERECORD_HINT)
        unproven.extra["proof"] = rec["unproven"]
        return Evidence(unproven, None, None)
    start_now, start_read = None, False
    if (log.component == "pending-ack" and rec.get("recoverStartTime") is not None and rec.get("batchingOff")
            and rec.get("provenDone") == rec["recoverStartTime"]):
        # Proven done at an earlier poll by this same open store. A store reads the batching flags only when it
        # opens, so while it has not reopened (same recoverStartTime) it writes no batched entry, and ledgers up to
        # LastBatched, once gone, never come back: it is still done. One small call instead of its ledgers.
        try:
            start_now, start_read = log.recover_start(), True
        except NotFoundError as exc:
            return Evidence(missing(exc), None, None)
        if start_now == rec["recoverStartTime"]:
            return Evidence(status(Waiting.DONE, f"oldest live ledger {rec.get('provenOldest')} was newer than "
                                   f"LastBatched {last} when last read, and the store has not reopened since "
                                   "(recoverStartTime unchanged)", done=True, oldest=rec.get("provenOldest")),
                            None, None)
    try:
        ids = log.ledgers()
    except NotFoundError as exc:
        return Evidence(missing(exc, stats_read=False), None, None)
    if log.component == "coordinator":
        ledger_history_fits(state, log.key, ids, state_path)
    newest = max(ids) if ids else None
    confirmed = None
    if rec.get("recoverStartTime") is None:
        return Evidence(status(Waiting.REOPENED, "no recoverStartTime was recorded for this store (it was not loaded "
                               "when recorded, or batching was switched on meanwhile)", REOPENED_HINT,
                               oldest=min(ids, default=None)), ids, None)
    if start_read or newest is None or newest != rec.get("confirmedLedger"):
        # The newest ledger changed since we last saw the same recoverStartTime: a rollover, or a reopen (or the
        # store was read above and has reopened).
        try:
            now = start_now if start_read else log.recover_start()
        except NotFoundError as exc:
            return Evidence(missing(exc), None, None)
        if now != rec["recoverStartTime"]:
            seen = status(Waiting.REOPENED, f"reopened since recording (recoverStartTime {rec['recoverStartTime']} "
                          f"→ {now}): it may have reopened with batching on", REOPENED_HINT,
                          oldest=min(ids, default=None))
            seen.reopened_to = now  # status() judges whether the watch proves this reopen harmless
            return Evidence(seen, ids, None)
        confirmed = newest
    if not rec.get("batchingOff"):
        return Evidence(status(Waiting.NOT_REOPENED, "still batching until it reopens (recorded without a reload)",
                               "reload it (`txnadmin downgrade start` without --no-reload) or restart its broker, "
                               "then run `txnadmin downgrade start` again", oldest=min(ids, default=None)),
                        ids, confirmed)
    return Evidence(None, ids, confirmed)


TC_NOT_LOADED_HINT = ("wait: it is judged again once it answers (as reopened, when it was); if it persists, "
                      + TC_OWNER_LOG)


def tc_not_loaded(key: str, rec: dict) -> LogStatus:
    """A recorded coordinator answering 404: never done at this poll, and not seen unchanged either."""
    return LogStatus("coordinator", transaction_log_local_name(key), rec.get("lastBatchedLedgerId"), None, False,
                     coordinator_not_loaded(key) + ": it cannot be judged until it is loaded", TC_NOT_LOADED_HINT,
                     {"coordinatorId": int(key)}, Waiting.TC_NOT_LOADED)


def coordinator_status(admin: TransactionsAdmin, log: LogReader, rec: dict, ids: list[int]) -> LogStatus:
    last = rec["lastBatchedLedgerId"]
    tc_id = int(log.key)
    oldest = min(ids)
    status = LogStatus("coordinator", transaction_log_local_name(tc_id), last, oldest, last is None or oldest > last,
                       "", extra={"coordinatorId": tc_id}, kind=Waiting.DONE)
    if status.done:
        status.reason = f"oldest live ledger {oldest} is newer than LastBatched {last}"
        return status
    ml = admin_call(lambda: log_stats(admin.coordinator_internal_stats(tc_id), "transactionLogStats",
                                      f"coordinator {tc_id}'s internal stats"))["managedLedgerInternalStats"]
    if [i for i in ids if i <= last] == [ids[-1]]:
        status.kind = Waiting.NOT_ROLLED
        status.reason = f"the open ledger {ids[-1]} has not rolled over yet"
        status.suggestion = "wait for managedLedgerMaxEntriesPerLedger / managedLedgerMaxLedgerRolloverTimeMinutes"
        return status
    mark_delete = ml.get("cursors", {}).get(TC_LOG_CURSOR, {}).get("markDeletePosition", "?")
    try:
        open_txns = admin_call(admin.slow_transactions, 0, tc_id)
    except (DowngradeError, NotFoundError) as exc:
        # Only names the pinning transaction: Pulsar cannot describe one whose acked subscription was deleted
        # (500 for the whole listing), and that must not stop the other logs' judgment. The log still waits.
        why = exc.reason if isinstance(exc, NotFoundError) else str(exc)
        status.kind = Waiting.PINNED
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
        status.kind = Waiting.PINNED
        status.reason = (f"open transaction {txn['txnId']} (since {iso_time(txn['openTimestamp'])}"
                         f"{', owner ' + txn['owner'] if txn.get('owner') else ''}) pins trimming at {mark_delete}")
        status.suggestion = f"txnadmin transactions abort-transaction -m {txn_id.most_bits} -l {txn_id.least_bits}"
        status.extra["pinnedBy"] = txn["txnId"]
        status.extra["pinnedSince"] = txn["openTimestamp"]
    else:
        status.kind = Waiting.TRIMMING
        status.reason = f"ledgers up to {last} not trimmed yet (mark-delete at {mark_delete})"
    return status


def store_status(log: LogReader, rec: dict, ids: list[int]) -> LogStatus:
    last = rec["lastBatchedLedgerId"]
    extra = {"topic": log.info["topic"], "subscription": log.info["subscription"]}
    oldest = min(ids)
    status = LogStatus("pending-ack", log.key, last, oldest, last is None or oldest > last, "", extra=extra)
    if status.done:
        status.reason = (f"oldest live ledger {oldest} is newer than LastBatched {last}" if last is not None
                         else "reopened with batching off and had no ledger before")
    elif [i for i in ids if i <= last] == [ids[-1]]:
        status.kind = Waiting.NOT_ROLLED
        status.reason = f"the open ledger {ids[-1]} has not rolled over yet"
        status.suggestion = "wait for managedLedgerMaxEntriesPerLedger / managedLedgerMaxLedgerRolloverTimeMinutes"
    else:
        status.kind = Waiting.NOT_ACKING
        status.reason = (f"waiting for subscription '{log.info['subscription']}' to acknowledge past what ledger "
                         f"{oldest} logged (the store trims only by its subscription's mark-delete)")
        status.suggestion = "check for stuck consumers or open transactions: txnadmin transactions list"
    return status
