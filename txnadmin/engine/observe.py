"""Small numeric summaries of a running engine (for live views and the rehearsal)."""

from __future__ import annotations

from ..names import is_transaction_ledger
from .engine import Engine
from .storage import LedgerNotFoundError


def engine_summary(engine: Engine) -> dict:
    open_txns = sum(len(tc.txns) for tc in engine.coordinators.values())
    entries = 0
    records = 0
    ledger_counts = []
    for tc in engine.coordinators.values():
        stats = tc.log.ledger.internal_stats()
        entries += stats["entriesAddedCounter"]
        ledger_counts.append(len(stats["ledgers"]))
    records = engine.tc_records_written()
    return {
        "openTransactions": open_txns,
        "tcEntries": entries,
        "tcRecordsPerEntry": (records / entries) if entries else 0.0,
        "tcLedgersMin": min(ledger_counts, default=0),
        "tcLedgersMax": max(ledger_counts, default=0),
    }


def batched_census(storage) -> dict[int, dict]:
    """The engine's own count of batched entries in every live transaction-log and pending-ack ledger."""
    from ..codec import has_batch_prefix

    out = {}
    for meta in storage.list_ledgers():
        ml = meta.custom_metadata.get("pulsar/managed-ledger", "")
        if not is_transaction_ledger(ml) or "pulsar/cursor" in meta.custom_metadata:
            continue
        batched = 0
        if meta.last_entry_id >= 0:
            try:
                entries = storage.read_entries(meta.ledger_id, 0, meta.last_entry_id)
            except LedgerNotFoundError:
                continue  # trimmed since it was listed (the engine may be running): no longer live, nothing to count
            batched = sum(has_batch_prefix(e) for e in entries)
        out[meta.ledger_id] = {"managedLedger": ml, "entries": meta.last_entry_id + 1, "batchedEntries": batched}
    return out
