"""Small numeric summaries of a running engine (for live views and the rehearsal)."""

from __future__ import annotations

from .engine import Engine


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
