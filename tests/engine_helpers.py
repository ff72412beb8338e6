"""Shared helpers for engine tests: small engines in temp dirs with a hand-driven clock."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

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


def live_batched_entries(engine: Engine) -> list[tuple[str, int, int]]:
    """An independent check of a "safe" verdict: read the entry-log files byte by byte (BookKeeper's layout: a
    1 KiB header, then records of [int32 size][int64 ledger][int64 entry][int64 LAC][int64 length][crc32c][payload])
    and list every entry beginning 0E 01 in a live transaction-log or pending-ack ledger.

    Only "which ledgers are live, and of which managed ledger" comes from the engine's metadata; no txnadmin
    code reads the entries, so a bug in the engine's read path or the tool's status cannot hide one.
    """
    engine.storage.flush()
    return _batched_in_live_ledgers(engine.storage, engine.directory)


def live_batched_entries_in(directory: Path) -> list[tuple[str, int, int]]:
    """:func:`live_batched_entries` for a stopped engine's directory (storage opened read-only)."""
    from txnadmin.engine.storage import LedgerStorage

    with LedgerStorage.open(directory, read_only=True) as storage:
        return _batched_in_live_ledgers(storage, Path(directory))


def _batched_in_live_ledgers(storage, directory: Path) -> list[tuple[str, int, int]]:
    import struct

    live = {}
    for meta in storage.list_ledgers():
        name = meta.custom_metadata.get("pulsar/managed-ledger", "")
        if "pulsar/cursor" in meta.custom_metadata:
            continue
        if "__transaction_log_" in name or name.endswith("__transaction_pending_ack"):
            live[meta.ledger_id] = name
    found = []
    for path in sorted((directory / "ledgers" / "current").glob("*.log")):
        data = path.read_bytes()
        pos = 1024
        while pos + 4 + 36 <= len(data):
            (size,) = struct.unpack_from(">i", data, pos)
            if size < 36 or pos + 4 + size > len(data):
                break
            ledger, entry = struct.unpack_from(">qq", data, pos + 4)
            if ledger in live and data[pos + 4 + 36: pos + 4 + 38] == b"\x0e\x01":
                found.append((live[ledger], ledger, entry))
            pos += 4 + size
    return found


def directory_fingerprint(directory: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``directory`` (relative path → size, sha256): equal before and after means untouched."""
    import hashlib

    out = {}
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            out[str(path.relative_to(directory))] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def wait_served(directory: Path, timeout_s: float = 120.0) -> None:
    """Until a running `engine run` has announced its loopback server (its server.json). A loaded machine (two test
    workers on two cores) can take tens of seconds to start one, so the deadline is generous and a miss is named."""
    import time

    deadline = time.monotonic() + timeout_s
    while not (directory / "server.json").exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"the engine in {directory} did not announce its server within {timeout_s:.0f} s")
        time.sleep(0.05)


@contextmanager
def served_engine(home: Path, version: str, coordinators: Optional[int] = None) -> Iterator[tuple[Engine, str, Path]]:
    """An engine of broker ``version`` under ``home``/engine with no maintenance thread (nothing aborts timed-out
    transactions behind a test's back), served over HTTP in this process: ``(engine, url, home)``."""
    from txnadmin.server.run import BackgroundServer

    config = EngineConfig()
    config.engineBrokerVersion = version
    if coordinators is not None:
        config.transactionCoordinatorCount = coordinators
    config.save(home / "engine")
    engine = Engine(home / "engine", EngineConfig.load(home / "engine"), maintenance=False)
    server = BackgroundServer(engine).start()
    try:
        yield engine, server.url, home
    finally:
        server.stop()
        engine.close()


@contextmanager
def stuck_open_downgrade(d: Path, state: str) -> Iterator[None]:
    """A batching engine at ``d`` running under `engine run --fault stuck-open` (transactions left OPEN for ever, so
    the coordinator logs they pin wait whatever the machine's speed), with `downgrade start` recorded in ``state``."""
    import subprocess
    import sys

    from typer.testing import CliRunner

    from txnadmin.cli.main import app

    runner = CliRunner()
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "2", "--set", "transactionLogBatchedWriteEnabled=true",
                               "--set", "transactionPendingAckBatchedWriteEnabled=true"]).exit_code == 0
    engine = subprocess.Popen([sys.executable, "-m", "txnadmin.cli.main", "engine", "run", str(d), "--duration", "0",
                               "--rate", "20", "--fault", "stuck-open", "-o", "json"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_served(d)
        started = runner.invoke(app, ["-u", f"local:{d}", "downgrade", "start", "--yes", "--state", state])
        assert started.exit_code == 0, started.output
        yield
    finally:
        engine.terminate()
        engine.wait(timeout=60)
