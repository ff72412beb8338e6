"""`txnadmin rehearse --brokers N`: the whole downgrade on an engine of several brokers, to its real end.

A workload with batching on, served by N brokers in this process (each on its own 127.0.0.1 port, as `engine run`
serves them); `downgrade start`; `wait --rerecord` while bundles are shed from broker to broker and one broker is
restarted; then `downgrade roll`: each broker restarted on an older release without PIP-160's reader, every
recorded log recovered on it, while the bundles keep moving. Proven four ways: the procedure, the rolling walk's
recovery checks, the engine's own record of every replay that failed on an older broker (none may), and the
dumped ledgers' scan and census.

``too_early`` is the negative control: one broker is downgraded right after `start`, before the wait says safe,
and bundles are moved onto it. A log whose live part still holds a batched entry then fails to recover there, as
on a real 2.10 broker: the rehearsal names each failed log, its entry and the version (exit 1). That is why the
procedure waits.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from .rehearsal import (
    REHEARSAL_SETTINGS, SHED_S, RehearsalResult, in_directory, prepare_directory, prove_bytes, state_lines,
    wait_through_a_restart,
)

OLDER = "2.10.6"  # a release before PIP-160: it cannot read a batched entry


class Served(Protocol):
    """An engine of several brokers served in this process (server.cluster.open_served_cluster)."""

    engine: Any
    cluster: Any
    token: Optional[str]

    @property
    def url(self) -> str: ...

    def lifecycle(self, broker_id: str, action: str, version: Optional[str] = None) -> None: ...

    def stop(self) -> None: ...


def rehearse_cluster(serve: Callable[[Path], Served], brokers: int = 3, directory: Optional[Path] = None,
                     warmup_s: float = 4.0, timeout_s: float = 120.0, scan_engine: str = "auto",
                     on_step: Optional[Callable[[str, dict], None]] = None, shed_s: float = SHED_S,
                     force: bool = False, verbose: bool = False, discard: bool = False, too_early: bool = False,
                     older: str = OLDER) -> RehearsalResult:
    """The rehearsal over ``brokers`` brokers (module docstring); ``serve`` opens and serves the engine directory
    it is given. ``directory``/``force``/``discard``/``verbose`` as for :func:`~.rehearsal.rehearse`."""
    if brokers < 2:
        raise ValueError("a cluster rehearsal needs at least 2 brokers")
    return in_directory(directory, discard, lambda root: _cluster_in(
        root, serve, brokers, warmup_s, timeout_s, scan_engine, on_step, shed_s, force, verbose, too_early, older))


def _cluster_in(root: Path, serve: Callable[[Path], Served], brokers: int, warmup_s: float, timeout_s: float,
                scan_engine: str, on_step, shed_s: float, force: bool, verbose: bool, too_early: bool,
                older: str) -> RehearsalResult:
    from ..admin.cluster import ClusterView
    from ..admin.http import HttpAdmin
    from ..admin.local import running_server
    from ..engine.faults import Shedder
    from ..engine.manage import init_engine
    from ..engine.observe import batched_census
    from ..engine.workload import WorkloadSpec, run_workload
    from .downgrade import start
    from .downgrade.checklist import DEFAULT_STATE, load_state
    from .downgrade.rolling import roll

    prepare_directory(root, force)
    result = RehearsalResult(str(root), False, brokers=brokers)

    def step(name: str, **info) -> None:
        result.steps.append({"step": name, **info})
        if on_step:
            on_step(name, info)

    engine_dir = root / "engine"
    init_engine(engine_dir, dict(REHEARSAL_SETTINGS, engineBrokers=str(brokers),
                                 engineBrokerFailoverDelayMillis="500"))
    served = serve(engine_dir)
    engine, cluster = served.engine, served.cluster
    step("engine created", path=str(engine_dir), batching=True, brokers=", ".join(b.id for b in cluster.brokers))
    # The control's clients leave a few transactions open (to time out in two minutes), as real ones do: their
    # records, written batched before `start`, keep the logs' replay from moving past them. The rehearsal's own
    # clients end every transaction, so its wait is short.
    spec = WorkloadSpec(rate=300, concurrency=8, duration_s=0, topics=3, subscriptions=2, abort_ratio=0.1,
                        timeout_ratio=0.05 if too_early else 0.0, txn_timeout_ms=120_000 if too_early else 20_000,
                        seed=7)
    halt = threading.Event()
    box: dict = {}
    worker = threading.Thread(target=lambda: box.setdefault("stats", run_workload(engine, spec, halt)), daemon=True)
    worker.start()
    shedder: Optional[Shedder] = None
    state_path = root / DEFAULT_STATE
    stopped = False

    def stop_all() -> None:
        nonlocal stopped
        if stopped:
            return
        stopped = True
        if shedder is not None:
            shedder.stop()
            # (named as the one-broker rehearsal names its unloads: here each one moves a bundle to another broker)
            result.moving.update(topicUnloads=shedder.topic_unloads, coordinatorUnloads=shedder.coordinator_unloads,
                                 failures=shedder.failures)
        halt.set()
        worker.join(timeout=30)
        served.stop()
        engine.close()

    try:
        time.sleep(warmup_s)
        before = batched_census(engine.storage)
        step("workload running with batching on", batchedEntries=sum(v["batchedEntries"] for v in before.values()))
        admin = HttpAdmin(served.url, token=served.token, rediscover=lambda: running_server(engine_dir))
        state = start(admin, state_path, f"local:{engine_dir}")
        step("downgrade started", coordinators=len(state["coordinators"]),
             pendingAckStores=len(state["pendingAckStores"]), checklist=str(state_path))
        if too_early:
            _downgrade_too_early(served, older, step, result)
            return result
        shedder = Shedder(engine, shed_s, lambda line: None, mover=cluster.move)
        shedder.shed_once()  # the cluster moves at once, however soon the wait ends
        shedder.start()
        step("bundle shedding", everySeconds=shed_s, moves="a topic's and a coordinator's bundle to another broker")
        victim = cluster.brokers[-1].id
        show_change = state_lines(step)
        report, restarted = wait_through_a_restart(
            admin, state_path, timeout_s, lambda: served.lifecycle(victim, "restart"),
            lambda: step("broker restarting", broker=victim, reason="a broker restart in the middle of the wait"),
            show_change)
        checklist = load_state(state_path) or {}
        step("procedure verdict", safe=report.safe, reopensAccepted=report.reopens_accepted,
             rerecordedInWait=checklist.get("rerecordedInWait", 0))
        result.moving.update(restarts=1 if restarted else 0, reopensAccepted=report.reopens_accepted,
                             rerecordedInWait=checklist.get("rerecordedInWait", 0), startRuns=1)
        result.status = report.to_json()
        result.flags_on = ClusterView(admin, "").flags_on_brokers()  # read from the brokers, not the report
        walked = False
        if report.safe:
            # An operator holds the load manager's shedding while brokers are walked down; the walk's own restarts
            # still move every bundle of each broker (its failover), and the workload keeps writing throughout.
            shedder.stop()
            step("bundle shedding paused for the rolling downgrade", topicMoves=shedder.topic_unloads,
                 coordinatorMoves=shedder.coordinator_unloads)
            walk = roll(admin, state_path, older, lambda broker, version: served.lifecycle(broker, "restart", version),
                        lambda line: step("rolling downgrade", detail=line), timeout_s=timeout_s, interval_s=1.0,
                        recovery_timeout_s=30.0, on_poll=show_change)
            result.rolling = walk.to_json()
            walked = walk.done
        # the engine's own record: every replay an older broker could not finish, whoever asked
        result.recovery_failures = _failures(engine)
        versions = {b.id: b.version for b in cluster.brokers}
        step("older brokers", versions=", ".join(f"{b}={v}" for b, v in versions.items()),
             recoveryFailures=len(result.recovery_failures))
        all_older = set(versions.values()) == {older}
        stop_all()
        result.workload = stats.to_json() if (stats := box.get("stats")) else None
    finally:
        stop_all()
    clean = prove_bytes(root, state_path, scan_engine, verbose, step, result)
    result.safe = report.safe and walked and all_older and not result.recovery_failures and clean
    step("verdict", safe=result.safe)
    return result


def _failures(engine: Any) -> list[dict]:
    return [{"log": f.log_name, "ledgerId": f.ledger_id, "entryId": f.entry_id, "version": f.version}
            for f in list(engine.recovery_failures.values())]


def _downgrade_too_early(served: Served, older: str, step: Callable[..., None], result: RehearsalResult) -> None:
    """The negative control: one broker restarted on ``older`` before the verdict, every bundle moved onto it."""
    from ..names import coordinator_assign_partition

    engine, cluster = served.engine, served.cluster
    victim = cluster.brokers[-1].id
    step("downgrading a broker too early", broker=victim, version=older, reason="before `wait` said safe")
    served.lifecycle(victim, "restart", older)
    # What it owned before the restart goes to the others at the failover; only then is it a broker that owns
    # nothing, onto which bundles can be moved (a move before would find them still "on" it, and skip them)
    broker = cluster.broker(victim)
    deadline = time.monotonic() + 30
    while cluster.bundles_of(broker) and time.monotonic() < deadline:
        time.sleep(0.05)
    names = [coordinator_assign_partition(i) for i in engine.coordinator_ids()] + list(engine.transactional_topics())
    moved = 0
    for name in names:
        if cluster.owner(name).id != victim:
            cluster.move(name, to=victim)
            moved += 1
    result.recovery_failures = _failures(engine)
    step("bundles moved onto it", bundlesMoved=moved, recoveryFailures=len(result.recovery_failures))
    for failure in result.recovery_failures:
        step("did not recover", **failure)
    result.too_early = {"broker": victim, "version": older, "failed": len(result.recovery_failures)}
    result.safe = False
