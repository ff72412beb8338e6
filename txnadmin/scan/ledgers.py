"""The live ledger list: `listledgers -meta` / `ledgermetadata` output, behind any log prefix."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path

LEDGER_ID = re.compile(r"ledgerID:\s*(\S+)")
METADATA = re.compile(r"LedgerMetadata\{(.*)\}\s*$")
TC_LOG = re.compile(r"^pulsar/system/persistent/__transaction_log_\d+$")
PENDING_ACK_SUFFIX = "__transaction_pending_ack"


class LedgerListError(ValueError):
    pass


@dataclass(frozen=True)
class LiveLedger:
    ledger_id: int
    managed_ledger: str | None
    cursor: str | None
    state: str | None

    @property
    def transaction_ledger(self) -> bool:
        """TC-log or pending-ack *data* ledgers; cursor ledgers hold PositionInfo, not records."""
        if self.cursor is not None or not self.managed_ledger:
            return False
        return bool(TC_LOG.match(self.managed_ledger)) or self.managed_ledger.endswith(PENDING_ACK_SUFFIX)


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
        key, _, value = part.partition("=")
        out[key.strip()] = value
    return out


def _decode(value: str) -> str:
    if value.startswith("base64:"):
        return base64.b64decode(value[len("base64:"):]).decode("utf-8", "replace")
    return value


def parse_custom_metadata(value: str) -> dict[str, str]:
    inner = value.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1]
    return {k: _decode(v) for k, v in parse_metadata(inner).items()}


def read_ledger_list(path: Path) -> dict[int, LiveLedger]:
    from .formats import parse_ledger_id

    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise LedgerListError(f"{path}: cannot read ledger list ({exc.strerror or exc})") from None
    ledgers: dict[int, LiveLedger] = {}
    current: int | None = None
    for line in text.splitlines():
        m = LEDGER_ID.search(line)
        if m:
            current = parse_ledger_id(m.group(1))
            ledgers.setdefault(current, LiveLedger(current, None, None, None))
            continue
        m = METADATA.search(line)
        if m and current is not None:
            fields = parse_metadata(m.group(1))
            custom = parse_custom_metadata(fields.get("customMetadata", "{}"))
            ledgers[current] = LiveLedger(current, custom.get("pulsar/managed-ledger"), custom.get("pulsar/cursor"),
                                          fields.get("state"))
    if not ledgers:
        raise LedgerListError(f"{path}: no `ledgerID:` lines (expected `bookkeeper shell listledgers -meta` output)")
    return ledgers
