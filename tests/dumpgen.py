"""Dump fixtures written straight from the published formats (bookkeeper-formats.md, BookKeeper's DigestManager,
ReadLedgerCommand, FormatUtil, ListLedgersCommand sources; Pulsar's .proto files), with nothing from txnadmin: not
its scan code, not its codec."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import zlib
from pathlib import Path

import google_crc32c

TC_ML = "pulsar/system/persistent/__transaction_log_{}"
ACK_ML = "public/default/persistent/orders-billing__transaction_pending_ack"
MSG_ML = "public/default/persistent/orders"


# Records are built field by field from PulsarTransactionMetadata.proto and TransactionPendingAck.proto, never with
# txnadmin's codec: a fixture the scanner's own encoder wrote would agree with its decoder by construction.

def _field(number: int, value) -> bytes:
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    return _varint(number << 3) + _varint(value)


def txn_record(seq: int) -> bytes:
    """TransactionMetadataEntry NEW: metadata_op=NEW(0), txnid (2 least, 3 most), timeout_ms(8), start_time(9),
    last_modification_time(10), max_local_txn_id(11)."""
    return raw_txn_record(seq)


def ack_record(seq: int) -> bytes:
    """PendingAckMetadataEntry: pending_ack_op=ACK(1), txnid (3 least, 4 most), one PendingAckMetadata(5) with
    ledgerId(1), entryId(2)."""
    position = _field(1, 5) + _field(2, seq)
    return _field(1, 1) + _field(3, seq) + _field(4, 1) + _field(5, position)


def batched(n: int, seq: int = 0) -> bytes:
    return raw_batch([txn_record(seq + i) for i in range(n)])


def ack_batch(records: list[bytes]) -> bytes:
    return raw_batch(records)


def plain(seq: int = 0) -> bytes:
    return txn_record(seq)


def pulsar_message(i: int) -> bytes:
    """An ordinary message entry: 0E 01 checksum magic, then CRC, metadata size, metadata, payload."""
    meta = b"\x0a\x03abc\x10" + bytes([i % 100])
    body = struct.pack(">I", len(meta)) + meta + b"payload"
    return b"\x0e\x01" + struct.pack(">I", google_crc32c.value(body)) + body


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def raw_txn_record(seq: int, extra_fields: bytes = b"") -> bytes:
    """TransactionMetadataEntry by hand: metadata_op=NEW(1), least bits(2), most bits(3), timeout(8), times(9, 10),
    max_local_txn_id(11), then any extra (unknown) fields."""
    fields = [(1, 0), (2, seq), (3, 1), (8, 1000), (9, 1), (10, 1), (11, seq)]
    return b"".join(_varint(n << 3) + _varint(v) for n, v in fields) + extra_fields


def raw_batch(records: list[bytes], version: int = 1) -> bytes:
    """PIP-160: 0E 01, the version, then Batched…MetadataEntry with each record as field 1 (length-delimited)."""
    return struct.pack(">HH", 0x0E01, version) + b"".join(b"\x0a" + _varint(len(r)) + r for r in records)


def digest(kind: str, header: bytes, payload: bytes, password: bytes = b"") -> bytes:
    """BookKeeper's DigestManager subclasses: over the 32-byte header then the payload."""
    if kind == "CRC32C":
        return struct.pack(">I", google_crc32c.value(header + payload))
    if kind == "CRC32":
        return struct.pack(">q", zlib.crc32(header + payload))  # java.util.zip.CRC32 value written as a long
    if kind == "MAC":
        return hmac.new(hashlib.sha1(b"mac" + password).digest(), header + payload, hashlib.sha1).digest()
    return b""  # DUMMY


def stored_entry(ledger: int, entry: int, payload: bytes, length: int, kind: str = "CRC32C",
                 password: bytes = b"") -> bytes:
    head = struct.pack(">qqqq", ledger, entry, entry - 1, length)
    return head + digest(kind, head, payload, password) + payload


def write_entry_log(path: Path, entries: list[tuple[int, int, bytes]], truncate_last: int = 0,
                    digests: dict | None = None, password: bytes = b"",
                    corrupt: set[tuple[int, int]] | None = None,
                    corrupt_header: set[tuple[int, int]] | None = None, finished: bool = True) -> None:
    """A DefaultEntryLogger file: header, [size][32-byte header][digest][payload] records and, once finished
    (rotated), the ledgers map: per ledger the bytes it holds in the file, each record counted with its 4-byte
    size (`EntryLogMetadata.addLedgerSize(ledgerId, entrySize + 4)`).

    ``digests`` gives a ledger's digest type (CRC32C by default), or one entry's, keyed by (ledger, entry); ``corrupt`` flips a byte of those entries' payload
    after the digest was computed (a damaged byte on disk); ``corrupt_header`` flips a bit of their ledger id."""
    out = bytearray(b"BKLO" + struct.pack(">i", 1) + bytes(1016))
    lengths: dict[int, int] = {}
    counts: dict[int, int] = {}
    for ledger, entry, payload in entries:
        lengths[ledger] = lengths.get(ledger, 0) + len(payload)
        kind = (digests or {}).get((ledger, entry)) or (digests or {}).get(ledger, "CRC32C")
        record = bytearray(stored_entry(ledger, entry, payload, lengths[ledger], kind, password))
        if corrupt and (ledger, entry) in corrupt:
            record[-len(payload)] ^= 0x40  # 0E → 4E: the damaged prefix byte no longer looks like the magic
        if corrupt_header and (ledger, entry) in corrupt_header:
            record[7] ^= 0x01  # a flipped bit in the stored ledger id: the entry claims another ledger
        out += struct.pack(">i", len(record)) + record
        counts[ledger] = counts.get(ledger, 0) + len(record) + 4  # the map counts what was written, as written
    if not finished:
        path.write_bytes(bytes(out[:len(out) - truncate_last]))
        return
    map_offset = len(out)
    items = b"".join(struct.pack(">qq", l, s) for l, s in counts.items())
    body = struct.pack(">qqi", -1, -2, len(counts)) + items
    out += struct.pack(">i", len(body)) + body
    out[8:20] = struct.pack(">qi", map_offset, len(counts))
    if truncate_last:
        out = out[:map_offset - truncate_last]
    path.write_bytes(bytes(out))


def write_direct_entry_log(path: Path, entries: list[tuple[int, int, bytes]], flush_every: int = 2,
                           finished: bool = True, preallocated: int = 8192,
                           corrupt: set[tuple[int, int]] | None = None) -> None:
    """A DirectEntryLogger file (BookKeeper 4.16+, `dbStorage_directIOEntryLogger`), from its Header, DirectWriter,
    Buffer and LogMetadata sources: a 4096-byte header whose bytes 1024.. are a dummy record (size 3068, ledger
    id -1) so the legacy reader skips to the first block; `[size][entry]` records; each flush pads with 0xF0 to
    the next 4096-byte boundary (read as a negative size: skip to the boundary); once finished, the ledgers map
    batches and the header rewritten with the map's offset; fallocate'd space reads as zeros (size 0: the end)."""
    align = 4096
    out = bytearray(b"BKLO" + struct.pack(">i", 1) + bytes(1016))
    out += struct.pack(">iq", align - 1024 - 4, -1) + bytes(align - 1024 - 12)
    lengths: dict[int, int] = {}
    counts: dict[int, int] = {}

    def pad() -> None:
        out.extend(b"\xf0" * (-len(out) % align))

    for n, (ledger, entry, payload) in enumerate(entries, 1):
        lengths[ledger] = lengths.get(ledger, 0) + len(payload)
        record = bytearray(stored_entry(ledger, entry, payload, lengths[ledger]))
        if corrupt and (ledger, entry) in corrupt:
            record[-len(payload)] ^= 0x40
        out += struct.pack(">i", len(record)) + record
        counts[ledger] = counts.get(ledger, 0) + len(record) + 4
        if n % flush_every == 0:
            pad()
    pad()
    if finished:
        map_offset = len(out)
        body = struct.pack(">qqi", -1, -2, len(counts)) + b"".join(struct.pack(">qq", l, c) for l, c in counts.items())
        out += struct.pack(">i", len(body)) + body
        pad()
        out[8:20] = struct.pack(">qi", map_offset, len(counts))
    path.write_bytes(bytes(out) + bytes(preallocated))


def ledger_list(path: Path, ledgers: dict[int, str], cursor: dict[int, str] | None = None,
                last: dict[int, int | None] | None = None, digest_type: str | dict[int, str] = "CRC32C",
                meta: bool = True, prefix: str = "pulsar", password: bytes = b"", command: str = "listledgers",
                id_format=str) -> None:
    """`listledgers -meta` (or without -meta, or `ledgermetadata` per ledger) as the shell logs it; ``last[lid]``
    None makes the ledger OPEN.

    ``prefix`` "4.18" is BookKeeper 4.18 (slog, BP-69) under a console layout with ``%X`` (``%m %X%n``, as its
    shell's rolling-file layout): ListLedgersCommand logs one ``log entry`` event with the attributes ledgerId and
    metadata, LedgerMetaDataCommand a ``ledgerID`` event (ledgerId) then a ``log entry`` event (metadata);
    "4.18-console" is the same under the default console layout, which prints no attributes at all."""
    lines = []
    pre = {"pulsar": "12:00:00.000 [main] INFO  org.apache.bookkeeper.tools.cli.commands.client.ListLedgersCommand - ",
           "bk": "12:00:00,000 INFO  ", "none": "", "4.18": "12:00:00,000 INFO  ",
           "4.18-console": "12:00:00,000 INFO  "}[prefix]
    for lid, ml in ledgers.items():
        text = None
        if meta:
            text = _metadata_text(lid, ml, cursor, last, digest_type, password)
        if prefix == "4.18-console":
            lines.append(f"{pre}log entry" if command == "listledgers" else f"{pre}ledgerID")
            if text and command != "listledgers":
                lines.append(f"{pre}log entry")
        elif prefix == "4.18" and command == "listledgers":
            attrs = f"ledgerId={id_format(lid)}" + (f", metadata={text}" if text else "")
            lines.append(f"{pre}log entry {{{attrs}}}")
        elif prefix == "4.18":
            lines.append(f"{pre}ledgerID {{ledgerId={id_format(lid)}}}")
            if text:
                lines.append(f"{pre}log entry {{metadata={text}}}")
        else:
            lines.append(f"{pre}ledgerID: {id_format(lid)}")
            if text:
                lines.append(f"{pre}{text}")
    path.write_text("\n".join(lines) + "\n")


def _metadata_text(lid: int, ml: str, cursor, last, digest_type, password: bytes) -> str:
    """`LedgerMetadataImpl.toString()`: Guava's toStringHelper, customMetadata values as `base64:`."""
    custom = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": ml}
    if cursor and lid in cursor:
        custom["pulsar/cursor"] = cursor[lid]
    custom_text = ", ".join(f"{k}=base64:{base64.b64encode(v.encode()).decode()}" for k, v in custom.items())
    lac = (last or {}).get(lid)
    kind = digest_type if isinstance(digest_type, str) else digest_type.get(lid, "CRC32C")
    state = "state=CLOSED, length=63, lastEntryId=" + str(lac) if lac is not None else "state=OPEN"
    return (f"LedgerMetadata{{formatVersion=3, ensembleSize=2, writeQuorumSize=2, ackQuorumSize=2, "
            f"{state}, digestType={kind}, password=base64:{base64.b64encode(password).decode()}, "
            f"ensembles={{0=[10.0.0.1:3181, 10.0.0.2:3181]}}, customMetadata={{{custom_text}}}}}")


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


# Log prefixes the shell's console appender puts before each INFO line, per distribution and version.
PREFIXES = {
    "4.14": "2022-05-01T14:02:11,532+0000 [main] INFO  org.apache.bookkeeper.tools.cli.commands.bookie.{cls} - ",
    "4.15": "2023-01-10T14:02:11,532+0000 [main] INFO  org.apache.bookkeeper.tools.cli.commands.bookie.{cls} - ",
    "4.16": "2024-02-01T14:02:11,532+0000 [main] INFO  org.apache.bookkeeper.tools.cli.commands.bookie.{cls} - ",
    "4.17": "14:02:11.532 [main] INFO  org.apache.bookkeeper.tools.cli.commands.bookie.{cls} - ",
    "bk": "14:02:11,532 INFO  ",
}
VERSIONS = ("4.14", "4.15", "4.16", "4.17", "4.18")


def _prefix(style: str, cls: str = "ReadLedgerCommand") -> str:
    return PREFIXES.get(style, PREFIXES["bk"]).format(cls=cls)


def readledger_hex(entries: list[tuple[int, int, bytes]], style: str = "4.17", ids: bool = True,
                   id_format=str) -> str:
    """`bookkeeper shell -entryformat hex readledger -msg`: a logged header, then HexDump straight to stdout.

    4.14–4.17 log `--------- Lid=…, Eid=…, EntrySize=… ---------`; 4.18 logs an `Entry` event whose attributes
    appear only with a %X layout (``ids=False`` is the default 4.18 console: no ids at all)."""
    lines = ["JAVA_HOME not set, using java from PATH"]
    for lid, eid, payload in entries:
        if style != "4.18":
            lines.append(f"{_prefix(style)}--------- Lid={id_format(lid)}, Eid={eid}, EntrySize={len(payload)} "
                         "---------")
        elif ids:
            lines.append(f"14:02:11,532 INFO  Entry {{entryId={eid}, entrySize={len(payload)}, "
                         f"ledgerId={id_format(lid)}}}")
        else:
            lines.append("14:02:11,532 INFO  Entry")
        lines.append(hexdump(payload) if payload else
                     "Warn: Index is outside the data array's bounds : illegal index: 0 into array of length 0")
    return "\n".join(lines) + "\n"


def readledger_string(entries: list[tuple[int, int, bytes]], style: str = "bk") -> bytes:
    """The default (string) formatter: the payload as lossy UTF-8 and a newline, straight to stdout."""
    out = bytearray()
    for lid, eid, payload in entries:
        if style == "4.18":
            out += f"14:02:11,532 INFO  Entry {{entryId={eid}, entrySize={len(payload)}, ledgerId={lid}}}\n".encode()
        else:
            out += f"{_prefix(style)}--------- Lid={lid}, Eid={eid}, EntrySize={len(payload)} ---------\n".encode()
        out += payload.decode("utf-8", "replace").encode() + b"\n"
    return bytes(out)


def readlog(entries: list[tuple[int, int, bytes]], style: str = "bk", kind: str = "CRC32C") -> str:
    """`readlog -m`: FormatUtil logs the header lines; the formatter prints digest + payload (32 bytes skipped)."""
    lines = []
    pos = 1024
    pre = _prefix(style, "FormatUtil") if style != "4.18" else "14:02:11,532 INFO  "
    for lid, eid, payload in entries:
        stored = stored_entry(lid, eid, payload, 100, kind)
        if style == "4.18":
            # FormatUtil on 4.18 logs two slog events per data entry (attributes sorted by %X), then the formatter.
            lines += [f"{pre}Entry {{entryId={eid}, entrySize={len(stored)}, ledgerId={lid}, position={pos}}}",
                      f"{pre}Entry {{entryId={eid}, lastAddConfirmed={eid - 1}, ledgerId={lid}, type=DATA}}",
                      hexdump(stored[32:])]
        else:
            lines.append(f"{pre}--------- Lid={lid}, Eid={eid}, ByteOffset={pos}, EntrySize={len(stored)} ---------")
            lines += [f"{pre}Type:           DATA", f"{pre}LastConfirmed:  {eid - 1}", f"{pre}Data:", pre,
                      hexdump(stored[32:]), pre]
        pos += len(stored) + 4
    return "\n".join(lines) + "\n"


def readledger_bookie(entries: list[tuple[int, int, bytes]], style: str = "bk", kind: str = "CRC32C",
                      corrupt: bool = False) -> str:
    """`readledger -msg -bookie`: the raw stored entry as Netty's prettyHexDump, logged after `Data: `."""
    lines = []
    for lid, eid, payload in entries:
        raw = bytearray(stored_entry(lid, eid, payload, 100, kind))
        if corrupt:
            raw[-1] ^= 1
        dump = netty_dump(bytes(raw)).split("\n")
        if style == "4.18":
            lines += [f"14:02:11,532 INFO  Entry {{data={dump[0]}", *dump[1:-1], f"{dump[-1]}, entryId={eid}, "
                      f"ledgerId={lid}}}"]
        else:
            lines += [f"{_prefix(style)}--------- Lid={lid}, Eid={eid} ---------", f"{_prefix(style)}Data: {dump[0]}",
                      *dump[1:]]
    return "\n".join(lines) + "\n"
