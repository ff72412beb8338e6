"""Positions in a managed ledger: (ledger id, entry id), printed as Pulsar prints them, ``L:E``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Position:
    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> "Position":
        ledger, sep, entry = str(text).strip().partition(":")
        if not sep:
            raise ValueError(f"position {text!r}: expected LEDGER:ENTRY")
        return cls(int(ledger), int(entry))
