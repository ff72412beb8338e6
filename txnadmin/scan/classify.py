"""What a transaction-ledger payload is: batched, plain or empty — the batch magic decides.

A plain `TransactionMetadataEntry` or `PendingAckMetadataEntry` can never begin with ``0E 01``: 0x0E would be
field 1 with wire type 6, which protobuf does not have. So inside a transaction ledger every payload that starts
with the magic is batched, whatever its version bytes or fields; decoding only adds detail (the log, the record
count, fields this codec does not know). ``kind`` is set only when the body decodes as one log's batch:
without a ledger list that is the only evidence that a ledger is a transaction ledger at all.
"""

from __future__ import annotations

from ..codec import EntryDecodeError, decode_entry, has_batch_prefix

BATCHED, PLAIN, EMPTY, UNREADABLE, BAD_DIGEST = "batched", "plain", "empty", "unreadable", "bad-digest"


def classify(payload: bytes) -> tuple[str, str, str]:
    """(form, detail, kind) of one entry payload."""
    if not payload:
        return EMPTY, "empty entry", ""
    if not has_batch_prefix(payload):
        return PLAIN, "", ""
    return (BATCHED, *describe_batch(payload))


def describe_batch(payload: bytes) -> tuple[str, str]:
    """(detail, decoded kind or "") of a payload that starts with the batch magic."""
    if len(payload) < 4:
        return f"batch magic; truncated prefix of {len(payload)} bytes", ""
    version = payload[2] << 8 | payload[3]
    if version != 1:  # cheap and common (every message entry's CRC lands here when no list filters them out)
        return f"batch magic; unknown batch version {version}", ""
    try:
        decoded = decode_entry(payload)
        return f"{decoded.kind.value}, {len(decoded.records)} records", decoded.kind.value
    except EntryDecodeError as exc:
        strict_reason = exc.reason
    except Exception as exc:  # noqa: BLE001 — the codec promises EntryDecodeError only; a slip must not cost the finding
        strict_reason = f"decoder error {type(exc).__name__}"
    for kind in ("txn-log", "pending-ack"):
        try:
            decoded = decode_entry(payload, kind)
        except Exception:  # noqa: BLE001 — as above: only detail is at stake, the magic already made the entry batched
            continue
        unknown = sorted(_unknown_numbers(decoded.records))
        extra = f"; unknown fields {', '.join(map(str, unknown))}" if unknown else ""
        return f"{kind}, {len(decoded.records)} records{extra}", kind
    return f"batch magic; body not decodable: {strict_reason}", ""


def _unknown_numbers(messages) -> set[int]:
    from google.protobuf.unknown_fields import UnknownFieldSet

    out: set[int] = set()
    for msg in messages:
        unknown = UnknownFieldSet(msg)
        out.update(unknown[i].field_number for i in range(len(unknown)))  # indexed: the stubs lack __iter__
        for fd, value in msg.ListFields():
            if fd.message_type is not None:
                out |= _unknown_numbers(value if fd.is_repeated else [value])
    return out
