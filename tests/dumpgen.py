"""Dump fixtures written straight from the published formats (bookkeeper-formats.md), not with txnadmin's code."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import google_crc32c

from txnadmin.codec import (PendingAckMetadata, PendingAckMetadataEntry, PendingAckOp, TransactionMetadataEntry,
                            TxnOp, encode_batched, encode_plain)

TC_ML = "pulsar/system/persistent/__transaction_log_{}"
ACK_ML = "public/default/persistent/orders-billing__transaction_pending_ack"
MSG_ML = "public/default/persistent/orders"


def txn_record(seq: int) -> TransactionMetadataEntry:
    return TransactionMetadataEntry(metadata_op=TxnOp.NEW, txnid_most_bits=1, txnid_least_bits=seq, timeout_ms=1000,
                                    start_time=1, last_modification_time=1, max_local_txn_id=seq)


def ack_record(seq: int) -> PendingAckMetadataEntry:
    return PendingAckMetadataEntry(pending_ack_op=PendingAckOp.ACK, txnid_most_bits=1, txnid_least_bits=seq,
                                   pending_ack_metadata=[PendingAckMetadata(ledgerId=5, entryId=seq)])


def batched(n: int, seq: int = 0) -> bytes:
    return encode_batched([txn_record(seq + i) for i in range(n)])


def plain(seq: int = 0) -> bytes:
    return encode_plain(txn_record(seq))


def pulsar_message(i: int) -> bytes:
    """An ordinary message entry: 0E 01 checksum magic, then CRC, metadata size, metadata, payload."""
    meta = b"\x0a\x03abc\x10" + bytes([i % 100])
    body = struct.pack(">I", len(meta)) + meta + b"payload"
    return b"\x0e\x01" + struct.pack(">I", google_crc32c.value(body)) + body


def write_entry_log(path: Path, entries: list[tuple[int, int, bytes]], truncate_last: int = 0) -> None:
    """A finished DefaultEntryLogger file: header, [size][32-byte header][CRC32C][payload] records, ledgers map."""
    out = bytearray(b"BKLO" + struct.pack(">i", 1) + bytes(1016))
    lengths: dict[int, int] = {}
    counts: dict[int, int] = {}
    for ledger, entry, payload in entries:
        lengths[ledger] = lengths.get(ledger, 0) + len(payload)
        counts[ledger] = counts.get(ledger, 0) + len(payload)
        head = struct.pack(">qqqq", ledger, entry, entry - 1, lengths[ledger])
        digest = struct.pack(">I", google_crc32c.value(head + payload))
        record = head + digest + payload
        out += struct.pack(">i", len(record)) + record
    map_offset = len(out)
    items = b"".join(struct.pack(">qq", l, s) for l, s in counts.items())
    body = struct.pack(">qqi", -1, -2, len(counts)) + items
    out += struct.pack(">i", len(body)) + body
    out[8:20] = struct.pack(">qi", map_offset, len(counts))
    if truncate_last:
        out = out[:map_offset - truncate_last]
    path.write_bytes(bytes(out))


def ledger_list(path: Path, ledgers: dict[int, str], cursor: dict[int, str] | None = None) -> None:
    lines = []
    for lid, ml in ledgers.items():
        custom = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": ml}
        if cursor and lid in cursor:
            custom["pulsar/cursor"] = cursor[lid]
        meta = ", ".join(f"{k}=base64:{base64.b64encode(v.encode()).decode()}" for k, v in custom.items())
        lines.append(f"12:00:00.000 [main] INFO  org.apache.bookkeeper.tools.cli.commands.client.LedgerMetaDataCommand - ledgerID: {lid}")
        lines.append("12:00:00.001 [main] INFO  org.apache.bookkeeper.tools.cli.commands.client.LedgerMetaDataCommand - "
                     f"LedgerMetadata{{formatVersion=3, ensembleSize=2, writeQuorumSize=2, ackQuorumSize=2, state=CLOSED, "
                     f"length=63, lastEntryId=2, digestType=CRC32C, password=base64:, ensembles={{0=[10.0.0.1:3181, "
                     f"10.0.0.2:3181]}}, customMetadata={{{meta}}}}}")
    path.write_text("\n".join(lines) + "\n")


def hexdump(data: bytes) -> str:
    """commons-io HexDump as the hex entry formatter prints it."""
    rows = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        cells = "".join(f"{b:02X} " for b in chunk) + "   " * (16 - len(chunk))
        text = "".join(chr(b) if 0x20 <= b <= 0x7E else "." for b in chunk)
        rows.append(f"{off:08X} {cells}{text}")
    return "\n".join(rows)


def netty_dump(data: bytes) -> str:
    rows = ["         +-------------------------------------------------+",
            "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |",
            "+--------+-------------------------------------------------+----------------+"]
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        cells = "".join(f" {b:02x}" for b in chunk) + "   " * (16 - len(chunk))
        text = "".join(chr(b) if 0x20 <= b <= 0x7E else "." for b in chunk).ljust(16)
        rows.append(f"|{off:08x}|{cells} |{text}|")
    rows.append("+--------+-------------------------------------------------+----------------+")
    return "\n".join(rows)


def readledger_hex(entries: list[tuple[int, int, bytes]], style: str = "4.17") -> str:
    lines = ["JAVA_HOME not set, using java from PATH"]
    for lid, eid, payload in entries:
        if style == "4.17":
            lines.append(f"14:02:11.532 [main] INFO  org.apache.bookkeeper.tools.cli.commands.bookie.ReadLedgerCommand"
                         f" - --------- Lid={lid}, Eid={eid}, EntrySize={len(payload)} ---------")
        else:
            lines.append(f"14:02:11,532 INFO  Entry {{entryId={eid}, entrySize={len(payload)}, ledgerId={lid}}}")
        lines.append(hexdump(payload) if payload else
                     "Warn: Index is outside the data array's bounds : illegal index: 0 into array of length 0")
    return "\n".join(lines) + "\n"


def readledger_string(entries: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray()
    for lid, eid, payload in entries:
        out += (f"14:02:11,532 INFO  --------- Lid={lid}, Eid={eid}, EntrySize={len(payload)} ---------\n").encode()
        out += payload.decode("utf-8", "replace").encode() + b"\n"
    return bytes(out)


def readlog(entries: list[tuple[int, int, bytes]]) -> str:
    lines = []
    pos = 1024
    for lid, eid, payload in entries:
        stored = struct.pack(">I", 0xDEADBEEF) + payload  # readlog leaves the CRC32C digest in front
        lines += [f"--------- Lid={lid}, Eid={eid}, ByteOffset={pos}, EntrySize={len(payload) + 36} ---------",
                  "Type:           DATA", f"LastConfirmed:  {eid - 1}", "Data:", "", hexdump(stored), ""]
        pos += len(payload) + 40
    return "\n".join(lines) + "\n"


def readledger_bookie(entries: list[tuple[int, int, bytes]]) -> str:
    lines = []
    for lid, eid, payload in entries:
        raw = struct.pack(">qqqq", lid, eid, eid - 1, 100) + struct.pack(">I", 1) + payload
        lines += [f"14:02:11,532 INFO  --------- Lid={lid}, Eid={eid} ---------", "Data: ", netty_dump(raw)]
    return "\n".join(lines) + "\n"
