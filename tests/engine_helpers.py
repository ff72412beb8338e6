"""Shared helpers for engine tests: small engines in temp dirs with a hand-driven clock."""

from __future__ import annotations

from pathlib import Path

from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine


class Clock:
    def __init__(self, start_ms: int = 1_700_000_000_000):
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def small_config(**overrides) -> EngineConfig:
    config = EngineConfig()
    config.transactionCoordinatorCount = 2
    config.managedLedgerMaxEntriesPerLedger = 5
    config.managedLedgerMinLedgerRolloverTimeMinutes = 0
    config.transactionPendingAckLogIndexMinLag = 1
    config.engineEntryLogSizeLimitBytes = 1 << 20
    for key, value in overrides.items():
        config.set(key, value)
    return config


def open_engine(directory: Path, clock: Clock | None = None, **overrides) -> Engine:
    config = small_config(**overrides)
    config.save(directory)
    return Engine(directory, EngineConfig.load(directory), clock_ms=clock or Clock(), maintenance=False)
