"""Encode and decode the entries of Pulsar's transaction log and pending-ack log.

An entry is either *plain* (one bare protobuf record) or *batched* (PIP-160): the big-endian
shorts ``0x0e01`` (magic) and ``0x0001`` (version) followed by a ``Batched…MetadataEntry`` that
holds every record of the batch. Pulsar itself never checks the version; we report it, and
refuse versions we do not know so that nothing is misread silently.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Sequence

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from .pb import pending_ack_pb2, transaction_metadata_pb2

BATCH_MAGIC = 0x0E01
BATCH_VERSION = 1
BATCH_PREFIX = struct.pack(">HH", BATCH_MAGIC, BATCH_VERSION)
PREFIX_LENGTH = len(BATCH_PREFIX)

TransactionMetadataEntry = transaction_metadata_pb2.TransactionMetadataEntry
BatchedTransactionMetadataEntry = transaction_metadata_pb2.BatchedTransactionMetadataEntry
PendingAckMetadataEntry = pending_ack_pb2.PendingAckMetadataEntry
PendingAckMetadata = pending_ack_pb2.PendingAckMetadata
BatchedPendingAckMetadataEntry = pending_ack_pb2.BatchedPendingAckMetadataEntry


class EntryKind(str, Enum):
    """Which log an entry belongs to."""

    TXN_LOG = "txn-log"
    PENDING_ACK = "pending-ack"

    @property
    def record_type(self) -> type[Message]:
        return TransactionMetadataEntry if self is EntryKind.TXN_LOG else PendingAckMetadataEntry

    @property
    def batch_type(self) -> type[Message]:
        if self is EntryKind.TXN_LOG:
            return BatchedTransactionMetadataEntry
        return BatchedPendingAckMetadataEntry

    @property
    def batch_field(self) -> str:
        return "transaction_logs" if self is EntryKind.TXN_LOG else "pending_ack_logs"


class EntryForm(str, Enum):
    PLAIN = "plain"
    BATCHED = "batched"


class EntryDecodeError(ValueError):
    """An entry that is not a valid transaction-log or pending-ack entry.

    ``reason`` says what is wrong, ``offset`` is the byte offset inside the entry where it was found.
    """

    def __init__(self, reason: str, offset: int = 0, kind: EntryKind | None = None):
        self.reason = reason
        self.offset = offset
        self.kind = kind
        super().__init__(f"{reason} (at byte {offset})")


@dataclass(frozen=True)
class DecodedEntry:
    form: EntryForm
    version: int | None
    kind: EntryKind
    records: list[Message] = field(default_factory=list)

    @property
    def batched(self) -> bool:
        return self.form is EntryForm.BATCHED

    def to_json(self) -> dict:
        return {
            "form": self.form.value,
            "version": self.version,
            "kind": self.kind.value,
            "records": [record_to_json(r) for r in self.records],
        }


def record_to_json(record: Message) -> dict:
    """A record as protobuf's JSON mapping (lowerCamelCase names, enum names, 64-bit ints as strings)."""
    return json_format.MessageToDict(record)


def has_batch_prefix(data: bytes | memoryview) -> bool:
    """True when ``data`` starts with the batch magic ``0E 01`` (the rule Pulsar uses)."""
    return len(data) >= 2 and data[0] == 0x0E and data[1] == 0x01


def encode_plain(record: Message) -> bytes:
    return record.SerializeToString()


def encode_batched(records: Sequence[Message], kind: EntryKind | str | None = None) -> bytes:
    """Prefix + batched message holding ``records`` in order (a batch of one is still prefixed)."""
    if not records:
        raise ValueError("a batched entry needs at least one record")
    resolved = _kind_of_record(records[0]) if kind is None else EntryKind(kind)
    batch = resolved.batch_type()
    getattr(batch, resolved.batch_field).extend(records)
    return BATCH_PREFIX + batch.SerializeToString()


def encode_batched_serialized(records: Iterable[bytes]) -> bytes:
    """Batch already-serialized records: field 1, length-delimited, once per record.

    Both batched messages have the records as their only field (number 1), so the same bytes serve
    both logs; this keeps the writer from parsing what it already serialized.
    """
    parts = [BATCH_PREFIX]
    for rec in records:
        parts.append(b"\x0a")
        parts.append(_varint(len(rec)))
        parts.append(rec)
    return b"".join(parts)


def decode_entry(data: bytes | bytearray | memoryview, kind: EntryKind | str = "auto") -> DecodedEntry:
    """Decode one entry of either log, in either form. Raises :class:`EntryDecodeError` only."""
    data = bytes(data)
    if not data:
        raise EntryDecodeError("empty entry", 0)
    kinds = _candidate_kinds(kind)
    if has_batch_prefix(data):
        if len(data) < PREFIX_LENGTH:
            raise EntryDecodeError(
                f"truncated batch prefix: {len(data)} of {PREFIX_LENGTH} bytes", len(data)
            )
        version = struct.unpack_from(">H", data, 2)[0]
        if version != BATCH_VERSION:
            raise EntryDecodeError(f"unknown batch version {version} (expected {BATCH_VERSION})", 2)
        body = data[PREFIX_LENGTH:]
        return _decode_as(body, kinds, EntryForm.BATCHED, version, PREFIX_LENGTH)
    return _decode_as(data, kinds, EntryForm.PLAIN, None, 0)


def _candidate_kinds(kind: EntryKind | str) -> list[EntryKind]:
    if kind in ("auto", None):
        return [EntryKind.TXN_LOG, EntryKind.PENDING_ACK]
    try:
        return [EntryKind(kind)]
    except ValueError:
        raise EntryDecodeError(f"unknown entry kind {kind!r} (use txn-log, pending-ack or auto)") from None


def _decode_as(
    body: bytes, kinds: list[EntryKind], form: EntryForm, version: int | None, offset: int
) -> DecodedEntry:
    failures: list[str] = []
    strict = len(kinds) > 1  # guessing the log: demand what only that log writes
    for kind in kinds:
        try:
            records = _parse(body, kind, form, strict)
        except _Rejected as exc:
            failures.append(f"{kind.value}: {exc}")
            continue
        return DecodedEntry(form, version, kind, records)
    what = "batched message" if form is EntryForm.BATCHED else "record"
    if len(kinds) == 1:
        raise EntryDecodeError(f"not a valid {kinds[0].value} {what}: {failures[0].split(': ', 1)[1]}", offset, kinds[0])
    raise EntryDecodeError(f"not a valid {what} of either log ({'; '.join(failures)})", offset)


class _Rejected(Exception):
    pass


def _parse(body: bytes, kind: EntryKind, form: EntryForm, strict: bool) -> list[Message]:
    msg = (kind.batch_type if form is EntryForm.BATCHED else kind.record_type)()
    try:
        msg.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise _Rejected(str(exc) or "protobuf decoding failed") from None
    # A known field with the wrong wire type means another message; fields newer than ours are
    # tolerated unless we are guessing which log this is.
    if _has_unknown_fields(msg, only_known_numbers=not strict):
        raise _Rejected("fields that this log does not have")
    records = list(getattr(msg, kind.batch_field)) if form is EntryForm.BATCHED else [msg]
    if form is EntryForm.BATCHED and not records:
        raise _Rejected("batch holds no records")
    for index, record in enumerate(records):
        problem = _check_record(record, kind, strict)
        if problem:
            where = f"record {index}: " if form is EntryForm.BATCHED else ""
            raise _Rejected(where + problem)
    return records


def _check_record(record: Message, kind: EntryKind, strict: bool) -> str | None:
    if kind is EntryKind.TXN_LOG:
        if not record.HasField("metadata_op"):
            return "no metadataOp"
        # The coordinator stamps every record with these; a pending-ack record never has them.
        if strict and not (record.HasField("last_modification_time") or record.HasField("max_local_txn_id")):
            return "no lastModificationTime/maxLocalTxnId"
        return None
    if not record.HasField("pending_ack_op"):
        return "no pendingAckOp"
    return None


def _has_unknown_fields(msg: Message, only_known_numbers: bool) -> bool:
    unknown = UnknownFieldSet(msg)
    if only_known_numbers:
        declared = msg.DESCRIPTOR.fields_by_number
        if any(unknown[i].field_number in declared for i in range(len(unknown))):  # indexed: the stubs lack __iter__
            return True
    elif len(unknown):
        return True
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        values = value if fd.is_repeated else [value]
        if any(_has_unknown_fields(v, only_known_numbers) for v in values):
            return True
    return False


def _kind_of_record(record: Message) -> EntryKind:
    if isinstance(record, TransactionMetadataEntry):
        return EntryKind.TXN_LOG
    if isinstance(record, PendingAckMetadataEntry):
        return EntryKind.PENDING_ACK
    raise TypeError(f"not a transaction-log or pending-ack record: {type(record).__name__}")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)
