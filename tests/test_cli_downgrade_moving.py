"""`downgrade wait` on a cluster that moves (issue #24), through the CLI against a running engine (`engine run`,
reached with `-u local:PATH`): topics and coordinators unloaded every few seconds through the REST API (what
bundle shedding and coordinator failover do), an engine killed and restarted mid-wait, batching switched on behind
the tool's back. Every "safe" is checked against the entry-log files once the engine has stopped."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, AdminError

from engine_helpers import live_batched_entries_in, wait_served
from serve_helpers import serving
from downgrade_helpers import engine_traffic, fresh_engine, loaded_engine


def _batching_engine(tmp_path):
    """Batching on, with a batched history to wait out (the workload below rolls and trims it)."""
    d = fresh_engine(tmp_path)
    engine_traffic(d)
    return d

pytestmark = pytest.mark.slow

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
TC_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign-partition-{}"
FAST = {"TXNADMIN_HEARTBEAT_S": "1"}  # the watch keeps its real 2 s period


def _env() -> dict:
    return dict(os.environ, **FAST)


def local(d, *args, timeout=240):
    return subprocess.run(TXNADMIN + ["-u", f"local:{d}", *args], capture_output=True, text=True, timeout=timeout,
                          env=_env())


def _start_engine(d: Path, *extra: str) -> subprocess.Popen:
    """`engine run` as a live broker: a transactional workload, served at the address in its server.json."""
    (d / "server.json").unlink(missing_ok=True)
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "150", "--concurrency",
                                        "4", "--abort-ratio", "0", "-o", "json", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_served(d)
    time.sleep(1.0)
    return proc


# Three transactions left open (their timeouts lost): the wait is pinned until the test aborts them, so it lasts
# long enough for the cluster to move under it.
PINNED = ("--fault", "stuck-open", "--txn-timeout-ms", "600000")


@contextlib.contextmanager
def _engine_running(d: Path, *extra: str):
    box = {"proc": _start_engine(d, *extra)}
    try:
        yield box
    finally:
        proc = box["proc"]
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)


def _admin(d: Path) -> HttpAdmin:
    info = json.loads((d / "server.json").read_text())
    return HttpAdmin(info["url"], token=info["token"])


class Shedder:
    """Unloads a rotating topic and a coordinator every 3–5 s (``period``) through the REST API, as load shedding
    and failovers do; follows a restarted engine to its new address."""

    def __init__(self, d: Path, period=(3.0, 5.0)):
        self.d, self.period = d, period
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.unloads = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        rng = random.Random(7)
        i = 0
        while not self.stop.wait(rng.uniform(*self.period)):
            if self.paused.is_set():
                continue
            i += 1
            try:
                admin = _admin(self.d)
                try:
                    admin.unload_topic(f"persistent://public/default/txn-topic-{i % 2}")
                    admin.unload_topic(TC_ASSIGN.format(i % 2))
                    self.unloads += 1
                finally:
                    admin.close()
            except (AdminError, OSError, ValueError):
                pass  # the engine is restarting: the next period tries again

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)


def _abort_pinning(d: Path, older_than_ms: int | None = None) -> int:
    """What an operator does about the open transactions the wait names: abort them (REST); retried while a
    restarted engine comes up. ``older_than_ms``: every transaction open that long (after a kill -9 the workload's
    own transactions in flight stay open until their timeout), not only the stuck-open fault's."""
    from txnadmin.admin.protocol import is_transient

    for _ in range(40):
        try:
            return _abort_pinning_once(d, older_than_ms)
        except (AdminError, OSError, ValueError) as exc:
            if isinstance(exc, AdminError) and not is_transient(exc):
                raise
            time.sleep(0.5)
    return _abort_pinning_once(d)


def _abort_pinning_once(d: Path, older_than_ms: int | None = None) -> int:
    from txnadmin.admin.protocol import TxnId

    admin = _admin(d)
    try:
        pinned = [t for t, m in admin.slow_transactions(older_than_ms or 0).items() if m.get("status") == "OPEN"
                  and (older_than_ms is not None or m.get("owner") == "fault:stuck-open")]
        for txn in pinned:
            try:
                admin.abort_transaction(TxnId.parse(txn))
            except AdminError as exc:  # it ended by itself between the listing and the abort
                if older_than_ms is None or exc.status not in (404, 409, 500):
                    raise
        return len(pinned)
    finally:
        admin.close()


def _wait_in_background(d, state, *extra) -> subprocess.Popen:
    return subprocess.Popen(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state, "--interval",
                                        "0.5", "-o", "json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _first_line(proc: subprocess.Popen, lines: list[str]) -> None:
    """Read the wait's stderr in the background; return once its first poll has been shown."""
    def pump():
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    _READERS[proc.pid] = reader
    for _ in range(600):
        if any("logs done" in line for line in lines) or proc.poll() is not None:
            return
        time.sleep(0.05)


_READERS: dict[int, threading.Thread] = {}


def _finish(proc: subprocess.Popen, lines: list[str], timeout=400) -> dict:
    # communicate() reads stderr too, racing the pump for the last lines: keep what each of them got
    out, rest = proc.communicate(timeout=timeout)
    reader = _READERS.pop(proc.pid, None)
    if reader is not None:
        reader.join(timeout=30)  # every stderr line, up to the last one the wait printed
    err = "".join(lines) + (rest or "")
    assert "Traceback" not in err, err
    if not out.strip() and proc.returncode in (1, 3) and err.strip().splitlines()[-1].startswith("error: "):
        return {"safe": None, "_stderr": err, "_code": proc.returncode}  # stopped with a one-line error, no report
    try:
        return dict(json.loads(out), _stderr=err, _code=proc.returncode)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {proc.returncode}; stdout {out!r}; stderr {err}") from None


def _accepted(report: dict) -> list[dict]:
    return [r for c in report["components"] for r in c.get("acceptedReopens") or []]


def test_moves_without_a_restart_are_accepted_with_evidence(tmp_path):
    d = _batching_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _engine_running(d, *PINNED):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        lines: list[str] = []
        waiter = _wait_in_background(d, state, "--timeout", "240")
        _first_line(waiter, lines)
        with Shedder(d) as shed:
            time.sleep(8)
            assert _abort_pinning(d) == 3
            report = _finish(waiter, lines)
    assert report["_code"] == 0 and report["safe"] is True, report["_stderr"][-3000:]
    assert shed.unloads >= 1
    accepted = _accepted(report)
    assert accepted and report["reopensAccepted"] >= len(accepted)
    assert all("with batching off: flags off on 1/1 brokers at every read" in r["evidence"] for r in accepted)
    assert all("no batched flush on any of 1 broker(s)" in r["evidence"] for r in accepted)
    assert live_batched_entries_in(d) == []
    assert json.loads(Path(state).read_text()).get("rerecordedInWait", 0) == 0  # nothing re-recorded


def test_moves_and_a_kill_9_restart_converge_with_rerecord(tmp_path):
    d = _batching_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _engine_running(d, *PINNED) as box:
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        lines: list[str] = []
        waiter = _wait_in_background(d, state, "--timeout", "300", "--rerecord", "--yes")
        _first_line(waiter, lines)
        with Shedder(d) as shed:
            time.sleep(5)
            box["proc"].send_signal(signal.SIGKILL)  # a broker restart: kill -9, then the same engine again
            box["proc"].wait(timeout=30)
            time.sleep(1)
            box["proc"] = _start_engine(d, "--txn-timeout-ms", "600000")
            time.sleep(5)  # moves after the restart too
            # the stuck transactions, recovered open, and the workload's own caught open by the kill -9
            _abort_pinning(d, older_than_ms=5000)
            report = _finish(waiter, lines)
    assert shed.unloads >= 2
    assert report["_code"] == 0 and report["safe"] is True, report["_stderr"][-3000:]
    checklist = json.loads(Path(state).read_text())
    assert checklist["rerecordedInWait"] >= 1  # the restart's reopens: a gap in the watch, so re-recorded
    assert "re-recorded" in report["_stderr"]
    assert _accepted(report)  # the moves before and after the restart
    assert live_batched_entries_in(d) == []


def test_batching_on_and_off_between_two_polls_names_the_moved_counter_then_rerecord_converges(tmp_path):
    d = _batching_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _engine_running(d):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        admin = _admin(d)
        admin.update_dynamic_config(PENDING_ACK_BATCH_FLAG, "true")
        admin.update_dynamic_config(TC_BATCH_FLAG, "true")
        for i in range(2):
            admin.unload_topic(f"persistent://public/default/txn-topic-{i}")  # reopen batching
        admin.unload_topic(TC_ASSIGN.format(0))
        time.sleep(2)  # the workload writes batched entries
        admin.update_dynamic_config(PENDING_ACK_BATCH_FLAG, "false")
        admin.update_dynamic_config(TC_BATCH_FLAG, "false")
        admin.close()
        with Shedder(d):
            lines: list[str] = []
            stopped = _wait_in_background(d, state, "--timeout", "120")
            _first_line(stopped, lines)
            report = _finish(stopped, lines)
            assert report["_code"] == 1 and report["safe"] is False
            assert "--rerecord" in report["stopped"] and "--rerecord" in report["_stderr"]
            flushing = [c for c in report["components"] if c["waitingFor"] == "batched writer still flushing"]
            assert flushing and "bufferedwriter_flush_trigger" in flushing[0]["reason"]
            lines = []
            waiter = _wait_in_background(d, state, "--timeout", "300", "--rerecord", "--yes")
            _first_line(waiter, lines)
            report = _finish(waiter, lines)
    assert report["_code"] == 0 and report["safe"] is True, report["_stderr"][-3000:]
    assert live_batched_entries_in(d) == []


def test_status_beside_a_running_wait_reads_without_writing_and_a_second_writer_is_refused(tmp_path):
    d = loaded_engine(tmp_path)  # no traffic: its stores never trim, so the wait goes on until --timeout
    state = tmp_path / "s.json"
    with serving(d, tmp_path / "home"):
        assert local(d, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        before = state.read_bytes()
        polled = local(d, "downgrade", "status", "--state", str(state), "-o", "json")
        assert polled.returncode in (0, 1) and state.read_bytes() == before  # status never saves
        lines: list[str] = []
        waiter = _wait_in_background(d, str(state), "--timeout", "20", "--interval", "5")
        _first_line(waiter, lines)
        second = local(d, "downgrade", "wait", "--state", str(state), "--timeout", "5")
        assert second.returncode == 3 and "being written by another txnadmin" in second.stderr
        assert f"process {waiter.pid}" in second.stderr
        again = local(d, "downgrade", "start", "--yes", "--state", str(state))
        assert again.returncode == 3 and "being written by another txnadmin" in again.stderr
        waiter.send_signal(signal.SIGINT)
        waiter.communicate(timeout=60)


def test_a_quiet_wait_on_a_pipe_prints_a_heartbeat_line(tmp_path):
    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serving(d, tmp_path / "home"):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        # A long interval: nothing changes between polls, yet a line comes every heartbeat period (1 s here).
        lines: list[str] = []
        # A loaded machine may wake the heartbeat late, so the count asked for is well below one per second.
        waiter = _wait_in_background(d, state, "--timeout", "10", "--interval", "9")
        _first_line(waiter, lines)
        _finish(waiter, lines, timeout=120)
    beats = [line for line in lines if "(no change)" in line]
    assert len(beats) >= 2, lines
    for line in beats:
        assert line.startswith("[0:00:") and "logs done" in line and "reopen(s) accepted" in line


# -- through serve's HTTP API with a token, and the traps that must never end in "safe" ---------------------------

def _http(d: Path) -> tuple[str, str]:
    info = json.loads((d / "server.json").read_text())
    return info["url"], info["token"]


def _http_wait(url, token, state, *extra) -> subprocess.Popen:
    return subprocess.Popen(TXNADMIN + ["-u", url, "--auth-params", f"token:{token}", "downgrade", "wait", "--state",
                                        state, "--interval", "0.5", "-o", "json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def test_moves_are_accepted_through_the_http_api_with_a_token(tmp_path):
    d = _batching_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _engine_running(d, *PINNED):
        url, token = _http(d)
        started = subprocess.run(TXNADMIN + ["-u", url, "--auth-params", f"token:{token}", "downgrade", "start",
                                             "--yes", "--state", state], capture_output=True, text=True, env=_env())
        assert started.returncode == 0, started.stderr
        lines: list[str] = []
        waiter = _http_wait(url, token, state, "--timeout", "240")
        _first_line(waiter, lines)
        with Shedder(d):
            time.sleep(8)
            assert _abort_pinning(d) == 3
            report = _finish(waiter, lines)
    assert report["_code"] == 0 and report["safe"] is True, report["_stderr"][-3000:]
    assert _accepted(report)
    assert live_batched_entries_in(d) == []


def _front_metrics(door, backend_url: str, token: str, edit):
    """Door answers GET /metrics with ``edit(real exposition)``."""
    import httpx

    def intercept(method, path):
        if method == "GET" and path.split("?")[0].rstrip("/") == "/metrics":
            real = httpx.get(backend_url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text
            return 200, edit(real)
        return None

    door.intercepts.append(intercept)


def test_a_broker_whose_metrics_cannot_be_read_fails_the_proof_at_timeout(tmp_path):
    from http_front import front

    d = _batching_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _engine_running(d, *PINNED):
        url, token = _http(d)
        with front(url, token) as door:
            assert subprocess.run(TXNADMIN + ["-u", door.url, "downgrade", "start", "--yes", "--state", state],
                                  capture_output=True, text=True, env=_env()).returncode == 0
            door.intercepts.append(lambda m, p: (500, '{"reason": "metrics broken"}')
                                   if p.split("?")[0].rstrip("/") == "/metrics" else None)
            lines: list[str] = []
            waiter = subprocess.Popen(TXNADMIN + ["-u", door.url, "downgrade", "wait", "--state", state, "--interval",
                                                  "0.5", "--timeout", "25", "-o", "json"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
            _first_line(waiter, lines)
            with Shedder(d):
                time.sleep(8)
                assert _abort_pinning(d) == 3  # nothing else left to wait for: only the proof
                report = _finish(waiter, lines)
    assert report["_code"] == 1 and report["safe"] is False
    proofs = [c.get("proof", "") for c in report["components"] if not c["done"]]
    assert any("metrics" in p and "no flush counters" in p for p in proofs), proofs
    assert not _accepted(report)


def test_flags_on_for_5s_and_a_reopen_with_writes_after_the_next_poll_is_never_safe(tmp_path):
    d = _batching_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _engine_running(d, *PINNED):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        lines: list[str] = []
        waiter = _wait_in_background(d, state, "--timeout", "60", "--interval", "10")
        _first_line(waiter, lines)
        admin = _admin(d)
        admin.update_dynamic_config(PENDING_ACK_BATCH_FLAG, "true")
        admin.unload_topic("persistent://public/default/txn-topic-0")  # reopens with batching on
        time.sleep(5)
        admin.update_dynamic_config(PENDING_ACK_BATCH_FLAG, "false")
        admin.close()
        assert _abort_pinning(d) == 3  # the next poll comes after this: only the trap is left
        report = _finish(waiter, lines)
    assert report["safe"] is not True and report["_code"] == 1


def test_a_reopen_with_batching_then_kill_9_and_a_restart_with_flags_off_is_never_safe(tmp_path):
    d = _batching_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _engine_running(d, *PINNED) as box:
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        lines: list[str] = []
        waiter = _wait_in_background(d, state, "--timeout", "90", "--interval", "10")
        _first_line(waiter, lines)
        admin = _admin(d)
        admin.update_dynamic_config(PENDING_ACK_BATCH_FLAG, "true")
        admin.unload_topic("persistent://public/default/txn-topic-1")
        time.sleep(0.3)  # batched writes
        admin.update_dynamic_config(PENDING_ACK_BATCH_FLAG, "false")
        admin.close()
        box["proc"].send_signal(signal.SIGKILL)
        box["proc"].wait(timeout=30)
        box["proc"] = _start_engine(d, "--txn-timeout-ms", "600000")
        _abort_pinning(d)  # all before the next poll
        report = _finish(waiter, lines)
    assert report["safe"] is False and report["_code"] == 1
    assert report["waitingByReason"].get("reopened since recording")


def _two_brokers(door_a, door_b):
    from http_front import brokers_are

    door_a.intercepts.append(brokers_are(door_a, door_a.netloc, door_b.netloc))


@pytest.mark.parametrize("trap", ["counters move", "metrics cached"])
def test_a_second_broker_whose_counters_move_or_are_cached_is_never_safe(tmp_path, trap):
    from http_front import front

    d = _batching_engine(tmp_path)
    state = str(tmp_path / "s.json")
    flushes = {"n": 0}

    def moving(real: str) -> str:
        if trap == "counters move":
            flushes["n"] += 1  # the second broker's own writer flushes between every two reads
        return real + (f'pulsar_txn_pending_ack_store_bufferedwriter_flush_trigger_max_delay_total'
                       f'{{broker="127.0.0.1"}} {flushes["n"]}.0\n')

    with _engine_running(d, *PINNED):
        url, token = _http(d)
        with front(url, token) as door_a, front(url, token) as door_b:
            _two_brokers(door_a, door_b)
            if trap == "metrics cached":
                frozen: dict = {}
                _front_metrics(door_b, url, token, lambda real: frozen.setdefault("text", moving(real)))
                door_b.intercepts.insert(0, lambda m, p: (200, json.dumps(dict(
                    _admin(d).runtime_config(), metricsBufferResponse="true")))
                    if p.startswith("/admin/v2/brokers/configuration/runtime") else None)
            else:
                _front_metrics(door_b, url, token, moving)
            assert subprocess.run(TXNADMIN + ["-u", door_a.url, "downgrade", "start", "--yes", "--state", state],
                                  capture_output=True, text=True, env=_env()).returncode == 0
            lines: list[str] = []
            waiter = subprocess.Popen(TXNADMIN + ["-u", door_a.url, "downgrade", "wait", "--state", state,
                                                  "--interval", "0.5", "--timeout", "25", "-o", "json"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
            _first_line(waiter, lines)
            with Shedder(d):
                time.sleep(6)
                _abort_pinning(d)
                report = _finish(waiter, lines)
    assert report["safe"] is False and report["_code"] == 1, report["_stderr"][-2000:]
    if trap == "counters move":
        assert report["waitingByReason"].get("batched writer still flushing")
        assert "--rerecord" in (report["stopped"] or "")
