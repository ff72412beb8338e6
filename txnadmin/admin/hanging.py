"""Open transactions and hanging ones (Kafka's `find-hanging`, for Pulsar)."""

from __future__ import annotations

import time
from typing import Optional

from ..names import namespace_of
from .cluster import ClusterView
from .endpoints import coordinator_ids
from .protocol import AdminError, BadReplyError, NotFoundError, TargetUnreachableError, TransactionsAdmin, TxnId


def open_transactions(admin: TransactionsAdmin, coordinator_id: Optional[int] = None,
                      now_ms: Optional[int] = None) -> list[dict]:
    """Every transaction the coordinators hold (slow-transactions with 0 ms returns them all), oldest first."""
    return transaction_rows(admin.slow_transactions(0, coordinator_id), now_ms)


def transaction_rows(txns: dict, now_ms: Optional[int] = None) -> list[dict]:
    """slow-transactions' answer (id → TransactionMetadata) as rows, oldest first: coordinator, age on ``now_ms``
    (this machine's clock when None), timeout, owner and the partitions by name."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    rows = []
    for txn_id, meta in txns.items():
        row = {"txnId": txn_id, "coordinatorId": _coordinator_of(txn_id), "status": meta.get("status"),
               "openTimestamp": meta.get("openTimestamp"), "ageMs": now - int(meta.get("openTimestamp", now)),
               "timeoutMs": meta.get("timeoutAt"), "owner": meta.get("owner"),
               "producedPartitions": sorted(meta.get("producedPartitions", {})),
               "ackedPartitions": sorted(f"{t}/{s}" for t, subs in meta.get("ackedPartitions", {}).items()
                                         for s in subs)}
        if row["coordinatorId"] is None:
            row["note"] = ODD_KEY_NOTE
        rows.append(row)
    return sorted(rows, key=lambda r: (r["openTimestamp"] or 0, r["txnId"]))


# The spec types slowTransactions' keys as any string; Pulsar writes `(m,l)`, and an entry keyed otherwise is shown.
ODD_KEY_NOTE = "its key is not a transaction id (m,l): shown as the broker sent it, and it cannot be aborted by it"


def _coordinator_of(txn_id: str) -> Optional[int]:
    """The coordinator a `(m,l)` key names; None for a key of any other form."""
    try:
        return TxnId.parse(txn_id).most_bits
    except ValueError:
        return None


def open_transactions_by_coordinator(admin: TransactionsAdmin, coordinator_id: Optional[int] = None,
                                     now_ms: Optional[int] = None) -> tuple[list[dict], dict[int, str]]:
    """:func:`open_transactions`, and why each coordinator that could not be listed was not (coordinator → reason).

    Pulsar fails the listing of every coordinator when it cannot describe one transaction (one that acked on a
    subscription deleted since answers 500 until it ends), so a failed listing of all is asked again coordinator
    by coordinator: the others' transactions are still shown. Failures that would fail every call are raised."""
    try:
        return open_transactions(admin, coordinator_id, now_ms), {}
    except (TargetUnreachableError, BadReplyError):
        raise
    except AdminError as exc:
        if coordinator_id is not None or exc.status in (401, 403):
            raise
        first = exc
    ids = coordinator_ids(admin.list_coordinators())
    rows: list[dict] = []
    unreadable: dict[int, str] = {}
    for tc_id in ids:
        try:
            rows += open_transactions(admin, tc_id, now_ms)
        except (TargetUnreachableError, BadReplyError):
            raise
        except AdminError as exc:
            unreadable[tc_id] = exc.reason
    if len(unreadable) == len(ids):
        raise first  # no coordinator answered on its own either: the first answer says it best
    return sorted(rows, key=lambda r: (r["openTimestamp"] or 0, r["txnId"])), unreadable


def find_hanging(admin: TransactionsAdmin, max_transaction_timeout_minutes: float = 15.0,
                 coordinator_id: Optional[int] = None, now_ms: Optional[int] = None) -> list[dict]:
    """Open longer than the max timeout, or touching partitions/subscriptions that no longer exist."""
    limit = max_transaction_timeout_minutes * 60_000
    view = ClusterView(admin)
    existing: dict[str, set[str]] = {}

    def exists(topic: str) -> bool:
        ns = namespace_of(topic)
        if ns not in existing:
            try:
                existing[ns] = set(view.topics(ns) or ())
            except NotFoundError:  # the broker says the namespace is gone: none of its topics exist
                existing[ns] = set()
            # Any other failure propagates: a listing that failed proves nothing about the partitions, and
            # calling them gone would make live transactions look hanging (and --abort abort them).
        return topic in existing[ns]

    out = []
    for row in open_transactions(admin, coordinator_id, now_ms):
        reasons = []
        if row["ageMs"] > limit:
            reasons.append(f"open for {row['ageMs'] / 60000:.1f} min (> {max_transaction_timeout_minutes:g} min)")
        gone = [t for t in row["producedPartitions"] if not exists(t)]
        gone += [a for a in row["ackedPartitions"] if not exists(a.rsplit("/", 1)[0])]
        if gone:
            reasons.append("partitions no longer exist: " + ", ".join(gone))
        if reasons:
            odd = row["coordinatorId"] is None
            out.append({**row, "reasons": reasons,
                        "abortCommand": None if odd else f"txnadmin transactions abort-transaction -m "
                                        f"{row['coordinatorId']} -l {row['txnId'].strip('()').split(',')[1]}"})
    return out
