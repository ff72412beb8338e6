"""One registry of dump formats: each has a name, a sniffer and a reader of findings.

A finding is one entry of a dump, reduced to small fields — never its payload — so the same readers feed the
in-process scan and the Spark data source. Readers never raise on bad input: damage is reported as an
``unreadable`` (or ``bad-digest``) finding with the file and byte offset where it was found, and a ledger or entry
id that the dump does not state is never guessed (the finding then carries ledger -1).
``tests/test_scan_fuzz.py`` holds every registered reader to that.
"""

from __future__ import annotations

import base64
import mmap
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Optional, Union

from . import digests
from .classify import BAD_DIGEST, BATCHED, EMPTY, PLAIN, UNREADABLE, classify, describe_batch

SNIFF_BYTES = 8192
MAX_ID = (1 << 63) - 1


@dataclass(frozen=True)
class Finding:
    file: str
    offset: int  # byte offset of the entry (entry logs) or of its header line (text dumps)
    ledger_id: int  # -1 when the dump does not state it (damage before a readable header)
    entry_id: int  # -1 likewise
    form: str  # batched | plain | empty | unreadable | bad-digest
    detail: str
    first8: str  # first 8 payload bytes as hex
    digest: str = digests.UNCHECKED  # verified | unchecked | failed
    kind: str = ""  # txn-log | pending-ack when a batch decodes as that log's
    digest_type: str = ""  # the digest type that verified it (from the metadata, or detected)

    def to_json(self) -> dict:
        return {"file": self.file, "offset": self.offset, "ledgerId": self.ledger_id, "entryId": self.entry_id,
                "form": self.form, "detail": self.detail, "first8": self.first8, "digest": self.digest,
                "kind": self.kind, "digestType": self.digest_type}


@dataclass(frozen=True)
class ReadPlan:
    """What the readers need to know besides the file: ledgers to pass over, each ledger's digest, id format.

    ``skip``: live ledgers that are not transaction ledgers (messages, cursors), passed over unread.
    ``digests``: ledger id → (digest type, password or None) from the ledger list's metadata.
    ``ledger_id_format``: how the dump prints ledger ids (`-ledgeridformat`): long (BookKeeper's default) or hex;
    UUID-formatted ids are recognised by their shape.
    ``verify_skipped``: verify skipped ledgers' digests as well and report only failures (`--verify-all-digests`).
    """

    skip: frozenset = frozenset()
    digests: Mapping[int, tuple[str, Optional[bytes]]] = field(default_factory=dict)
    ledger_id_format: str = "long"
    verify_skipped: bool = False  # check the digests of skipped ledgers too (a damaged id can move an entry)

    def __contains__(self, ledger: object) -> bool:  # readers written against the old `skip` set keep working
        return ledger in self.skip

    def to_json(self) -> dict:
        return {"skip": sorted(self.skip), "idFormat": self.ledger_id_format, "verifySkipped": self.verify_skipped,
                "digests": {str(k): [t, None if p is None else base64.b64encode(p).decode()]
                            for k, (t, p) in self.digests.items()}}

    @classmethod
    def from_json(cls, data: dict) -> "ReadPlan":
        return cls(frozenset(data.get("skip", ())),
                   {int(k): (t, None if p is None else base64.b64decode(p)) for k, (t, p) in
                    data.get("digests", {}).items()}, data.get("idFormat", "long"), bool(data.get("verifySkipped")))


NO_PLAN = ReadPlan()
Reader = Callable[[str, ReadPlan], Iterator[Finding]]


def as_plan(plan) -> ReadPlan:
    return plan if isinstance(plan, ReadPlan) else ReadPlan(frozenset(plan or ()))


@dataclass
class ScanInput:
    """One file to scan and the format it was detected (or named) as; the Spark job ships these to its workers."""

    path: str
    format: str
    size: int


@dataclass(frozen=True)
class DumpFormat:
    name: str
    description: str
    sniff: Callable[[bytes], int]  # confidence 0..100 from the first bytes of a file
    read: Reader
    splittable: bool = False

    def findings(self, path: str, plan: ReadPlan) -> Iterator[Finding]:
        """The reader's findings; a reader that raises anyway (a plug-in, or a bug) costs a located finding."""
        try:
            yield from self.read(path, plan)
        except Exception as exc:  # noqa: BLE001 - the promise is per reader; this keeps one bug from a traceback
            yield Finding(path, 0, -1, -1, UNREADABLE, f"{self.name} reader failed: {type(exc).__name__}: {exc}"[:300],
                          "", digests.UNCHECKED)


REGISTRY: dict[str, DumpFormat] = {}


def register(fmt: DumpFormat) -> DumpFormat:
    REGISTRY[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def detect(path: str) -> Optional[DumpFormat]:
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    scored = []
    for fmt in REGISTRY.values():
        try:
            scored.append((int(fmt.sniff(head)), fmt.name))
        except Exception:  # noqa: BLE001 - a sniffer that chokes simply does not claim the file
            continue
    scored.sort(reverse=True)
    if not scored or scored[0][0] <= 0:
        return None
    return REGISTRY[scored[0][1]]


UUID_ID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class LedgerIdError(ValueError):
    pass


def parse_ledger_id(text, fmt: str = "long") -> int:
    """A ledger id as BookKeeper's `LedgerIdFormatter` printed it; raises :class:`LedgerIdError` only.

    Decimal by default; hex only when the operator says the dump used ``-ledgeridformat hex`` (``10`` means 16
    there, so guessing would invent ids); ``new UUID(0, id)`` strings are unambiguous and always accepted.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("ascii", "replace")
    text = str(text).strip()
    if UUID_ID.match(text):
        value = int(text.replace("-", ""), 16)
        if value >> 64:
            raise LedgerIdError(f"ledger id {text!r} is a UUID with high bits set")
        value &= (1 << 64) - 1
    elif fmt == "hex" and re.fullmatch(r"[0-9a-fA-F]{1,16}", text):
        value = int(text, 16)
    elif re.fullmatch(r"[0-9]{1,19}", text):
        if fmt == "hex":
            value = int(text, 16)
        else:
            value = int(text)
    elif re.fullmatch(r"[0-9a-fA-F]{1,16}", text):
        raise LedgerIdError(f"ledger id {text!r} is not decimal (was the dump taken with -ledgeridformat hex? "
                            "then pass --ledger-id-format hex)")
    else:
        raise LedgerIdError(f"ledger id {text[:40]!r} is not a ledger id")
    if value > MAX_ID:
        raise LedgerIdError(f"ledger id {text!r} is out of range")
    return value


def _entry_id(text: bytes) -> Optional[int]:
    if not re.fullmatch(rb"-?[0-9]{1,19}", text):
        return None
    value = int(text)
    return value if -MAX_ID <= value <= MAX_ID else None


def _finding(path, offset, ledger, entry, payload: bytes, digest: str = digests.UNCHECKED, note: str = "",
             digest_type: str = "") -> Finding:
    form, detail, kind = classify(payload)
    if note:
        detail = f"{detail}; {note}" if detail else note
    return Finding(path, offset, ledger, entry, form, detail, payload[:8].hex(), digest, kind, digest_type)


def _stored_finding(path: str, offset: int, ledger: int, entry: int, stored: bytes, plan: ReadPlan,
                    detected: Optional[dict] = None) -> Finding:
    """A stored entry (32-byte header, digest, payload) judged by its ledger's digest type, then classified.

    Without metadata the type is detected once per ledger (in ``detected``) and then held to: an entry that fails
    the detected type is a mismatch, never re-tried with a weaker one. Another file of the same ledger detects
    afresh; the verifying type goes with each finding, so the tally catches a ledger verified under two types.
    """
    kind, password = plan.digests.get(ledger, (None, None))
    held = None
    if kind is None and detected is not None:
        held = detected.get(ledger)
        if held == "MAC" and password is None:
            password = b""  # detection verified it with the empty password
    status, found_type, start, detail = digests.check(stored, kind or held, password)
    if status == digests.FAILED:
        if held:
            detail += " (type detected from this ledger's earlier entries)"
        return Finding(path, offset, ledger, entry, BAD_DIGEST, detail, stored[start:start + 8].hex(), digests.FAILED)
    if kind is None and detected is not None and found_type and held is None:
        detected[ledger] = found_type
    note = "" if kind or not found_type else f"digest {found_type} (detected)"
    if detail:
        note = f"{note}; {detail}" if note else detail
    return _finding(path, offset, ledger, entry, stored[start:], status, note,
                    found_type or "" if status == digests.VERIFIED else "")


# -- BookKeeper entry-log files ------------------------------------------------------------------

ENTRYLOG_HEADER = 1024
_REC = struct.Struct(">iqq")
META_ENTRY_IDS = frozenset((-0x1000, -0x2000, -0x4000, -0x8000))
LEDGERS_MAP = (-1, -2)


def _sniff_entrylog(head: bytes) -> int:
    return 100 if head[:4] == b"BKLO" else 0


def read_entrylog(path: str, plan=NO_PLAN, start: int = ENTRYLOG_HEADER,
                  end: Optional[int] = None) -> Iterator[Finding]:
    """Walk `[int32 size][ledgerId][entryId][LAC][length][digest][payload]` records with mmap.

    Ledgers in ``plan.skip`` are passed over by id without touching their bytes; every other entry is checked
    against its digest (the type from the ledger list, else detected) and classified.
    """
    plan = as_plan(plan)
    try:
        fh = open(path, "rb")
    except OSError as exc:
        yield Finding(path, 0, -1, -1, UNREADABLE, f"cannot open: {exc.strerror or exc}", "")
        return
    with fh:
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
            pos, stop = max(start, ENTRYLOG_HEADER), size if end is None else min(end, size)
            detected: dict[int, str] = {}
            # Bytes per ledger as walked, to hold against the ledgers map a finished file ends with: an entry
            # whose ledger id was damaged moves bytes between ledgers, even into one that is skipped unread.
            walked: dict[int, int] = {}
            mapped: dict[int, int] = {}
            map_at = -1
            whole = start <= ENTRYLOG_HEADER and end is None
            unpack = _REC.unpack_from
            while pos < stop:
                if pos + 20 > size:
                    yield Finding(path, pos, -1, -1, UNREADABLE,
                                  f"torn record header at end of file ({size - pos} bytes)", "")
                    return
                length, ledger, entry = unpack(mm, pos)
                body = pos + 4
                if length < 16:
                    skip_to = _direct_io_skip(mm, pos, length, size)
                    if skip_to is None:
                        yield Finding(path, pos, -1, -1, UNREADABLE, f"bad record size {length}", "")
                        return
                    pos = skip_to
                    continue
                if pos == ENTRYLOG_HEADER and (length, ledger) == DIRECT_HEADER_FILLER[:2] and \
                        not any(mm[pos + 12:DIRECT_ALIGNMENT]):
                    pos = DIRECT_ALIGNMENT  # DirectEntryLogger's header block: a dummy record up to 4096
                    continue
                if body + length > size:
                    # Torn: the header is there, the body is not. The ids are stated, so the damage has a place.
                    known = ledger >= 0 and entry >= 0
                    yield Finding(path, pos, ledger if known else -1, entry if known else -1, UNREADABLE,
                                  f"torn record: size {length}, {size - body} bytes left in the file", "")
                    return
                if (ledger, entry) == LEDGERS_MAP:
                    map_at = pos if map_at < 0 else map_at
                    if not _read_ledgers_map(mm, body, length, mapped):
                        yield Finding(path, pos, -1, -1, UNREADABLE, "ledgers map record of impossible size", "")
                        whole = False
                elif ledger >= 0 and entry in META_ENTRY_IDS:
                    walked[ledger] = walked.get(ledger, 0) + length + 4
                elif ledger < 0 or entry < 0:
                    yield Finding(path, pos, ledger if ledger >= 0 else -1, -1, UNREADABLE,
                                  f"record with impossible ids (ledger {ledger}, entry {entry})", "")
                elif ledger not in plan.skip:
                    walked[ledger] = walked.get(ledger, 0) + length + 4
                    yield _stored_finding(path, pos, ledger, entry, mm[body:body + length], plan, detected)
                else:
                    walked[ledger] = walked.get(ledger, 0) + length + 4
                if ledger in plan.skip and ledger >= 0 and entry >= 0 and plan.verify_skipped:
                    kind, password = plan.digests.get(ledger, (None, None))
                    status, _, _, detail = digests.check(mm[body:body + length], kind, password)
                    if status == digests.FAILED:
                        yield Finding(path, pos, ledger, entry, BAD_DIGEST, detail, "", digests.FAILED)
                pos = body + length
            if whole and map_at >= 0:
                for lid in sorted(set(walked) | set(mapped)):
                    if walked.get(lid, 0) != mapped.get(lid, 0):
                        yield Finding(path, map_at, lid, -1, UNREADABLE,
                                      f"the ledgers map gives ledger {lid} {mapped.get(lid, 0)} bytes, the records "
                                      f"hold {walked.get(lid, 0)} (a damaged ledger id moves an entry)", "")


# DirectEntryLogger (BookKeeper 4.16+): a 4096-byte header block whose bytes from 1024 are a dummy record (size
# 3068, ledger id -1, zeros) for the legacy reader to step over; each flush pads with 0xF0 up to the next 4096
# boundary (a negative size when read); fallocate'd space past the data reads as zeros.
DIRECT_ALIGNMENT = 4096
DIRECT_HEADER_FILLER = (DIRECT_ALIGNMENT - ENTRYLOG_HEADER - 4, -1, 0)
DIRECT_PADDING = 0xF0


def _direct_io_skip(mm, pos: int, length: int, size: int) -> Optional[int]:
    """Where the walk goes on after DirectEntryLogger padding (to the next block) or its zeroed tail (the end);
    None when the bytes are not exactly that, so damage stays damage."""
    if length == 0:
        chunk = 1 << 20
        for at in range(pos, size, chunk):
            if mm[at:min(at + chunk, size)].count(0) != min(at + chunk, size) - at:
                return None
        return size
    if length < 0 and pos % DIRECT_ALIGNMENT:
        boundary = min(size, pos + (-pos % DIRECT_ALIGNMENT))
        if mm[pos:boundary].count(DIRECT_PADDING) == boundary - pos:
            return boundary
    return None


def _read_ledgers_map(mm, body: int, length: int, into: dict[int, int]) -> bool:
    """`[-1][-2][int32 count][(ledgerId, bytes) × count]`; a file may hold several such batches."""
    if length < 20:
        return False
    (count,) = struct.unpack_from(">i", mm, body + 16)
    if count < 0 or 20 + 16 * count > length:
        return False
    for i in range(count):
        lid, nbytes = struct.unpack_from(">qq", mm, body + 20 + 16 * i)
        into[lid] = into.get(lid, 0) + nbytes
    return True


register(DumpFormat("entrylog", "BookKeeper DefaultEntryLogger .log file (digest before the payload)",
                    _sniff_entrylog, read_entrylog, splittable=True))


# -- text dumps ----------------------------------------------------------------------------------

# ≤ 4.17: `--------- Lid=13, Eid=0, EntrySize=63 ---------` (readlog adds ByteOffset) behind any log prefix.
HEADER_417 = re.compile(rb"Lid=([^,\s]*), Eid=([^,\s]*)(?:, ByteOffset=([^,\s]*))?(?:, EntrySize=([^,\s]*))?")
# 4.18 (slog): an `Entry` event; its attributes print only through %X, as `{entryId=0, entrySize=63, ledgerId=13}`.
EVENT_418 = re.compile(rb"\bEntry\s*(\{.*)?$")
HEX_LINE = re.compile(rb"^([0-9A-F]{8}) ((?:[0-9A-F]{2} |   ){16})")
NETTY_ROW = re.compile(rb"\|([0-9a-f]{8})\|((?: [0-9a-f]{2}){1,16})\s*\|")


@dataclass
class _TextEntry:
    offset: int
    ledger: Optional[bytes]
    entry: Optional[bytes]
    byte_offset: Optional[bytes] = None
    size: Optional[bytes] = None
    lines: list = field(default_factory=list)
    open_attrs: bool = False  # a 4.18 `Entry {data=…` event whose attributes close on a later line
    continuation: bool = False  # 4.18 readlog's second `Entry` event (type=DATA, lastAddConfirmed) of one entry


def _attrs(text: bytes) -> dict[bytes, bytes]:
    out = {}
    for part in text.split(b","):
        key, eq, value = part.partition(b"=")
        if eq:
            out[key.strip()] = value.strip().rstrip(b"}").strip()
    return out


def _header(line: bytes, offset: int) -> Optional[_TextEntry]:
    if HEX_LINE.match(line) or NETTY_ROW.search(line):
        return None  # a dump row whose text column happens to spell a header
    if b"---------" in line:
        m = HEADER_417.search(line)
        if m:
            return _TextEntry(offset, m.group(1), m.group(2), m.group(3), m.group(4))
    m = EVENT_418.search(line.rstrip(b"\r\n"))
    if m and (b" INFO " in line or b"- Entry" in line or line.lstrip().startswith(b"Entry")):
        attrs_text = m.group(1) or b""
        if attrs_text.startswith(b"{data="):
            # `readledger -bookie` on 4.18: the data attribute (a multi-line Netty dump) comes first (keys sorted);
            # the ids follow the dump's footer line.
            return _TextEntry(offset, None, None, lines=[attrs_text[len(b"{data="):]], open_attrs=True)
        attrs = _attrs(attrs_text.strip().strip(b"{}"))
        return _TextEntry(offset, attrs.get(b"ledgerId"), attrs.get(b"entryId"),
                          attrs.get(b"position", attrs.get(b"byteOffset")), attrs.get(b"entrySize"),
                          continuation=b"type" in attrs or b"lastAddConfirmed" in attrs)
    return None


FOOTER_ATTRS = re.compile(rb"\+-+\+\s*,\s*([^{}]*)\}")


def _text_entries(path: str) -> Iterator[_TextEntry]:
    """Entries of a text dump: each header with the lines after it, up to the next header."""
    current: Optional[_TextEntry] = None
    offset = 0
    with open(path, "rb") as fh:
        for line in fh:
            if current is not None and current.open_attrs:
                m = FOOTER_ATTRS.search(line)
                current.lines.append(line)
                if m:
                    attrs = _attrs(m.group(1))
                    current.ledger, current.entry = attrs.get(b"ledgerId"), attrs.get(b"entryId")
                    current.open_attrs = False
                offset += len(line)
                continue
            header = _header(line, offset)
            if (header is not None and header.continuation and current is not None and not current.lines
                    and header.entry == current.entry):
                header = None  # the same entry's second event: its data follows
            if header is not None:
                if current is not None:
                    yield current
                current = header
            elif current is not None:
                current.lines.append(line)
            offset += len(line)
    if current is not None:
        yield current


def _hex_payload(lines: list[bytes], netty: bool) -> tuple[bytes, Optional[str], int]:
    """(bytes, problem, rows seen) rebuilt from hex rows; rows must follow each other without gaps."""
    out = bytearray()
    rows = 0
    for line in lines:
        line = line.rstrip(b"\r\n")
        m = NETTY_ROW.search(line) if netty else HEX_LINE.match(line)
        if not m:
            continue
        rows += 1
        if int(m.group(1), 16) != len(out):
            return bytes(out), f"hex dump offset {m.group(1).decode()} where {len(out):08x} was expected", rows
        out += bytes.fromhex(m.group(2).decode().replace(" ", ""))
    return bytes(out), None, rows


def _ids(path: str, item: _TextEntry, plan: ReadPlan) -> tuple[Optional[int], Optional[int], Optional[Finding]]:
    """(ledger, entry, None) or (None, None, an unreadable finding saying why the ids are not known)."""
    if item.ledger is None or item.entry is None:
        return None, None, Finding(path, item.offset, -1, -1, UNREADABLE,
                                   "entry header without ledger/entry ids (BookKeeper 4.18 prints them only with a "
                                   "%X log layout: see docs/scan.md)", "")
    entry = _entry_id(item.entry)
    if entry is None:
        return None, None, Finding(path, item.offset, -1, -1, UNREADABLE,
                                   f"entry id {item.entry[:40].decode('ascii', 'replace')!r} is not a number", "")
    try:
        ledger = parse_ledger_id(item.ledger, plan.ledger_id_format)
    except LedgerIdError as exc:
        return None, None, Finding(path, item.offset, -1, entry, UNREADABLE, str(exc), "")
    return ledger, entry, None


def _size(item: _TextEntry) -> Optional[int]:
    if item.size is None:
        return None
    value = _entry_id(item.size)
    return value if value is not None and value >= 0 else -1


def _make_hex_reader(kind: str) -> Reader:
    """readledger -msg with the hex formatter (payload), readledger -bookie (stored entry), readlog (digest+payload)."""
    netty = kind == "bookie"

    def read(path: str, plan=NO_PLAN) -> Iterator[Finding]:
        plan = as_plan(plan)
        detected: dict[int, str] = {}
        for got in _entries_to_judge(path, plan):
            if isinstance(got, Finding):
                yield got
                continue
            item, ledger, entry = got
            size = _size(item)
            if size == -1 and item.size is not None:  # -1: a size was printed but is not a number
                yield Finding(path, item.offset, ledger, entry, UNREADABLE,
                              f"entry size {item.size[:30].decode('ascii', 'replace')!r} is not a size", "")
                continue
            data, problem, rows = _hex_payload(item.lines, netty)
            if problem:
                yield Finding(path, item.offset, ledger, entry, UNREADABLE, problem, data[:8].hex())
                continue
            if any(b"N/A. Corrupted." in line for line in item.lines):
                yield Finding(path, item.offset, ledger, entry, UNREADABLE, "readlog: N/A. Corrupted.", "")
                continue
            if kind == "payload":
                if not rows and size == 0 or (not rows and any(b"Warn: Index is outside" in line
                                                                for line in item.lines)):
                    yield Finding(path, item.offset, ledger, entry, EMPTY, "empty entry", "")
                    continue
                if not rows:
                    yield Finding(path, item.offset, ledger, entry, UNREADABLE,
                                  "no hex dump after the header (was -msg given?)", "")
                    continue
                if size is not None and len(data) != size:
                    yield Finding(path, item.offset, ledger, entry, UNREADABLE,
                                  f"hex dump holds {len(data)} of EntrySize={size} bytes", data[:8].hex())
                    continue
                yield _finding(path, item.offset, ledger, entry, data)
            elif kind == "bookie":
                if not rows:
                    yield Finding(path, item.offset, ledger, entry, UNREADABLE,
                                  "no hex dump after the header (was -msg given?)", "")
                    continue
                if len(data) >= 16 and struct.unpack_from(">qq", data) != (ledger, entry):
                    # The header prints the ids asked for; the stored entry carries its own (the client's
                    # verifyDigest refuses a mismatch as it refuses a bad digest).
                    said = struct.unpack_from(">qq", data)
                    yield Finding(path, item.offset, ledger, entry, BAD_DIGEST,
                                  f"stored header says ledger {said[0]} entry {said[1]}, not the ledger {ledger} "
                                  f"entry {entry} the dump prints", data[32:40].hex(), digests.FAILED)
                    continue
                yield _stored_finding(path, item.offset, ledger, entry, data, plan, detected)
            else:
                yield _readlog_finding(path, item, ledger, entry, size, data, rows, plan)

    return read


def _entries_to_judge(path: str, plan: ReadPlan) -> Iterator[Union[Finding, tuple[_TextEntry, int, int]]]:
    """A text dump's entries as (entry, ledger id, entry id), leaving out skipped ledgers and readlog's meta entries
    (master key, fence: negative ids). An entry whose ids cannot be read, and a file with no entry header at all,
    come out as Findings instead, so every text reader reports them the same way."""
    found = False
    for item in _text_entries(path):
        found = True
        ledger, entry, bad = _ids(path, item, plan)
        if bad is not None:
            yield bad
            continue
        assert ledger is not None and entry is not None  # _ids gives both ids whenever it gives no finding
        if entry < 0 or ledger in plan.skip:
            continue
        yield item, ledger, entry
    if not found:
        yield Finding(path, 0, -1, -1, UNREADABLE, "no entry headers found", "")


def _readlog_finding(path: str, item: _TextEntry, ledger: int, entry: int, size: Optional[int], data: bytes,
                     rows: int, plan: ReadPlan) -> Finding:
    """readlog prints the stored entry minus its 32-byte header: the digest is still in front of the payload.

    The ledger-length field is not printed, so the digest cannot be recomputed: these entries are unchecked.
    """
    if not rows:
        return Finding(path, item.offset, ledger, entry, UNREADABLE, "no hex dump after the header (was -m given?)",
                       "")
    if size is not None and len(data) != size - digests.HEADER:
        return Finding(path, item.offset, ledger, entry, UNREADABLE,
                       f"hex dump holds {len(data)} bytes where EntrySize={size} means {size - digests.HEADER}",
                       data[:8].hex())
    kind, _ = plan.digests.get(ledger, (None, None))
    if kind is not None:
        d = digests.LENGTHS[kind]
        if len(data) < d:
            return Finding(path, item.offset, ledger, entry, UNREADABLE, f"shorter than its {kind} digest", "")
        return _finding(path, item.offset, ledger, entry, data[d:], digests.UNCHECKED,
                        "readlog: digest not checkable")
    # No metadata names the digest, so its length is unknown: only a batch that decodes behind one of the
    # possible lengths is evidence; anything else cannot be placed.
    for d in (4, 8, 20, 0):
        body = data[d:]
        if body[:2] == b"\x0e\x01":
            detail, decoded_kind = describe_batch(body)
            if decoded_kind:
                return Finding(path, item.offset, ledger, entry, BATCHED,
                               f"{detail}; behind a {d}-byte digest (digest type not in a ledger list)",
                               body[:8].hex(), digests.UNCHECKED, decoded_kind)
    return Finding(path, item.offset, ledger, entry, UNREADABLE,
                   "readlog: digest length unknown without the ledger's metadata (pass listledgers -meta output "
                   "with --ledgers)", data[:8].hex())


def read_string_dump(path: str, plan=NO_PLAN) -> Iterator[Finding]:
    """The default string formatter: only the first bytes survive, so only the magic can be judged."""
    plan = as_plan(plan)
    for got in _entries_to_judge(path, plan):
        if isinstance(got, Finding):
            yield got
            continue
        item, ledger, entry = got
        size = _size(item)
        first = item.lines[0].rstrip(b"\r\n") if item.lines else None
        if size == 0:
            yield Finding(path, item.offset, ledger, entry, EMPTY, "empty entry", "")
        elif first is None:
            yield Finding(path, item.offset, ledger, entry, UNREADABLE, "no payload line (was -msg given?)", "")
        elif first.startswith(b"\x0e\x01"):
            yield Finding(path, item.offset, ledger, entry, BATCHED,
                          "string formatter: batch magic seen; the body is not recoverable", first[:8].hex())
        else:
            yield Finding(path, item.offset, ledger, entry, PLAIN, "string formatter", first[:8].hex())


def _has_header(head: bytes) -> bool:
    return any(_header(line, 0) is not None for line in head.splitlines()[:400])


def _sniff_text(kind: str) -> Callable[[bytes], int]:
    def sniff(head: bytes) -> int:
        if head[:4] == b"BKLO" or not _has_header(head):
            return 0
        readlog = b"ByteOffset=" in head or b"position=" in head
        netty = bool(re.search(rb"\|[0-9a-f]{8}\|", head))
        hexdump = bool(re.search(rb"^[0-9A-F]{8} (?:[0-9A-F]{2} ){1,16}", head, re.M))
        if kind == "readlog":
            return 90 if readlog else 0
        if kind == "readledger-bookie":
            return 85 if netty and not readlog else 0
        if kind == "readledger-hex":
            return 80 if hexdump and not readlog and not netty else 0
        return 40 if not readlog else 0  # readledger-string: headers without a hex dump

    return sniff


register(DumpFormat("readlog", "`bookkeeper shell readlog -m` (hex formatter; the digest is still in the payload)",
                    _sniff_text("readlog"), _make_hex_reader("readlog")))
register(DumpFormat("readledger-bookie", "`readledger -msg -bookie` (Netty hex dump of the raw stored entry)",
                    _sniff_text("readledger-bookie"), _make_hex_reader("bookie")))
register(DumpFormat("readledger-hex", "`readledger -msg` with `-entryformat hex` (4.14–4.18 headers)",
                    _sniff_text("readledger-hex"), _make_hex_reader("payload")))
register(DumpFormat("readledger-string", "`readledger -msg` with the default string formatter (magic check only)",
                    _sniff_text("readledger-string"), read_string_dump))
