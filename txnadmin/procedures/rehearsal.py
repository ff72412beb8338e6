"""`txnadmin rehearse`: the whole PIP-160 downgrade on a fresh embedded engine, under load, proven three ways.

Batching on, a transactional workload running; `downgrade start` while it runs; wait until safe;
dump the engine's ledgers like a bookie copy; scan the dump; compare with the engine's own census.
Safe only when the procedure, the scan and the engine agree.
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

REHEARSAL_SETTINGS = {
    "transactionCoordinatorCount": "4",
    "transactionLogBatchedWriteEnabled": "true",
    "transactionPendingAckBatchedWriteEnabled": "true",
    "managedLedgerMaxEntriesPerLedger": "200",
    "managedLedgerMinLedgerRolloverTimeMinutes": "0",
    "managedLedgerMaxLedgerRolloverTimeMinutes": "0.05",  # idle logs roll after 3 s so the wait stays short
    "transactionPendingAckLogIndexMinLag": "10",
}


@dataclass
class RehearsalResult:
    directory: str
    safe: bool
    steps: list[dict] = field(default_factory=list)
    status: Optional[dict] = None
    scan: Optional[dict] = None
    census_batched_live: int = -1
    workload: Optional[dict] = None

    def to_json(self) -> dict:
        return {"directory": self.directory, "safe": self.safe, "steps": self.steps,
                "workload": self.workload, "status": self.status, "scan": self.scan,
                "engineCensusLiveBatchedEntries": self.census_batched_live}


def rehearse(directory: Optional[Path] = None, warmup_s: float = 4.0, timeout_s: float = 120.0,
             scan_engine: str = "auto", on_step: Optional[Callable[[str, dict], None]] = None) -> RehearsalResult:
    from ..admin.local import LocalAdmin
    from ..engine.engine import Engine
    from ..engine.manage import init_engine
    from ..engine.observe import batched_census
    from ..engine.workload import WorkloadSpec, run_workload
    from ..scan import run_scan
    from ..scan.job import java_available
    from .downgrade import record_verification, start, status
    from .state import DEFAULT_STATE

    directory = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="txnadmin-rehearsal-"))
    result = RehearsalResult(str(directory), False)

    def step(name: str, **info) -> None:
        result.steps.append({"step": name, **info})
        if on_step:
            on_step(name, info)

    init_engine(directory / "engine", REHEARSAL_SETTINGS)
    step("engine created", path=str(directory / "engine"), batching=True)
    engine = Engine(directory / "engine")
    stop = threading.Event()
    spec = WorkloadSpec(rate=300, concurrency=8, duration_s=0, topics=3, subscriptions=2, abort_ratio=0.1,
                        txn_timeout_ms=20_000, seed=7)
    holder: dict = {}
    worker = threading.Thread(target=lambda: holder.setdefault("stats", run_workload(engine, spec, stop)), daemon=True)
    try:
        worker.start()
        time.sleep(warmup_s)
        before = batched_census(engine.storage)
        step("workload running with batching on", batchedEntries=sum(v["batchedEntries"] for v in before.values()))
        admin = LocalAdmin(engine)
        state_path = directory / DEFAULT_STATE
        state = start(admin, state_path, f"local:{directory / 'engine'}")
        step("downgrade started", coordinators=len(state["coordinators"]),
             pendingAckStores=len(state["pendingAckStores"]), checklist=str(state_path))
        deadline = time.monotonic() + timeout_s
        report = status(admin, state_path)
        shown = None
        while not report.safe and time.monotonic() < deadline:
            now = (len(report.waiting), tuple((kind, len(logs)) for kind, logs in sorted(report.groups().items())))
            if now != shown:  # one line per change of state, as `downgrade wait` does
                step("waiting", waiting=now[0], logs=len(report.logs), byReason=dict(now[1]))
                shown = now
            time.sleep(1.0)
            report = status(admin, state_path)
        step("procedure verdict", safe=report.safe)
        stop.set()
        worker.join(timeout=30)
        result.workload = stats.to_json() if (stats := holder.get("stats")) else None
        dump = directory / "dump"
        engine.storage.export(dump)
        step("ledgers dumped", path=str(dump))
        census = batched_census(engine.storage)
        result.census_batched_live = sum(v["batchedEntries"] for v in census.values())
        step("engine census", liveBatchedEntries=result.census_batched_live)
    finally:
        stop.set()
        worker.join(timeout=30)
        engine.close()
    engine_name = scan_engine if scan_engine != "auto" else ("spark" if java_available() else "python")
    scan = run_scan([str(dump / "ledgers")], dump / "ledgers.txt", engine=engine_name)
    result.scan = {"verdict": scan.verdict, "liveBatchedEntries": scan.live_batched_entries, "engine": scan.engine,
                   "trimmedLedgersStillInLogs": len(scan.dead_ledgers)}
    step("scan", **result.scan)
    record_verification(state_path, {"verdict": scan.verdict, "liveBatchedEntries": scan.live_batched_entries,
                                     "engine": scan.engine})
    result.status = report.to_json()
    result.safe = report.safe and scan.verdict == "clean" and result.census_batched_live == 0
    step("verdict", safe=result.safe)
    return result
