"""The downgrade keeps every piece of evidence (issue #32): flows an operator follows that once made it forget a
counted batched flush and say "safe" while a live ledger of a recorded log still held a batched entry.

Each test drives the CLI (subprocesses) over HTTP against an engine served in this process, through a front door
(tests/http_front.py) that plays what a real cluster varies: a flag flip that slips between two reads, a broker
restart, a /metrics without process_start_time_seconds, a /metrics served from a stale copy. Every "safe" is
checked against the engine's entry-log files, byte by byte (engine_helpers.live_batched_entries)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG
from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine
from txnadmin.server.run import BackgroundServer

from engine_helpers import live_batched_entries, small_config
from http_front import Front, front
from downgrade_helpers import BATCHED, traffic

pytestmark = pytest.mark.slow  # each serves an engine through a downgrade: several seconds

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
TOKEN = "evidence-token"
U = "persistent://public/default/u"
U_STORE = f"{U}-s__transaction_pending_ack"
RUNTIME = "/admin/v2/brokers/configuration/runtime"


class Broker:
    """One engine served over HTTP in this process, restartable on the same port (a broker process restart)."""

    def __init__(self, d: Path):
        self.d = d
        self.engine = Engine(d, EngineConfig.load(d), maintenance=False)
        self.server = BackgroundServer(self.engine, token=TOKEN).start()
        self.url = self.server.url

    def flags(self, value: str) -> None:
        admin = LocalAdmin(self.engine)
        for flag in (TC_BATCH_FLAG, PENDING_ACK_BATCH_FLAG):
            admin.update_dynamic_config(flag, value)

    def restart(self, *, batching_on_while_reopening: bool = False, traffic_on: tuple[str, ...] = ()) -> None:
        """Stop and start again on the same port: a new process start time, counters from zero. With
        ``batching_on_while_reopening``, the flags are on while the stores reopen (and ``traffic_on`` writes),
        off again before the broker answers anything."""
        port = self.server.port
        if batching_on_while_reopening:
            self.flags("true")
        self.server.stop()
        self.engine.close()
        self.engine = Engine(self.d, EngineConfig.load(self.d), maintenance=False)
        for topic in traffic_on:
            traffic(self.engine, 6, topic, "s")
        if batching_on_while_reopening:
            self.flags("false")
        self.server = BackgroundServer(self.engine, port=port, token=TOKEN).start()

    def close(self) -> None:
        self.server.stop()
        self.engine.close()


@contextmanager
def _cluster(tmp_path: Path) -> Iterator[tuple[Broker, Front]]:
    """A batching engine with history on t/s and u/s, served, behind a front door (the admin URL the CLI uses)."""
    d = tmp_path / "e"
    small_config(**BATCHED).save(d)
    broker = Broker(d)
    try:
        for topic in ("t", "u"):
            traffic(broker.engine, 20, topic, "s")
        with front(broker.url, TOKEN) as door:
            yield broker, door
    finally:
        broker.close()


def cli(door: Front, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(TXNADMIN + ["-u", door.url, "--auth-params", f"token:{TOKEN}", *args], capture_output=True,
                          text=True, timeout=timeout)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _wait(door: Front, state: Path, timeout: int, *extra: str, quiet: bool = False) -> subprocess.Popen:
    """`downgrade wait` in the background (-o json on a pipe, unless ``quiet``), polling every 0.5 s."""
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen(TXNADMIN + ["-u", door.url, "--auth-params", f"token:{TOKEN}", "downgrade", "wait",
                                        *extra, "--state", str(state), "--timeout", str(timeout), "--interval", "0.5",
                                        *(() if quiet else ("-o", "json"))],
                            stdout=out, stderr=out, text=True)


def _report(done: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {done.returncode}: {done.stdout!r} {done.stderr}") from None


def _checked(broker: Broker, door: Front, state: Path) -> dict:
    """One `downgrade status`, every "safe" proven by the entry-log files."""
    done = cli(door, "downgrade", "status", "--state", str(state), "-o", "json")
    report = _report(done)
    if report["safe"]:
        assert live_batched_entries(broker.engine) == [], "status said safe while batched entries were live"
        assert done.returncode == 0
    else:
        assert done.returncode == 1, done.stderr
    return report


def _until_safe(broker: Broker, door: Front, state: Path, topics=("t", "u"), rounds: int = 25) -> dict:
    report: dict = {}
    for _ in range(rounds):
        report = _checked(broker, door, state)
        if report["safe"]:
            return report
        for topic in topics:
            traffic(broker.engine, 10, topic, "s")
        broker.engine.maintenance_tick()
    return report


def _client_traffic(broker: Broker, topic: str, n: int) -> None:
    """A client's transactions while the tool reloads stores under it: one refused by a reloading coordinator or
    store is retried, as a Pulsar client retries after a reconnect."""
    from txnadmin.engine.buffered_writer import WriterClosedError
    from txnadmin.engine.coordinator import CoordinatorError
    from txnadmin.engine.engine import EngineError
    from txnadmin.engine.topic import TransactionBufferNotReady

    try:
        traffic(broker.engine, n, topic, "s")
    except (CoordinatorError, EngineError, WriterClosedError, TransactionBufferNotReady):
        time.sleep(0.1)
    except RuntimeError as exc:  # the topic's managed ledger closed under the write: the unload's own window
        if "is closed" not in str(exc):
            raise
        time.sleep(0.1)


def _drive(waiter: subprocess.Popen, broker: Broker, topics: tuple[str, ...], rounds: int) -> tuple[str, str]:
    """Client traffic on ``topics`` (their stores trim as their subscriptions acknowledge) until ``waiter``, a
    background `wait`, ends; its (stdout, stderr). At least ``rounds`` rounds, and on while the wait runs (its own
    --timeout bounds it): a transaction a reload broke mid-way stays open until its 60 s timeout, which only a
    maintenance tick ends, and on a loaded machine the rounds alone could run out first."""
    deadline = time.monotonic() + 200
    done = 0
    while done < rounds or time.monotonic() < deadline:
        done += 1
        if waiter.poll() is not None:
            break
        for topic in topics:
            _client_traffic(broker, topic, 5)
        broker.engine.maintenance_tick()
        time.sleep(0.2)
    return waiter.communicate(timeout=150)


def _slip_during_unload_of(door: Front, broker: Broker, topic_path: str) -> None:
    """Batching switched on for exactly the length of one topic's unload, while every read of the runtime
    configuration waits: the flip slips between two reads (the gap `start`'s checks cannot close)."""
    window = threading.Lock()
    armed = {"once": True}

    def before(method: str, path: str) -> None:
        if method == "PUT" and path.startswith(topic_path) and path.endswith("/unload") and armed["once"]:
            armed["once"] = False
            window.acquire()
            broker.flags("true")
        elif method == "GET" and path.startswith(RUNTIME):
            with window:  # a read during the window waits until it has closed
                pass

    def after(method: str, path: str) -> None:
        if method == "PUT" and path.startswith(topic_path) and path.endswith("/unload") and window.locked():
            broker.flags("false")
            window.release()

    door.before_forward.append(before)
    door.after_forward.append(after)


def _unseen_flip(door: Front, broker: Broker, writes: int) -> None:
    """Batching on while u's store reopens (and writes ``writes`` transactions), off again, while every read of
    the runtime configuration waits: a flip that slips between two reads of the flags."""
    window = threading.Lock()

    def wait_for_flip(method: str, path: str) -> None:
        if path.startswith(RUNTIME):
            with window:
                pass

    with window:
        door.before_forward.append(wait_for_flip)
        broker.flags("true")
        broker.engine.reload_topic(U)
        if writes:
            traffic(broker.engine, writes, "u", "s")
        broker.flags("false")


def _waiting(report: dict, kind: str) -> list[dict]:
    return [c for c in report["components"] if c.get("waitingFor") == kind]


# -- 1. `start` run again after the counters caught a flush --------------------------------------------------

def test_start_again_after_counted_flushes_rerecords_instead_of_taking_a_new_baseline(tmp_path):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        _slip_during_unload_of(door, broker, "/admin/v2/persistent/public/default/u/unload")
        first = cli(door, "downgrade", "start", "--yes", "--state", str(state), "--concurrency", "1")
        assert first.returncode == 0, first.stderr
        # u's store reopened inside the window, with a batching writer; its subscription's batch job runs, rolls
        # and trims what was recorded as batched, then goes idle.
        for _ in range(3):
            traffic(broker.engine, 20, "u", "s")
            broker.engine.maintenance_tick()
        assert live_batched_entries(broker.engine), "the slip did not make u's store batch"
        flushing = _checked(broker, door, state)
        assert _waiting(flushing, "batched writer still flushing"), flushing
        # What docs/downgrade.md suggests for reopened logs: `start` again. It must keep the counted flushes.
        again = cli(door, "downgrade", "start", "--yes", "--state", str(state), "-o", "json")
        assert again.returncode == 0, again.stderr
        rerun = _report(again)
        assert rerun["recordedThisRun"] >= 1, rerun
        assert any("flushes on broker" in fact for fact in rerun["countedFlushes"]), rerun  # and says why
        # Idle u, traffic on t only: before, this said safe with u's newest ledger batched.
        report = _until_safe(broker, door, state, topics=("t",), rounds=6)
        if not report["safe"]:
            report = _until_safe(broker, door, state)
        assert report["safe"], report
    assert not live_batched_entries_left(tmp_path)


def live_batched_entries_left(tmp_path: Path) -> list:
    from engine_helpers import live_batched_entries_in

    return live_batched_entries_in(tmp_path / "e")


def test_wait_rerecord_converges_on_a_counted_flush(tmp_path):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        _slip_during_unload_of(door, broker, "/admin/v2/persistent/public/default/u/unload")
        assert cli(door, "downgrade", "start", "--yes", "--state", str(state), "--concurrency", "1").returncode == 0
        traffic(broker.engine, 20, "u", "s")
        waiter = _wait(door, state, 120, "--rerecord", "--yes")
        try:
            out, err = _drive(waiter, broker, ("t", "u"), rounds=200)
        finally:
            if waiter.poll() is None:
                waiter.kill()
        assert "Traceback" not in err, err
        report = json.loads(out)
        assert waiter.returncode == 0 and report["safe"], err
        assert json.loads(state.read_text())["rerecordedInWait"] >= 1
        assert live_batched_entries(broker.engine) == []


# -- 2. `start --no-reload` twice around a restart with batching on -----------------------------------------

def test_no_reload_twice_around_a_batching_restart_is_never_safe_until_reloaded(tmp_path):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        assert cli(door, "downgrade", "start", "--yes", "--no-reload", "--state", str(state)).returncode == 0
        # The operator restarts the broker, but batching is on while its stores reopen: they batch, roll and trim.
        broker.restart(batching_on_while_reopening=True, traffic_on=("t", "u"))
        for _ in range(3):
            for topic in ("t", "u"):
                traffic(broker.engine, 20, topic, "s")
            broker.engine.maintenance_tick()
        assert live_batched_entries(broker.engine)
        second = cli(door, "downgrade", "start", "--yes", "--no-reload", "--state", str(state), "-o", "json")
        assert second.returncode == 0, second.stderr
        # Nothing wrote since: before, this was "safe" with the stores' newest ledgers batched.
        report = _checked(broker, door, state)
        assert not report["safe"]
        assert _waiting(report, "store not reopened"), report
        # The way out the report names: a reload (start without --no-reload), then traffic trims the rest.
        assert cli(door, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        assert _until_safe(broker, door, state)["safe"]


# -- 3. a restart quicker than the watch, with and without process_start_time_seconds ------------------------

def _strip_process_start(door: Front) -> None:
    def rewrite(method: str, path: str, body: bytes) -> bytes:
        if path.startswith("/metrics"):
            return re.sub(rb"(?m)^(# (HELP|TYPE) )?process_start_time_seconds.*\n", b"", body)
        return body

    door.rewrites.append(rewrite)


def _hold_requests(door: Front) -> threading.Event:
    """While the returned event is clear, every request waits (a restart the watch never sees answer)."""
    open_ = threading.Event()
    open_.set()

    def before(method: str, path: str) -> None:
        open_.wait(30)

    door.before_forward.insert(0, before)
    return open_


@pytest.mark.parametrize("process_start,writes", [(True, ("u",)), (False, ("u",)), (False, ())],
                         ids=["with-process-start", "without-process-start", "without-process-start-idle"])
def test_a_quick_restart_with_batching_on_under_wait_is_never_accepted(tmp_path, process_start, writes):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        for _ in range(4):  # a high baseline: the restarted process counts from zero and stays below it
            traffic(broker.engine, 20, "t", "s")
        if not process_start:
            _strip_process_start(door)
        gate = _hold_requests(door)
        assert cli(door, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        waiter = _wait(door, state, 60)
        try:
            time.sleep(3.0)  # a few polls and watch rounds
            gate.clear()
            broker.restart(batching_on_while_reopening=True, traffic_on=writes)
            gate.set()
            out, err = _drive(waiter, broker, ("t",), rounds=100)
        finally:
            gate.set()
            if waiter.poll() is None:
                waiter.kill()
        assert "Traceback" not in err, err
        report = json.loads(out) if out.strip() else {"safe": None}
        assert not report["safe"], "a restart with batching on was accepted"
        assert waiter.returncode == 1, err
        if not process_start:
            assert "process_start_time_seconds" in out + err


# -- 4. /metrics served from a stale copy -------------------------------------------------------------------

def test_a_frozen_metrics_copy_is_no_evidence(tmp_path):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        assert cli(door, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        frozen: dict[str, bytes] = {}

        def rewrite(method: str, path: str, body: bytes) -> bytes:
            if path.startswith("/metrics"):
                return frozen.setdefault("copy", body)  # a caching proxy: the first copy, for ever
            return body

        door.rewrites.append(rewrite)
        waiter = _wait(door, state, 40)
        try:
            time.sleep(3.0)
            # A flip that slips between two flag reads: on, u reopens batching and writes, off.
            _unseen_flip(door, broker, writes=10)
            out, err = _drive(waiter, broker, ("t",), rounds=150)
        finally:
            if waiter.poll() is None:
                waiter.kill()
        assert "Traceback" not in err, err
        report = json.loads(out) if out.strip() else {"safe": None}
        assert not report["safe"], "a reopen was accepted on a frozen copy of /metrics"
        assert "not live" in out + err


# -- 5. one writer: `reset` beside a running `wait` ----------------------------------------------------------

def test_reset_beside_a_running_wait_is_refused_and_names_the_holder(tmp_path):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        assert cli(door, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        waiter = _wait(door, state, 30, quiet=True)
        try:
            lock = Path(str(state) + ".lock")
            for _ in range(200):  # until the wait holds the checklist
                if lock.exists() and lock.read_text().strip() == str(waiter.pid):
                    break
                time.sleep(0.05)
            refused = subprocess.run(TXNADMIN + ["downgrade", "reset", "--state", str(state)], capture_output=True,
                                     text=True)
            assert refused.returncode == 3, refused.stderr
            assert str(waiter.pid) in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
            assert state.exists()
        finally:
            waiter.kill()
            waiter.wait()
        done = subprocess.run(TXNADMIN + ["downgrade", "reset", "--state", str(state)], capture_output=True, text=True)
        assert done.returncode == 0 and not state.exists(), done.stderr


# -- 6. a checklist edited by hand ---------------------------------------------------------------------------

def test_a_checklist_edited_by_hand_is_refused(tmp_path):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        assert cli(door, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        data = json.loads(state.read_text())
        for rec in [*data["coordinators"].values(), *data["pendingAckStores"].values()]:
            rec["lastBatchedLedgerId"] = -1  # "every log done": a well-meant shortcut
        state.write_text(json.dumps(data, indent=2))
        for command in (["status"], ["wait", "--timeout", "5"], ["start", "--yes"]):
            refused = cli(door, "downgrade", *command, "--state", str(state))
            assert refused.returncode == 3, (command, refused.stdout, refused.stderr)
            assert "edited outside txnadmin" in refused.stderr and "reset" in refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1
        assert json.loads(state.read_text()) == data  # refused, and left as it was
        assert subprocess.run(TXNADMIN + ["downgrade", "reset", "--state", str(state)]).returncode == 0


# -- 7. a stale recorded scan ----------------------------------------------------------------------------------

def test_a_batched_scan_is_named_at_once_and_wait_stops_when_it_is_all_that_is_left(tmp_path):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        assert cli(door, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        dump = tmp_path / "dump"
        from txnadmin.engine.manage import dump_engine

        dump_engine(broker.d, dump)
        dirty = cli(door, "downgrade", "verify", "--dumps", str(dump / "ledgers"), "--ledgers",
                    str(dump / "ledgers.txt"), "--state", str(state), "--engine", "python", "-o", "json")
        assert dirty.returncode == 1 and json.loads(dirty.stdout)["verdict"] == "batched", dirty.stderr
        # every log trims its batched ledgers: only the recorded scan is left between the logs and safe
        for _ in range(25):
            report = _checked(broker, door, state)
            if all(c["done"] for c in report["components"] if c["component"] != "verification"):
                break
            for topic in ("t", "u"):
                traffic(broker.engine, 10, topic, "s")
            broker.engine.maintenance_tick()
        scan = _waiting(report, "recorded scan not clean")
        assert scan and "downgrade verify" in scan[0]["suggestion"], report
        started = time.monotonic()
        waited = cli(door, "downgrade", "wait", "--state", str(state), "--timeout", "120", "--interval", "0.5")
        assert waited.returncode == 1 and time.monotonic() - started < 60, waited.stderr
        assert "downgrade verify" in waited.stdout + waited.stderr


# -- 4. the window after the verdict ------------------------------------------------------------------------

def test_guard_before_each_broker_catches_a_batched_write_after_the_verdict(tmp_path):
    state = tmp_path / "s.json"
    with _cluster(tmp_path) as (broker, door):
        assert cli(door, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        early = cli(door, "downgrade", "guard", "--state", str(state))
        assert early.returncode == 1 and "no safe verdict" in early.stderr, early.stderr
        for _ in range(25):  # u's store done first; t keeps the wait below waiting
            if _components(_checked(broker, door, state))[U_STORE]["done"]:
                break
            traffic(broker.engine, 10, "u", "s")
            broker.engine.maintenance_tick()
        waiter = _wait(door, state, 90)
        time.sleep(3.0)
        # The flip nobody sees: batching on for one reopen of u's idle store, off again between two reads of the
        # flags. The watch accepts the reopen (flags off at every read, no flush), as it must.
        _unseen_flip(door, broker, writes=0)
        time.sleep(3.0)
        out, err = _drive(waiter, broker, ("t",), rounds=300)
        report = json.loads(out)
        assert waiter.returncode == 0 and report["safe"] and report["reopensAccepted"] >= 1, err
        (me,) = report["brokersChecked"]
        # Nothing batched is written yet: nothing the cluster reports shows the flip, and the guard says so.
        held = cli(door, "downgrade", "guard", "--broker", me, "--state", str(state))
        assert held.returncode == 0 and "still safe" in held.stdout, held.stdout + held.stderr
        traffic(broker.engine, 5, "u", "s")  # the idle subscription's batch job runs: batched entries
        assert live_batched_entries(broker.engine)
        refused = cli(door, "downgrade", "guard", "--broker", me, "--state", str(state))
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "not safe any more" in refused.stdout and me.split(":")[0] in refused.stdout
        assert "batched writer still flushing" in refused.stdout
        status = cli(door, "downgrade", "status", "--state", str(state))
        assert status.returncode == 1  # the verdict is re-judged every time
        unknown = cli(door, "downgrade", "guard", "--broker", "10.0.0.9:8080", "--state", str(state))
        assert unknown.returncode == 3 and "not among the target's active brokers" in unknown.stderr


def _components(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["components"]}
