"""Ledger metadata as BookKeeper shows it (`bookkeeper shell ledgermetadata` / `listledgers -meta`)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

# The embedded engine plays a single bookie; this is the address it reports in ensembles.
BOOKIE_ADDRESS = "127.0.0.1:3181"


@dataclass(frozen=True)
class LedgerMetadata:
    ledger_id: int
    state: str  # "OPEN" | "CLOSED"
    last_entry_id: int  # -1 when the ledger has no entries
    length: int  # total bytes of payloads
    custom_metadata: dict[str, str] = field(default_factory=dict)
    created_at_ms: int = 0

    @property
    def entries(self) -> int:
        return self.last_entry_id + 1

    def to_bookkeeper_string(self, *, password: str = "base64:") -> str:
        """The `LedgerMetadata{…}` line of `bookkeeper shell listledgers -meta` for this ledger.

        ``password="OMITTED"`` gives the `toSafeString` form Pulsar shows in internal stats.
        """
        parts = [
            "formatVersion=3",
            "ensembleSize=1",
            "writeQuorumSize=1",
            "ackQuorumSize=1",
            f"state={self.state}",
        ]
        # BookKeeper prints length and lastEntryId only once the ledger is closed.
        if self.state == "CLOSED":
            parts.append(f"length={self.length}")
            parts.append(f"lastEntryId={self.last_entry_id}")
        parts.append("digestType=CRC32C")
        parts.append(f"password={password}")
        parts.append(f"ensembles={{0=[{BOOKIE_ADDRESS}]}}")
        custom = ", ".join(
            f"{key}=base64:{base64.b64encode(value.encode()).decode()}" for key, value in self.custom_metadata.items()
        )
        parts.append(f"customMetadata={{{custom}}}")
        return "LedgerMetadata{" + ", ".join(parts) + "}"
