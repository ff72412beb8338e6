"""One registry of dump formats: each has a name, a sniffer and a reader of findings.

A finding is one entry of a dump, reduced to small fields — never its payload — so the same readers
feed the in-process scan and the Spark data source. Readers never raise on bad input: damage is
reported as an ``unreadable`` finding with the file and byte offset where it was found.
"""

from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from .classify import EMPTY, PLAIN, SUSPICIOUS, UNREADABLE, classify

SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Finding:
    file: str
    offset: int  # byte offset of the entry (entry logs) or of its header line (text dumps)
    ledger_id: int  # -1 when unknown (damage before any header)
    entry_id: int
    form: str  # batched | plain | suspicious | empty | unreadable | prefix-batched
    detail: str
    first8: str  # first 8 payload bytes as hex

    def to_json(self) -> dict:
        return {"file": self.file, "offset": self.offset, "ledgerId": self.ledger_id, "entryId": self.entry_id,
                "form": self.form, "detail": self.detail, "first8": self.first8}


# Ledger ids a reader skips without looking at their payloads (live ledgers that are not transaction ledgers).
Skip = frozenset
Reader = Callable[[str, Skip], Iterator[Finding]]
NO_SKIP: frozenset = frozenset()


@dataclass(frozen=True)
class DumpFormat:
    name: str
    description: str
    sniff: Callable[[bytes], int]  # confidence 0..100 from the first bytes of a file
    read: Reader
    splittable: bool = False


REGISTRY: dict[str, DumpFormat] = {}


def register(fmt: DumpFormat) -> DumpFormat:
    REGISTRY[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def detect(path: str) -> Optional[DumpFormat]:
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    scored = sorted(((fmt.sniff(head), fmt.name) for fmt in REGISTRY.values()), reverse=True)
    if not scored or scored[0][0] <= 0:
        return None
    return REGISTRY[scored[0][1]]


def _finding(path, offset, ledger, entry, payload: bytes) -> Finding:
    form, detail = classify(payload)
    return Finding(path, offset, ledger, entry, form, detail, payload[:8].hex())


# -- BookKeeper entry-log files ------------------------------------------------------------------

ENTRYLOG_HEADER = 1024
_REC = struct.Struct(">iqq")
DIGEST_LEN = 4  # CRC32C, Pulsar's default digest


def _sniff_entrylog(head: bytes) -> int:
    return 100 if head[:4] == b"BKLO" else 0


def read_entrylog(path: str, skip: Skip = NO_SKIP, start: int = ENTRYLOG_HEADER,
                  end: Optional[int] = None) -> Iterator[Finding]:
    """Walk `[int32 size][ledgerId][entryId][LAC][length][digest][payload]` records with mmap.

    Only the 4 payload bytes after the 36-byte header are looked at, and a body is decoded only when
    they are the batch prefix; ledgers in ``skip`` are passed over without touching their payload.
    """
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if size == 0:
            yield Finding(path, 0, -1, -1, UNREADABLE, "empty file", "")
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if mm[:4] != b"BKLO":
                yield Finding(path, 0, -1, -1, UNREADABLE, "no BKLO entry-log header", mm[:8].hex())
                return
            if size < ENTRYLOG_HEADER:
                yield Finding(path, 0, -1, -1, UNREADABLE, f"truncated header: {size} of 1024 bytes", "")
                return
            pos, stop = start, size if end is None else min(end, size)
            unpack = _REC.unpack_from
            while pos < stop:
                if pos + 20 > size:
                    yield Finding(path, pos, -1, -1, UNREADABLE, "truncated record header at end of file", "")
                    return
                length, ledger, entry = unpack(mm, pos)
                if length < 16 or pos + 4 + length > size:
                    yield Finding(path, pos, ledger if length >= 16 else -1, entry, UNREADABLE,
                                  f"bad or truncated record (size {length}, {size - pos - 4} bytes left)", "")
                    return
                body = pos + 4
                if ledger >= 0 and entry >= 0 and ledger not in skip:
                    if length < 32 + DIGEST_LEN:
                        yield Finding(path, pos, ledger, entry, UNREADABLE, f"record of {length} bytes is too short", "")
                    else:
                        p = body + 32 + DIGEST_LEN
                        head4 = mm[p:p + 4] if length > 32 + DIGEST_LEN else b""
                        if head4[:2] == b"\x0e\x01":
                            payload = mm[p: body + length]
                            yield _finding(path, pos, ledger, entry, payload)
                        elif not head4:
                            yield Finding(path, pos, ledger, entry, EMPTY, "empty entry", "")
                        else:
                            yield Finding(path, pos, ledger, entry, PLAIN, "", mm[p:p + 8].hex())
                pos = body + length


register(DumpFormat("entrylog", "BookKeeper DefaultEntryLogger .log file (digest before the payload)",
                    _sniff_entrylog, read_entrylog, splittable=True))


# -- text dumps ----------------------------------------------------------------------------------

HEADER_417 = re.compile(rb"Lid=(\S+), Eid=(-?\d+)(?:, ByteOffset=(\d+))?(?:, EntrySize=(\d+))?")
HEADER_418 = re.compile(rb"\{([^{}]*\bentryId=-?\d+[^{}]*\bledgerId=[^,}]+[^{}]*)\}")
HEX_LINE = re.compile(rb"^([0-9A-F]{8}) ((?:[0-9A-F]{2} |   ){16})")
NETTY_ROW = re.compile(rb"^\|([0-9a-f]{8})\|((?: [0-9a-f]{2}){1,16})\s*\|")


def parse_ledger_id(text: str) -> int:
    """Decimal (default), hex (`-ledgeridformat hex`) or UUID (`uuid`) ledger ids."""
    if "-" in text and len(text) == 36:
        return int(text.replace("-", ""), 16)
    try:
        return int(text)
    except ValueError:
        return int(text, 16)


def _headers(line: bytes) -> Optional[tuple[int, int]]:
    m = HEADER_417.search(line)
    if m and b"---------" in line:
        return parse_ledger_id(m.group(1).decode()), int(m.group(2))
    m = HEADER_418.search(line)
    if m and b"Entry" in line:
        attrs = dict(kv.split("=", 1) for kv in m.group(1).decode().replace(" ", "").split(","))
        return parse_ledger_id(attrs["ledgerId"]), int(attrs["entryId"])
    return None


def _text_entries(path: str) -> Iterator[tuple[int, int, int, list[bytes]]]:
    """(header offset, ledger, entry, lines after the header until the next header)."""
    with open(path, "rb") as fh:
        data = fh.read()
    current = None
    offset = 0
    for line in data.splitlines(keepends=True):
        header = _headers(line)
        if header is not None:
            if current:
                yield current
            current = (offset, header[0], header[1], [])
        elif current is not None:
            current[3].append(line)
        offset += len(line)
    if current:
        yield current


def _hex_payload(lines: list[bytes], netty: bool) -> tuple[bytes, Optional[str]]:
    out = bytearray()
    for line in lines:
        line = line.rstrip(b"\r\n")
        m = (NETTY_ROW if netty else HEX_LINE).match(line)
        if not m:
            continue
        if int(m.group(1), 16) != len(out):
            return bytes(out), f"hex dump offset {m.group(1).decode()} where {len(out):08x} was expected"
        out += bytes.fromhex(m.group(2).decode().replace(" ", ""))
    return bytes(out), None


def _make_hex_reader(header_bytes: int, netty: bool) -> Reader:
    def read(path: str, skip: Skip = NO_SKIP) -> Iterator[Finding]:
        found = False
        for offset, ledger, entry, lines in _text_entries(path):
            found = True
            if entry < 0 or ledger in skip:
                continue
            payload, problem = _hex_payload(lines, netty)
            if problem:
                yield Finding(path, offset, ledger, entry, UNREADABLE, problem, payload[:8].hex())
                continue
            if any(l.startswith(b"Warn: Index is outside") for l in lines) and not payload:
                yield Finding(path, offset, ledger, entry, EMPTY, "empty entry", "")
                continue
            if header_bytes and len(payload) < header_bytes:
                yield Finding(path, offset, ledger, entry, UNREADABLE,
                              f"stored entry shorter than {header_bytes} bytes", payload[:8].hex())
                continue
            yield _finding(path, offset, ledger, entry, payload[header_bytes:])
        if not found:
            yield Finding(path, 0, -1, -1, UNREADABLE, "no entry headers found", "")

    return read


def _sniff_text(kind: str) -> Callable[[bytes], int]:
    def sniff(head: bytes) -> int:
        if head[:4] == b"BKLO":
            return 0
        has_header = bool(HEADER_417.search(head) or HEADER_418.search(head))
        if not has_header:
            return 0
        readlog = b"ByteOffset=" in head
        netty = bool(re.search(rb"^\|[0-9a-f]{8}\|", head, re.M))
        hexdump = bool(re.search(rb"^[0-9A-F]{8} (?:[0-9A-F]{2} ){1,16}", head, re.M))
        if kind == "readlog":
            return 90 if readlog else 0
        if kind == "readledger-bookie":
            return 85 if netty and not readlog else 0
        if kind == "readledger-hex":
            return 80 if hexdump and not readlog and not netty else 0
        return 40 if not readlog else 0  # readledger-string: headers without a hex dump

    return sniff


def read_string_dump(path: str, skip: Skip = NO_SKIP) -> Iterator[Finding]:
    """The default string formatter: only the first bytes survive, so only the prefix can be judged."""
    found = False
    for offset, ledger, entry, lines in _text_entries(path):
        found = True
        if entry < 0 or ledger in skip:
            continue
        first = lines[0] if lines else b""
        if first.startswith(b"\x0e\x01\x00\x01"):
            yield Finding(path, offset, ledger, entry, "prefix-batched",
                          "string formatter: batch prefix seen, body not trustworthy", first[:8].hex())
        elif first.startswith(b"\x0e\x01"):
            yield Finding(path, offset, ledger, entry, SUSPICIOUS,
                          "string formatter: 0E 01 with another version", first[:8].hex())
        else:
            yield Finding(path, offset, ledger, entry, PLAIN, "string formatter", first[:8].hex())
    if not found:
        yield Finding(path, 0, -1, -1, UNREADABLE, "no entry headers found", "")


register(DumpFormat("readlog", "`bookkeeper shell readlog -m` (hex formatter; CRC32C digest still in the payload)",
                    _sniff_text("readlog"), _make_hex_reader(DIGEST_LEN, netty=False)))
register(DumpFormat("readledger-bookie", "`readledger -msg -bookie` (Netty hex dump of the raw stored entry)",
                    _sniff_text("readledger-bookie"), _make_hex_reader(32 + DIGEST_LEN, netty=True)))
register(DumpFormat("readledger-hex", "`readledger -msg` with `-entryformat hex` (4.17 and 4.18 headers)",
                    _sniff_text("readledger-hex"), _make_hex_reader(0, netty=False)))
register(DumpFormat("readledger-string", "`readledger -msg` with the default string formatter (prefix check only)",
                    _sniff_text("readledger-string"), read_string_dump))
