"""BookKeeper's DefaultEntryLogger file layout: header, length-prefixed stored entries, ledgers map.

Pure functions over bytes and file descriptors, shared by the storage and anything that reads entry logs.
All integers are big-endian.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import google_crc32c

HEADER_SIZE = 1024
HEADER_MAGIC = b"BKLO"
HEADER_VERSION = 1
# Header field positions: magic, version, then the ledgers-map offset and ledger count filled in when finished.
LEDGERS_MAP_OFFSET_POSITION = 8
ENTRY_HEADER_SIZE = 32  # ledgerId, entryId, lastAddConfirmed, ledger length (DigestManager.METADATA_LENGTH)
DIGEST_SIZE = 4  # CRC32C
PAYLOAD_OFFSET = ENTRY_HEADER_SIZE + DIGEST_SIZE
LEDGERS_MAP_LEDGER_ID = -1
LEDGERS_MAP_ENTRY_ID = -2
LEDGERS_MAP_MAX_BATCH = 10000
# size prefix + ledgerId + entryId + ledger count
LEDGERS_MAP_HEADER_SIZE = 4 + 8 + 8 + 4
LEDGERS_MAP_ENTRY_SIZE = 8 + 8

_HEADER = struct.Struct(">4sIqI")
_ENTRY_HEADER = struct.Struct(">qqqq")
_SIZE = struct.Struct(">i")
_RECORD_PREFIX = struct.Struct(">iqq")  # size, ledgerId, entryId
_MAP_HEAD = struct.Struct(">iqqi")
_MAP_ITEM = struct.Struct(">qq")
_DIGEST = struct.Struct(">I")


def log_file_name(log_id: int) -> str:
    return f"{log_id:x}.log"


def parse_log_file_name(name: str) -> int | None:
    """Log id of `<hex>.log`, or None for any other name."""
    if not name.endswith(".log"):
        return None
    stem = name[:-4]
    if not stem or any(c not in "0123456789abcdef" for c in stem):
        return None
    return int(stem, 16)


def encode_header(ledgers_map_offset: int = 0, ledger_count: int = 0) -> bytes:
    head = _HEADER.pack(HEADER_MAGIC, HEADER_VERSION, ledgers_map_offset, ledger_count)
    return head + bytes(HEADER_SIZE - len(head))


@dataclass(frozen=True)
class LogHeader:
    version: int
    ledgers_map_offset: int  # 0 while the file is still being written
    ledger_count: int

    @property
    def finished(self) -> bool:
        return self.ledgers_map_offset > 0


def decode_header(data: bytes) -> LogHeader:
    if len(data) < _HEADER.size:
        raise ValueError(f"entry-log header is {len(data)} bytes, need {HEADER_SIZE}")
    magic, version, offset, count = _HEADER.unpack_from(data)
    if magic != HEADER_MAGIC:
        raise ValueError(f"entry-log header starts with {magic!r}, not b'BKLO'")
    return LogHeader(version, offset, count)


def entry_digest(entry_header: bytes, payload: bytes) -> int:
    """CRC32C over the 32 header bytes followed by the payload, as BookKeeper's CRC32C digest manager does."""
    return google_crc32c.extend(google_crc32c.value(entry_header), payload)


def encode_record(ledger_id: int, entry_id: int, last_add_confirmed: int, ledger_length: int, payload: bytes) -> bytes:
    """One entry-log record: int32 size, then the stored entry (32-byte header, CRC32C, payload)."""
    head = _ENTRY_HEADER.pack(ledger_id, entry_id, last_add_confirmed, ledger_length)
    digest = _DIGEST.pack(entry_digest(head, payload))
    return b"".join((_SIZE.pack(PAYLOAD_OFFSET + len(payload)), head, digest, payload))


@dataclass(frozen=True)
class StoredEntry:
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    ledger_length: int
    payload: bytes


def decode_stored_entry(stored: bytes) -> StoredEntry:
    """Parse and verify one stored entry (the bytes after the size prefix); raises ValueError if it is damaged."""
    if len(stored) < PAYLOAD_OFFSET:
        raise ValueError(f"stored entry is {len(stored)} bytes, shorter than its {PAYLOAD_OFFSET}-byte header")
    ledger_id, entry_id, lac, length = _ENTRY_HEADER.unpack_from(stored)
    (digest,) = _DIGEST.unpack_from(stored, ENTRY_HEADER_SIZE)
    payload = stored[PAYLOAD_OFFSET:]
    if entry_digest(stored[:ENTRY_HEADER_SIZE], payload) != digest:
        raise ValueError(f"CRC32C mismatch in ledger {ledger_id} entry {entry_id}")
    return StoredEntry(ledger_id, entry_id, lac, length, bytes(payload))


def encode_ledgers_map(ledger_bytes: dict[int, int]) -> bytes:
    """The ledgers-map records BookKeeper appends to a finished file: batches of (ledgerId, bytes in this file)."""
    items = sorted(ledger_bytes.items())
    out = []
    for start in range(0, len(items), LEDGERS_MAP_MAX_BATCH):
        batch = items[start:start + LEDGERS_MAP_MAX_BATCH]
        size = LEDGERS_MAP_HEADER_SIZE + LEDGERS_MAP_ENTRY_SIZE * len(batch)
        out.append(_MAP_HEAD.pack(size - 4, LEDGERS_MAP_LEDGER_ID, LEDGERS_MAP_ENTRY_ID, len(batch)))
        out.extend(_MAP_ITEM.pack(ledger, nbytes) for ledger, nbytes in batch)
    return b"".join(out)


def decode_ledgers_map(data: bytes) -> dict[int, int]:
    """Inverse of encode_ledgers_map; raises ValueError on anything else."""
    result: dict[int, int] = {}
    pos = 0
    while pos < len(data):
        if len(data) - pos < LEDGERS_MAP_HEADER_SIZE:
            raise ValueError(f"ledgers map truncated at byte {pos}")
        size, ledger_id, entry_id, count = _MAP_HEAD.unpack_from(data, pos)
        if ledger_id != LEDGERS_MAP_LEDGER_ID or entry_id != LEDGERS_MAP_ENTRY_ID:
            raise ValueError(f"ledgers map record at byte {pos} has ids ({ledger_id}, {entry_id})")
        if count < 0:  # a negative count fits a negative size, which would step back before the record
            raise ValueError(f"ledgers map record at byte {pos} has a negative ledger count {count}")
        if size != LEDGERS_MAP_HEADER_SIZE - 4 + LEDGERS_MAP_ENTRY_SIZE * count or pos + 4 + size > len(data):
            raise ValueError(f"ledgers map record at byte {pos} has a bad size {size}")
        for i in range(count):
            ledger, nbytes = _MAP_ITEM.unpack_from(data, pos + LEDGERS_MAP_HEADER_SIZE + i * LEDGERS_MAP_ENTRY_SIZE)
            result[ledger] = nbytes
        pos += 4 + size
    return result


@dataclass(frozen=True)
class RecordLocation:
    offset: int  # of the int32 size prefix
    size: int  # of the stored entry (without the prefix)
    ledger_id: int
    entry_id: int

    @property
    def end(self) -> int:
        return self.offset + 4 + self.size


@dataclass
class ScanResult:
    records: list[RecordLocation]
    end: int  # offset just past the last good data record
    stop_reason: str  # "end", "ledgers-map" or why the tail is torn


def scan_records(fd: int, start: int, file_size: int, *, verify: bool = True, chunk: int = 4 << 20) -> ScanResult:
    """Walk data records from ``start``; stop at the file end, the ledgers map, or the first damaged record.

    With ``verify`` every record's CRC32C is checked, so a torn or half-written tail is never taken for data.
    """
    records: list[RecordLocation] = []
    pos = start
    buf = b""
    buf_start = start

    def window(offset: int, length: int) -> bytes | None:
        nonlocal buf, buf_start
        if offset + length > file_size:
            return None
        if offset < buf_start or offset + length > buf_start + len(buf):
            buf = os.pread(fd, max(length, chunk), offset)
            buf_start = offset
            if len(buf) < length:
                return None
        rel = offset - buf_start
        return buf[rel:rel + length]

    while True:
        if pos == file_size:
            return ScanResult(records, pos, "end")
        prefix = window(pos, _RECORD_PREFIX.size)
        if prefix is None:
            return ScanResult(records, pos, f"torn record header at byte {pos}")
        size, ledger_id, entry_id = _RECORD_PREFIX.unpack(prefix)
        if ledger_id == LEDGERS_MAP_LEDGER_ID and entry_id == LEDGERS_MAP_ENTRY_ID:
            return ScanResult(records, pos, "ledgers-map")
        if size < PAYLOAD_OFFSET or ledger_id < 0 or entry_id < 0:
            return ScanResult(records, pos, f"bad record frame at byte {pos}")
        if pos + 4 + size > file_size:
            return ScanResult(records, pos, f"torn record at byte {pos}")
        if verify:
            stored = window(pos + 4, size)
            if stored is None:
                return ScanResult(records, pos, f"torn record at byte {pos}")
            try:
                decode_stored_entry(stored)
            except ValueError as exc:
                return ScanResult(records, pos, f"{exc} at byte {pos}")
        records.append(RecordLocation(pos, size, ledger_id, entry_id))
        pos += 4 + size


def iter_entries(path: Path | str) -> Iterator[tuple[int, StoredEntry]]:
    """Every verified data record of one entry-log file, with its offset (a convenience for tools and tests)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        head = decode_header(os.pread(fd, HEADER_SIZE, 0))
        end = head.ledgers_map_offset if head.finished else size
        for loc in scan_records(fd, HEADER_SIZE, end).records:
            yield loc.offset, decode_stored_entry(os.pread(fd, loc.size, loc.offset + 4))
    finally:
        os.close(fd)
