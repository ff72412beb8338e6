"""A coordinator failing over under `downgrade`, as a real Pulsar broker answers it: from the moment its
transaction_coordinator_assign bundle moves until the new owner has replayed its log, the coordinator's stats and
internal stats answer 404 "Transaction coordinator not found! coordinator id : N" (the store enters the admin
handlers' map only after its replay). Driven through the CLI (subprocesses) against a served engine whose
coordinator recovery is stalled on purpose (Engine.stall_coordinator_recovery), or through a front door answering
404 itself."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from txnadmin.admin.http import HttpAdmin
from txnadmin.names import transaction_log_local_name

from engine_helpers import live_batched_entries, wait_served
from http_front import front
from downgrade_helpers import (
    TOKEN, TXNADMIN, assert_one_line_naming, cli, components_of, loaded_engine, served_engine, traffic,
)

TC0 = transaction_log_local_name(0)
NOT_LOADED = "coordinator not loaded"
TC_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign-partition-{}"


def _status(url: str, state: Path) -> subprocess.CompletedProcess:
    return cli(url, "downgrade", "status", "--state", str(state), "-o", "json")


def _drive_until_safe(engine, url: str, state: Path, rounds: int = 60) -> None:
    """Transactional traffic on both topics until a plain `status` says safe (every log trimmed past LastBatched)."""
    for _ in range(rounds):
        if _status(url, state).returncode == 0:
            return
        for topic in ("t", "u"):
            traffic(engine, 10, topic, "s")
        engine.maintenance_tick()
    raise AssertionError("never safe")


@pytest.mark.slow
def test_status_during_a_coordinator_failover_is_not_yet_and_never_done(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url):
        assert cli(url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        _drive_until_safe(engine, url, state)
        before = json.loads(state.read_text())["coordinators"]["0"]["recoverStartTime"]
        engine.stall_coordinator_recovery(0)  # failed over: the new owner replays its log
        polled = _status(url, state)
        assert polled.returncode == 1, polled.stderr
        assert json.loads(polled.stdout)["safe"] is False
        tc0 = components_of(polled)[TC0]
        assert tc0["done"] is False and tc0["waitingFor"] == NOT_LOADED, tc0
        assert "coordinator 0" in tc0["reason"] and "failing over" in tc0["reason"] and "\n" not in tc0["reason"]
        assert "coordinators-list" in tc0["suggestion"], tc0
        text = cli(url, "downgrade", "status", "--state", str(state))
        assert text.returncode == 1 and "Traceback" not in text.stderr and "not the cluster" not in text.stderr
        assert NOT_LOADED in text.stdout, text.stdout
        # Back, reopened by the failover: a status (no watch) never accepts a reopen, so still not safe.
        engine.finish_coordinator_recovery(0)
        polled = _status(url, state)
        assert polled.returncode == 1, polled.stderr
        tc0 = components_of(polled)[TC0]
        assert tc0["done"] is False and tc0["waitingFor"] == "reopened since recording", tc0
        assert json.loads(state.read_text())["coordinators"]["0"]["recoverStartTime"] == before


@pytest.mark.slow
def test_wait_keeps_polling_through_a_coordinator_failover_and_is_safe_only_once_the_reopen_is_proven(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url):
        assert cli(url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        waiter = subprocess.Popen(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", "downgrade", "wait",
                                              "--state", str(state), "--timeout", "120", "--interval", "0.5", "-o",
                                              "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        try:
            reader = threading.Thread(target=lambda: lines.extend(iter(waiter.stderr.readline, "")), daemon=True)
            reader.start()
            _until_line(lines, waiter, lambda line: "logs done" in line)
            engine.stall_coordinator_recovery(0)
            stalled_at = json.loads(httpx.get(f"{url}/admin/v3/transactions/coordinatorStats?coordinatorId=1",
                                              headers={"Authorization": f"Bearer {TOKEN}"}).text)
            assert stalled_at  # the other coordinator still answers
            _until_line(lines, waiter, lambda line: NOT_LOADED in line)
            # a few polls (0.5 s apart) through the failover: the wait goes on (a piped wait prints on change only)
            seen = len([line for line in lines if NOT_LOADED in line])
            time.sleep(2.0)
            assert waiter.poll() is None, "".join(lines)
            engine.finish_coordinator_recovery(0)
            for _ in range(60):
                if waiter.poll() is not None:
                    break
                for topic in ("t", "u"):
                    traffic(engine, 10, topic, "s")
                engine.maintenance_tick()
                time.sleep(0.2)
            out, _ = waiter.communicate(timeout=120)
            reader.join(timeout=30)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.communicate()
        err = "".join(lines)
        assert seen >= 1 and "Traceback" not in err, err
        assert waiter.returncode == 0, err[-2000:]
        report = json.loads(out)
        assert report["safe"] is True
        tc0 = {c["name"]: c for c in report["components"]}[TC0]
        # safe only with the failover's reopen proven (bracketed by the watch), not by having been absent
        accepted = tc0.get("acceptedReopens") or []
        assert accepted, tc0
        recorded = json.loads(state.read_text())["coordinators"]["0"]
        assert recorded["recoverStartTime"] == accepted[-1]["to"]
        assert live_batched_entries(engine) == []


def _until_line(lines: list[str], proc: subprocess.Popen, check, rounds: int = 600) -> None:
    for _ in range(rounds):
        if any(check(line) for line in list(lines)):
            return
        if proc.poll() is not None:
            time.sleep(0.5)
            raise AssertionError(f"wait ended (exit {proc.returncode}): {''.join(lines)[-2000:]}")
        time.sleep(0.05)
    raise AssertionError(f"never: {''.join(lines)[-2000:]}")


def _coordinator_404(tc_id: int, times: float = float("inf")):
    """Answer 404 for coordinator ``tc_id``'s stats and internal stats, as its broker does while it is not
    loaded; ``times`` such answers, then forward."""
    left = [times]

    def intercept(method: str, path: str):
        if method != "GET" or left[0] <= 0:
            return None
        if re.search(rf"/coordinatorStats\?(.*&)?coordinatorId={tc_id}(&|$)", path) or \
                re.search(rf"/coordinatorInternalStats/{tc_id}(\?|$)", path):
            left[0] -= 1
            return 404, json.dumps({"reason": f"Transaction coordinator not found! coordinator id : {tc_id}"})
        return None

    return intercept


@pytest.mark.slow
def test_start_while_a_coordinator_is_not_loaded_says_so_in_one_line_and_a_short_failover_is_waited_out(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url), front(url, TOKEN) as door:
        door.intercepts.append(_coordinator_404(0))
        failed = cli(door.url, "downgrade", "start", "--yes", "--coordinator-wait", "1", "--state", str(state))
        assert failed.returncode == 3, (failed.stdout, failed.stderr)
        assert_one_line_naming(failed.stderr, "coordinator 0", "not loaded", "failing over", "downgrade start")
        assert "not the cluster" not in failed.stderr
        # a failover that ends within start's wait: recorded with evidence, as any other coordinator
        door.intercepts[:] = [_coordinator_404(0, times=4)]
        started = cli(door.url, "downgrade", "start", "--yes", "--coordinator-wait", "20", "--state", str(state))
        assert started.returncode == 0, started.stderr
        rec = json.loads(state.read_text())["coordinators"]["0"]
        assert rec["recoverStartTime"] and not rec.get("notLoaded") and rec["batchingOff"] is True, rec
        bad = cli(door.url, "downgrade", "start", "--yes", "--coordinator-wait", "nan", "--state", str(state))
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr


@pytest.mark.slow
def test_verify_while_a_coordinator_is_not_loaded_cannot_tell_and_says_why(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url), front(url, TOKEN) as door:
        assert cli(door.url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        door.intercepts.append(_coordinator_404(1))
        dump = tmp_path / "dump.jsonl"
        dump.write_text("")
        verified = cli(door.url, "downgrade", "verify", "--state", str(state), "--txn-ledgers", "999999",
                       "--dumps", str(dump))
        assert verified.returncode == 3, (verified.stdout, verified.stderr)
        assert "coordinator 1 is not loaded" in verified.stderr and "not the cluster" not in verified.stderr


def test_the_engine_fault_shows_the_404_window_through_its_rest_server(tmp_path):

    d = loaded_engine(tmp_path)
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "20", "--fault",
                                        "stall-coordinator-recovery=1", "-o", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_served(d)
        info = json.loads((d / "server.json").read_text())
        auth = {"Authorization": f"Bearer {info['token']}"}
        base = f"{info['url']}/admin/v3/transactions"
        for path in ("coordinatorStats?coordinatorId=1", "coordinatorInternalStats/1"):
            got = httpx.get(f"{base}/{path}", headers=auth)
            assert got.status_code == 404, got.text
            assert got.json()["reason"] == "Transaction coordinator not found! coordinator id : 1"
        assert httpx.get(f"{base}/coordinatorStats?coordinatorId=0", headers=auth).status_code == 200
        admin = HttpAdmin(info["url"], token=info["token"])
        try:
            admin.unload_topic(TC_ASSIGN.format(1))  # another unload recovers it for real
        finally:
            admin.close()
        got = httpx.get(f"{base}/coordinatorStats?coordinatorId=1", headers=auth)
        assert got.status_code == 200 and got.json()["recoverStartTime"] > 0, got.text
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    for spec, says in (("stall-coordinator-recovery=x", "not a coordinator id"),
                       ("stall-coordinator-recovery=7", "no coordinator 7")):
        bad = subprocess.run(TXNADMIN + ["engine", "run", str(d), "--duration", "1", "--fault", spec],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 3 and "Traceback" not in bad.stderr and says in bad.stderr, bad.stderr


@pytest.mark.slow
def test_a_recorded_coordinator_the_target_does_not_list_is_still_another_cluster(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url), front(url, TOKEN) as door:
        assert cli(door.url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        listed = HttpAdmin(url, token=TOKEN)
        try:
            others = [c for c in listed.list_coordinators() if c["id"] != 1]
        finally:
            listed.close()
        door.intercepts += [_coordinator_404(1), lambda m, p: (200, json.dumps(others)) if m == "GET" and
                            p.split("?")[0].rstrip("/") == "/admin/v3/transactions/coordinators" else None]
        polled = _status(door.url, state)
        assert polled.returncode == 3, (polled.stdout, polled.stderr)
        assert_one_line_naming(polled.stderr, "coordinator 1", "not among the target's coordinators", "not the cluster")
