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
from typing import Any, Callable, Optional, cast

from ..admin.cluster import ClusterView
from ..admin.protocol import TransactionsAdmin

REHEARSAL_SETTINGS = {
    "transactionCoordinatorCount": "4",
    "transactionLogBatchedWriteEnabled": "true",
    "transactionPendingAckBatchedWriteEnabled": "true",
    "managedLedgerMaxEntriesPerLedger": "200",
    "managedLedgerMinLedgerRolloverTimeMinutes": "0",
    "managedLedgerMaxLedgerRolloverTimeMinutes": "0.05",  # idle logs roll after 3 s so the wait stays short
    "transactionPendingAckLogIndexMinLag": "10",
}
SHED_S = 2.0  # a topic and a coordinator unloaded this often while the wait runs (bundle shedding)


class RehearsalDirError(Exception):
    """The directory given cannot hold a new rehearsal; the message says what to give instead."""


def _rehearsal_parts(root: Path) -> tuple[list[Path], list[str]]:
    """What an earlier rehearsal left in ``root`` (its engine, its dump, its checklist files), and anything else."""
    from .downgrade.checklist import DEFAULT_STATE

    ours, others = [], []
    for entry in sorted(root.iterdir()):
        if entry.name in ("engine", "dump") or entry.name.startswith(DEFAULT_STATE):
            ours.append(entry)
        else:
            others.append(entry.name)
    return ours, others


def prepare_directory(root: Path, force: bool = False) -> None:
    """Make ``root`` ready for a new rehearsal: new or empty as it is; with ``force``, an earlier rehearsal's files
    are removed first (only those: a directory holding anything else is refused, force or not)."""
    import shutil

    from ..engine.storage import EngineLockedError, hold_off_writers

    if not root.exists():
        return
    if not root.is_dir():
        raise RehearsalDirError(f"{root}: exists and is not a directory; give a new directory with --dir")
    ours, others = _rehearsal_parts(root)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise RehearsalDirError(f"{root}: holds files no rehearsal wrote ({shown}); give a new directory with --dir "
                                "(--force replaces only an earlier rehearsal)")
    if not ours:
        return
    if not force:
        raise RehearsalDirError(f"{root}: holds an earlier rehearsal; give --force to replace it, or a new directory "
                                "with --dir")
    engine_dir = root / "engine"
    try:
        held = hold_off_writers(engine_dir) if engine_dir.is_dir() else None
    except EngineLockedError as exc:  # a rehearsal (or engine run) still working there: never pull it from under it
        raise RehearsalDirError(f"{exc}; --force replaces only a rehearsal that has ended") from None
    if held is not None:
        import os

        os.close(held)
    for entry in ours:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


@dataclass
class RehearsalResult:
    directory: str
    safe: bool
    steps: list[dict] = field(default_factory=list)
    status: Optional[dict] = None
    scan: Optional[dict] = None
    census_batched_live: int = -1
    workload: Optional[dict] = None
    flags_on: Optional[dict] = None  # broker → batching flags read on at the verdict ({}: off everywhere)
    moving: dict = field(default_factory=dict)  # what the cluster did meanwhile and how the wait rode it out
    kept: bool = True  # False: the directory was removed when the rehearsal ended (discard)
    brokers: int = 1
    rolling: Optional[dict] = None  # the rolling downgrade's walk (an engine of several brokers)
    # every log that did not recover on an older broker (the engine's own record): log, ledger, entry, version
    recovery_failures: Optional[list] = None
    too_early: Optional[dict] = None  # the negative control: the broker downgraded before safe, and what failed

    def to_json(self) -> dict:
        out = {"directory": self.directory, "kept": self.kept, "safe": self.safe, "steps": self.steps,
               "workload": self.workload, "status": self.status, "scan": self.scan,
               "engineCensusLiveBatchedEntries": self.census_batched_live, "flagsOnAtVerdict": self.flags_on,
               "movingCluster": self.moving, "brokers": self.brokers}
        if self.brokers > 1:
            out.update(rollingDowngrade=self.rolling, recoveryFailures=self.recovery_failures,
                       tooEarly=self.too_early)
        return out


class _RestartableBroker:
    """The rehearsal's broker: the engine behind an admin that a restart swaps. A call made while it restarts fails
    as a restarting broker's does (connection refused), so `wait` retries it and its watch sees the gap."""

    def __init__(self, engine):
        from ..admin.local import LocalAdmin

        self._admin = LocalAdmin(engine)
        self.restarting = False

    def swap(self, engine) -> None:
        from ..admin.local import LocalAdmin

        self._admin = LocalAdmin(engine)

    def __getattr__(self, name: str):
        from ..admin.protocol import TargetUnreachableError

        current = self._admin
        attr = getattr(current, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            if self.restarting:
                raise TargetUnreachableError("the rehearsal's broker is restarting (connection refused)")
            return attr(*args, **kwargs)
        return call


def rehearse(directory: Optional[Path] = None, warmup_s: float = 4.0, timeout_s: float = 120.0,
             scan_engine: str = "auto", on_step: Optional[Callable[[str, dict], None]] = None,
             shed_s: float = SHED_S, force: bool = False, verbose: bool = False,
             discard: bool = False) -> RehearsalResult:
    """The whole downgrade under load, on a cluster that moves: a topic and a coordinator unloaded every ``shed_s``
    seconds (bundle shedding), and one engine restart in the middle of the wait. `start` runs once; `wait
    --rerecord` rides out the rest. An earlier rehearsal in ``directory`` is refused (RehearsalDirError) unless
    ``force``. ``verbose`` lets Spark's logging through (see run_scan). ``discard``: work in a new temporary
    directory and remove it when the rehearsal ends, whatever the verdict (a ``directory`` given is always kept)."""
    return in_directory(directory, discard, lambda root: _rehearse_in(root, warmup_s, timeout_s, scan_engine,
                                                                      on_step, shed_s, force, verbose))


def in_directory(directory: Optional[Path], discard: bool,
                 run: Callable[[Path], "RehearsalResult"]) -> "RehearsalResult":
    """``run`` in ``directory``, or in a new temporary one; ``discard`` removes it at the end, whatever happened."""
    import shutil

    if discard and directory is not None:
        raise RehearsalDirError("--discard goes without --dir: a directory you name is kept")
    root: Path = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="txnadmin-rehearsal-"))
    try:
        result = run(root)
    finally:
        if discard:
            shutil.rmtree(root, ignore_errors=True)
    result.kept = not discard
    return result


def _rehearse_in(root: Path, warmup_s: float, timeout_s: float, scan_engine: str,
                 on_step: Optional[Callable[[str, dict], None]], shed_s: float, force: bool,
                 verbose: bool) -> RehearsalResult:
    from ..engine.engine import Engine
    from ..engine.faults import Shedder
    from ..engine.manage import init_engine
    from ..engine.observe import batched_census
    from ..engine.workload import WorkloadSpec, run_workload
    from .downgrade import start
    from .downgrade.checklist import DEFAULT_STATE, load_state

    prepare_directory(root, force)
    result = RehearsalResult(str(root), False)

    def step(name: str, **info) -> None:
        result.steps.append({"step": name, **info})
        if on_step:
            on_step(name, info)

    init_engine(root / "engine", REHEARSAL_SETTINGS)
    step("engine created", path=str(root / "engine"), batching=True)
    spec = WorkloadSpec(rate=300, concurrency=8, duration_s=0, topics=3, subscriptions=2, abort_ratio=0.1,
                        txn_timeout_ms=20_000, seed=7)
    unloads = {"topics": 0, "coordinators": 0, "failures": 0}

    class Running:
        """The engine with its workload and its load shedding; ``stop()`` then ``open()`` is a broker restart."""

        def __init__(self):
            self.engine = Engine(root / "engine")
            self.halt = threading.Event()
            self.stats: dict = {}
            self.worker = threading.Thread(target=lambda: self.stats.setdefault(
                "stats", run_workload(self.engine, spec, self.halt)), daemon=True)
            self.worker.start()
            self.shed: Optional[Shedder] = None

        def start_shedding(self) -> None:
            self.shed = Shedder(self.engine, shed_s, lambda line: None)
            self.shed.shed_once()  # the cluster moves at once, however soon the wait ends
            self.shed.start()

        def stop(self) -> None:
            if self.shed is not None:
                self.shed.stop()
                counts = self.shed.counts()
                unloads["topics"] += counts["topicUnloads"]
                unloads["coordinators"] += counts["coordinatorUnloads"]
                unloads["failures"] += counts["failures"]
                self.shed = None
            self.halt.set()
            self.worker.join(timeout=30)
            self.engine.close()

    running = Running()
    broker: Optional[_RestartableBroker] = None
    try:
        time.sleep(warmup_s)
        before = batched_census(running.engine.storage)
        step("workload running with batching on", batchedEntries=sum(v["batchedEntries"] for v in before.values()))
        broker = _RestartableBroker(running.engine)
        admin = cast(TransactionsAdmin, broker)
        state_path = root / DEFAULT_STATE
        state = start(admin, state_path, f"local:{root / 'engine'}")
        step("downgrade started", coordinators=len(state["coordinators"]),
             pendingAckStores=len(state["pendingAckStores"]), checklist=str(state_path))
        running.start_shedding()
        step("load shedding", everySeconds=shed_s, unloads="a topic and a coordinator each time")
        def restart() -> None:
            nonlocal running
            assert broker is not None
            broker.restarting = True
            running.stop()
            running = Running()
            broker.swap(running.engine)
            broker.restarting = False
            running.start_shedding()

        report, restarted = wait_through_a_restart(
            admin, state_path, timeout_s, restart,
            lambda: step("engine restarting", reason="a broker restart in the middle of the wait"), state_lines(step))
        checklist = load_state(state_path) or {}
        step("procedure verdict", safe=report.safe, reopensAccepted=report.reopens_accepted,
             rerecordedInWait=checklist.get("rerecordedInWait", 0), startRuns=1)
        # read from the broker itself, not taken from the procedure's report
        result.flags_on = ClusterView(admin, "").flags_on_brokers()
        running.stop()
        step("load shedding stopped", topicUnloads=unloads["topics"], coordinatorUnloads=unloads["coordinators"],
             failures=unloads["failures"])
        result.moving = {"topicUnloads": unloads["topics"], "coordinatorUnloads": unloads["coordinators"],
                         "restarts": 1 if restarted else 0, "reopensAccepted": report.reopens_accepted,
                         "rerecordedInWait": checklist.get("rerecordedInWait", 0), "startRuns": 1}
        result.workload = stats.to_json() if (stats := running.stats.get("stats")) else None
    finally:
        if not running.halt.is_set():
            running.stop()
    result.status = report.to_json()
    clean = prove_bytes(root, state_path, scan_engine, verbose, step, result)
    result.safe = report.safe and clean
    step("verdict", safe=result.safe)
    return result


def state_lines(step: Callable[..., None]) -> Callable[[Any], None]:
    """An ``on_poll`` that records a "waiting" step at each change of state, one line each, as `downgrade wait`
    prints them."""
    shown: dict = {"now": None}

    def show(report) -> None:
        now = (len(report.waiting), tuple((kind, len(logs)) for kind, logs in sorted(report.groups().items())))
        if now != shown["now"]:
            step("waiting", waiting=now[0], logs=len(report.logs), byReason=dict(now[1]),
                 reopensAccepted=report.reopens_accepted)
            shown["now"] = now
    return show


def wait_through_a_restart(admin: TransactionsAdmin, state_path: Path, timeout_s: float, restart: Callable[[], None],
                           announce: Callable[[], None], show: Callable[[Any], None]) -> tuple[Any, bool]:
    """`wait --rerecord`, polling every second, with ``restart`` run in a thread at its second poll (``announce``d
    first): (the last report, safe only when the verdict held after the restart landed; whether it did)."""
    from .downgrade import wait

    restarted = threading.Event()
    polls: dict[str, Any] = {"n": 0, "safeAfterRestart": False}

    def restart_then_say() -> None:
        restart()
        restarted.set()

    def on_poll(report) -> None:
        polls["n"] += 1
        polls["safeAfterRestart"] = report.safe and restarted.is_set()
        show(report)
        if polls["n"] == 2:
            announce()
            threading.Thread(target=restart_then_say, daemon=True).start()

    deadline = time.monotonic() + timeout_s
    report = wait(admin, state_path, timeout_s, 1.0, on_poll, rerecord_unproven=True)
    if report.safe and not polls["safeAfterRestart"]:
        # safe came before the restart landed: the verdict must hold on the restarted broker too
        restarted.wait(timeout=max(0.0, deadline - time.monotonic()))
        report = wait(admin, state_path, max(1.0, deadline - time.monotonic()), 1.0, on_poll, rerecord_unproven=True)
    report.safe = report.safe and polls["safeAfterRestart"]
    return report, restarted.is_set()


def prove_bytes(root: Path, state_path: Path, scan_engine: str, verbose: bool, step: Callable[..., None],
                result: RehearsalResult) -> bool:
    """The stopped engine's ledgers dumped as a bookie copy, counted by the engine's census and scanned (the scan
    recorded in the checklist, as `downgrade verify` records it); True when both find no live batched entry."""
    from ..engine.engine import Engine
    from ..engine.observe import batched_census
    from ..scan import run_scan
    from ..scan.job import java_available
    from .downgrade import record_verification

    engine = Engine(root / "engine", maintenance=False)
    try:
        dump = root / "dump"
        engine.storage.export(dump)
        step("ledgers dumped", path=str(dump))
        census = batched_census(engine.storage)
        result.census_batched_live = sum(v["batchedEntries"] for v in census.values())
        step("engine census", liveBatchedEntries=result.census_batched_live)
    finally:
        engine.close()
    engine_name = scan_engine if scan_engine != "auto" else ("spark" if java_available() else "python")
    scan = run_scan([str(dump / "ledgers")], dump / "ledgers.txt", engine=engine_name, verbose=verbose)
    result.scan = {"verdict": scan.verdict, "liveBatchedEntries": scan.live_batched_entries, "engine": scan.engine,
                   "trimmedLedgersStillInLogs": len(scan.dead_ledgers)}
    step("scan", **result.scan)
    record_verification(state_path, {"verdict": scan.verdict, "liveBatchedEntries": scan.live_batched_entries,
                                     "engine": scan.engine})
    return scan.verdict == "clean" and result.census_batched_live == 0

