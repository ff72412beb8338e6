"""The live ledger list: `listledgers -meta` / `ledgermetadata` output, behind any log prefix.

Only metadata tells a transaction ledger from any other (its `pulsar/managed-ledger` name), how many entries a
closed ledger holds (`lastEntryId`) and which digest guards them (`digestType`, `password`). A ledger listed
without its metadata (`listledgers` without `-meta`) cannot be judged; the scan refuses such a list unless the
operator names the transaction ledgers.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..names import is_transaction_ledger
from . import digests

# BookKeeper ≤ 4.17 logs `ledgerID: 13` and, with -meta, `LedgerMetadata{…}` on the next line.
LEDGER_ID = re.compile(r"ledgerID:\s*(\S+)")
# 4.18 (slog, BP-69) logs events whose attributes only a %X layout prints, keys sorted: listledgers one
# `log entry {ledgerId=13, metadata=LedgerMetadata{…}}`, ledgermetadata `ledgerID {ledgerId=13}` then
# `log entry {metadata=LedgerMetadata{…}}`.
EVENT_ID = re.compile(r"\b(?:log entry|ledgerID)\s*\{\s*ledgerId=([^,}\s]*)")
# The same events under the default console layout (no %X): nothing names the ledger.
BARE_EVENT = re.compile(r"\b(?:log entry|ledgerID)\s*$")
METADATA_START = "LedgerMetadata{"


class LedgerListError(ValueError):
    pass


@dataclass(frozen=True)
class LiveLedger:
    ledger_id: int
    managed_ledger: Optional[str]
    cursor: Optional[str]
    state: Optional[str]
    has_metadata: bool = False
    last_entry_id: Optional[int] = None  # stated only for CLOSED ledgers
    digest_type: Optional[str] = None
    password: Optional[bytes] = None  # None when the list hides it (`password=OMITTED`)

    @property
    def transaction_ledger(self) -> bool:
        """TC-log or pending-ack *data* ledgers; cursor ledgers hold PositionInfo, not records."""
        if self.cursor is not None or not self.managed_ledger:
            return False
        return is_transaction_ledger(self.managed_ledger)

    @property
    def closed(self) -> bool:
        return self.state == "CLOSED" and self.last_entry_id is not None


def split_top_level(text: str) -> list[str]:
    """Split `k=v, k=v` at top-level `, ` only (values hold `[…]` and `{…}`)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0 and text[i + 1:i + 2] == " ":
            parts.append(text[start:i])
            start = i + 2
    parts.append(text[start:])
    return [p for p in parts if p]


def parse_metadata(body: str) -> dict[str, str]:
    out = {}
    for part in split_top_level(body):
        key, eq, value = part.partition("=")
        if eq:
            out[key.strip()] = value
    return out


def _decode(value: str) -> Optional[bytes]:
    """A `base64:` value's bytes; None when it is not valid base64 (never a guess)."""
    if not value.startswith("base64:"):
        return value.encode("utf-8", "replace")
    try:
        return base64.b64decode(value[len("base64:"):], validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_custom_metadata(value: str) -> dict[str, Optional[str]]:
    inner = value.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1]
    out: dict[str, Optional[str]] = {}
    for k, v in parse_metadata(inner).items():
        raw = _decode(v)
        out[k] = None if raw is None else raw.decode("utf-8", "replace")
    return out


def _ledger(lid: int, body: str, where: str) -> LiveLedger:
    fields = parse_metadata(body)
    custom = parse_custom_metadata(fields.get("customMetadata", "{}"))
    for key in ("pulsar/managed-ledger", "pulsar/cursor"):
        if key in custom and custom[key] is None:
            raise LedgerListError(f"{where}: ledger {lid}: {key} is not valid base64")
    last = fields.get("lastEntryId")
    last_id = None
    if last is not None:
        if not re.fullmatch(r"-?\d{1,19}", last.strip()):
            raise LedgerListError(f"{where}: ledger {lid}: lastEntryId {last[:30]!r} is not a number")
        last_id = int(last)
    kind = fields.get("digestType")
    if kind is not None and digests.normalise(kind) is None:
        raise LedgerListError(f"{where}: ledger {lid}: unknown digestType {kind[:30]!r}")
    password = None
    pw = fields.get("password")
    if pw is not None and pw.startswith("base64:"):
        password = _decode(pw)
        if password is None:
            raise LedgerListError(f"{where}: ledger {lid}: password is not valid base64")
    return LiveLedger(lid, custom.get("pulsar/managed-ledger"), custom.get("pulsar/cursor"),
                      (fields.get("state") or "").strip() or None, True, last_id, digests.normalise(kind), password)


def read_ledger_list(path: Path, id_format: str = "long") -> dict[int, LiveLedger]:
    """Every ledger the list names (`ledgerID: 13`, or 4.18's `{ledgerId=13…}` attributes), with its
    `LedgerMetadata{…}` when the list has it. Raises LedgerListError only."""
    from .formats import LedgerIdError, parse_ledger_id

    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise LedgerListError(f"{path}: cannot read ledger list ({exc.strerror or exc})") from None
    text = raw.decode("utf-8", "replace")
    ledgers: dict[int, LiveLedger] = {}
    current: Optional[int] = None
    for number, line in enumerate(text.splitlines(), 1):
        head, _, _ = line.partition(METADATA_START)
        m = LEDGER_ID.search(head) or EVENT_ID.search(head)
        if m:
            try:
                current = parse_ledger_id(m.group(1), id_format)
            except LedgerIdError as exc:
                raise LedgerListError(f"{path}:{number}: {exc}") from None
            ledgers.setdefault(current, LiveLedger(current, None, None, None))
        elif BARE_EVENT.search(line):
            # A live ledger the list does not name: judging without it would take its entries for trimmed ones.
            raise LedgerListError(
                f"{path}:{number}: a BookKeeper 4.18 `{line.strip()[-40:]}` line without attributes: the shell's "
                "console layout prints ledger ids and metadata only with %X; take the list again with "
                "BOOKIE_LOG_CONF pointing at a layout that has %X (see docs/scan.md), or with a 4.17 shell")
        body = _metadata_body(line)
        if body is not None and current is not None:
            ledgers[current] = _ledger(current, body, f"{path}:{number}")
    if not ledgers:
        raise LedgerListError(f"{path}: no `ledgerID:` lines (expected `bookkeeper shell listledgers -meta` output)")
    return ledgers


def _metadata_body(line: str) -> Optional[str]:
    """The inside of `LedgerMetadata{…}`, up to its own closing brace (4.18 closes the event's attributes after
    it); None when the line has none or it is cut short."""
    start = line.find(METADATA_START)
    if start < 0:
        return None
    start += len(METADATA_START)
    depth = 0
    for i in range(start, len(line)):
        ch = line[i]
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            if depth == 0:
                return line[start:i] if ch == "}" else None
            depth -= 1
    return None
