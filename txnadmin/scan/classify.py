"""What a transaction-ledger payload is: batched, plain, suspicious, or empty."""

from __future__ import annotations

from ..codec import EntryDecodeError, decode_entry, has_batch_prefix

BATCHED, PLAIN, SUSPICIOUS, EMPTY, UNREADABLE = "batched", "plain", "suspicious", "empty", "unreadable"


def classify(payload: bytes) -> tuple[str, str]:
    """(form, detail) of one entry payload as the transaction logs would read it."""
    if not payload:
        return EMPTY, "empty entry"
    if not has_batch_prefix(payload):
        return PLAIN, ""
    try:
        decoded = decode_entry(payload)
    except EntryDecodeError as exc:
        return SUSPICIOUS, exc.reason
    return BATCHED, f"{decoded.kind.value}, {len(decoded.records)} records"
