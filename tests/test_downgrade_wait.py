"""`downgrade wait` until a verdict: it rides out a broker restart (retrying, and judging the restart's reopen),
follows an engine that comes back on another port with another token, stops at once on 401, is bounded by --timeout
when the target hangs, and goes on to its --timeout when a transaction pinning a log can no longer be described. In
this process and through the CLI (`txnadmin serve`, fake servers, `-u local:PATH`)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import AdminError
from txnadmin.procedures.downgrade import DowngradeError, start, wait
from txnadmin.server.run import free_port

from downgrade_helpers import (
    BATCHED, TOKEN, TXNADMIN, U_STORE, cli, load, loaded_engine, local, report_of, serve_process,
)
from engine_helpers import live_batched_entries, open_engine
from serve_helpers import serving


class Flaky(LocalAdmin):
    """Fails the first ``failures`` runtime-config reads with ``error``, or hangs them."""

    def __init__(self, engine, error=None, failures=2, hang=False):
        import threading

        super().__init__(engine)
        self.error, self.failures, self.hang = error, failures, hang
        self.release = threading.Event()

    def runtime_config(self):
        if self.hang:
            self.release.wait(120)  # released by the test, so no thread outlives it
        if self.failures > 0:
            self.failures -= 1
            raise self.error
        return super().runtime_config()


@pytest.mark.slow
def test_wait_rides_out_a_broker_restart_and_stops_at_once_on_401(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)
        start(LocalAdmin(engine), tmp_path / "s.json")
        for _ in range(8):
            load(engine, 30)
        retries = []
        flaky = Flaky(engine, AdminError("cannot connect (Connection refused)", 0), failures=2)
        report = wait(flaky, tmp_path / "s.json", 30, 0.1, on_retry=lambda e, p: retries.append(e))
        assert len(retries) == 2 and "Connection refused" in retries[0]
        assert report.safe and live_batched_entries(engine) == []
        denied = Flaky(engine, AdminError("not authorized", 401), failures=1)
        t = time.monotonic()
        with pytest.raises(DowngradeError) as err:
            wait(denied, tmp_path / "s.json", 30, 0.1)
        assert err.value.exit_code == 3 and time.monotonic() - t < 25


def test_wait_timeout_bounds_a_hung_target(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)
        start(LocalAdmin(engine), tmp_path / "s.json")
        hung = Flaky(engine, hang=True)
        t = time.monotonic()
        try:
            with pytest.raises(DowngradeError, match="no answer from the target within --timeout") as err:
                wait(hung, tmp_path / "s.json", 1, 0.1)
        finally:
            hung.release.set()
        assert err.value.exit_code == 3 and time.monotonic() - t < 30


@pytest.mark.slow
def test_wait_rides_out_a_broker_restart(tmp_path):
    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    port = free_port()
    with serve_process(tmp_path, d, port) as (url, proc):
        assert cli(url, "downgrade", "start", "--yes", "--state", state).returncode == 0
    # The broker is down; `wait` starts anyway and keeps trying; the broker comes back (its stores reopen).
    waiter = subprocess.Popen(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", "downgrade", "wait",
                                          "--state", state, "--timeout", "20", "--interval", "0.5", "-o", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    with serve_process(tmp_path, d, port):
        out, err = waiter.communicate(timeout=120)
    assert "retrying" in err and "Traceback" not in err
    report = json.loads(out)  # stdout stays one JSON document; progress went to stderr
    # The restart reopened every store: the verdict must not be safe, and says why.
    assert waiter.returncode == 1 and report["safe"] is False
    assert report["waitingByReason"].get("reopened since recording")


class _Fake(BaseHTTPRequestHandler):
    mode = "401"

    def do_GET(self):
        if self.mode == "hang":
            time.sleep(60)
            return
        body = json.dumps({"reason": "Unauthorized"}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def _fake(mode):
    handler = type("Handler", (_Fake,), {"mode": mode})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _recorded_state(tmp_path):
    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serve_process(tmp_path, d) as (url, _):
        assert cli(url, "downgrade", "start", "--yes", "--state", state).returncode == 0
    return state


@pytest.mark.slow
def test_a_401_during_wait_stops_at_once_and_a_hung_broker_is_bounded_by_timeout(tmp_path):
    state = _recorded_state(tmp_path)
    with _fake("401") as url:
        t = time.monotonic()
        denied = cli(url, "downgrade", "wait", "--state", state, "--timeout", "120", "--interval", "1")
        assert denied.returncode == 3 and "Unauthorized" in denied.stderr and "Traceback" not in denied.stderr
        assert time.monotonic() - t < 60
    with _fake("hang") as url:
        hung = cli(url, "downgrade", "wait", "--state", state, "--timeout", "10", "--interval", "1", timeout=90)
        assert hung.returncode == 3 and "within --timeout 10" in hung.stderr, hung.stderr


def _wait_in_background(d, state, timeout: str) -> subprocess.Popen:
    """`downgrade wait -o json` through `-u local:PATH`, left running while the test restarts the engine."""
    return subprocess.Popen(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state, "--timeout", timeout,
                                        "--interval", "0.5", "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _after_its_first_poll(waiter: subprocess.Popen) -> str:
    """Block until the background wait has shown its first poll (it runs against the server, not a stopped view,
    however slowly a loaded machine starts it); its first stderr line, for the caller to keep."""
    assert waiter.stderr is not None
    return waiter.stderr.readline()


@pytest.mark.slow
def test_a_hung_engine_during_wait_is_bounded_by_timeout_through_a_plain_local_target(tmp_path):
    import os
    import signal
    import time

    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serving(d, tmp_path / "home"):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        pid = json.loads((d / "server.json").read_text())["pid"]
        os.kill(pid, signal.SIGSTOP)  # the broker hangs: connections are accepted by the kernel, never answered
        try:
            t = time.monotonic()
            hung = local(d, "downgrade", "wait", "--state", state, "--timeout", "10", "--interval", "1", timeout=90)
            assert hung.returncode == 3 and "within --timeout 10" in hung.stderr, hung.stderr
            assert "Traceback" not in hung.stderr and time.monotonic() - t < 60  # generous: not a timing test
        finally:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.slow
def test_wait_rides_out_an_engine_restart_through_a_plain_local_target(tmp_path):
    """The engine's server stops and comes back at the same address (`serve --port --token-file`): `wait` keeps
    retrying, and the restart reopened every store, so the verdict says so instead of "safe"."""
    import time

    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    port = free_port()
    with serve_process(tmp_path, d, port):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        waiter = _wait_in_background(d, state, "40")
        first = _after_its_first_poll(waiter)
        time.sleep(2)
    time.sleep(2)
    with serve_process(tmp_path, d, port):
        out, err = waiter.communicate(timeout=120)
        err = first + err
    assert "retrying" in err and "Traceback" not in err
    report = json.loads(out)
    assert waiter.returncode == 1 and report["safe"] is False
    assert report["waitingByReason"].get("reopened since recording")


@pytest.mark.slow
def test_wait_follows_an_engine_that_restarts_on_another_port_with_another_token(tmp_path):
    """A restarted engine picks a new port and a new token: `wait` re-reads the engine's server.json when the old
    address refuses connections, carries on against the new one, and still judges the restart's reopen."""
    import time

    d = loaded_engine(tmp_path)
    state = str(tmp_path / "s.json")
    with serving(d, tmp_path / "home") as (first_url, first_token):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        waiter = _wait_in_background(d, state, "60")
        first = _after_its_first_poll(waiter)
        time.sleep(2)
    time.sleep(2)
    with serving(d, tmp_path / "home") as (second_url, second_token):
        assert (second_url, second_token) != (first_url, first_token)
        out, err = waiter.communicate(timeout=150)
        err = first + err
    assert "Traceback" not in err, err
    report = json.loads(out)
    # Without following the move the wait would end at --timeout with exit 3; it reaches a verdict instead.
    assert waiter.returncode == 1 and report["safe"] is False, err
    assert report["waitingByReason"].get("reopened since recording")
    assert second_token not in out + err and first_token not in out + err


def _engine_with_an_open_ack_on_u(tmp_path):
    """A batching engine after some traffic, holding one OPEN transaction (an hour's timeout) that acked a message
    on u's subscription s. Returns the directory and the transaction's id as Pulsar prints it."""
    from engine_helpers import Clock, open_engine

    d = tmp_path / "e"
    # The real time: the served engine reopening it recovers the transaction's deadline from its open time.
    with open_engine(d, Clock(int(time.time() * 1000)), **BATCHED) as engine:
        load(engine)
        sent = engine.begin(60_000)
        engine.produce(sent, "u", b"held")
        engine.commit(sent)
        held = engine.begin(3_600_000)
        got = engine.receive("u", "s", 1)
        engine.ack(held, "u", "s", [got[0].position])
        for _ in range(3):
            engine.maintenance_tick()
    return d, f"({held[0]},{held[1]})"


@pytest.mark.slow
def test_a_subscription_deleted_under_an_open_transaction_mid_wait(tmp_path):
    from serve_helpers import serving

    from txnadmin.admin.http import HttpAdmin

    d, txn = _engine_with_an_open_ack_on_u(tmp_path)
    tc_log = f"__transaction_log_{txn.strip('()').split(',')[0]}"
    state = str(tmp_path / "s.json")
    with serving(d, tmp_path / "home") as (url, token):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        listed = local(d, "transactions", "list", "-o", "json")
        assert listed.returncode == 0 and [r["txnId"] for r in report_of(listed)] == [txn], listed.stderr
        waiter = subprocess.Popen(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state,
                                              "--timeout", "20", "--interval", "0.5", "-o", "json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        # Mid-wait, someone deletes the subscription the open transaction acked on (its store goes with it).
        HttpAdmin(url, token=token).delete_subscription("persistent://public/default/u", "s")
        out, err = waiter.communicate(timeout=120)
        assert "Traceback" not in err, err
        # The wait goes on to its --timeout: not safe (the transaction still pins its coordinator's log) …
        assert waiter.returncode == 1, (waiter.returncode, err)
        report = json.loads(out)
        by_name = {c["name"]: c for c in report["components"]}
        # … the deleted store counts as done …
        assert by_name[U_STORE]["done"] is True and "deleted" in by_name[U_STORE]["reason"], by_name[U_STORE]
        # … and the coordinator whose open transaction cannot be described waits, saying so.
        pinned = by_name[tc_log]
        assert pinned["done"] is False and pinned["waitingFor"] == "open transaction pinning trimming", pinned
        assert "could not be named" in pinned["reason"], pinned
        polled = local(d, "downgrade", "status", "--state", state, "-o", "json")
        assert polled.returncode == 1 and report_of(polled)["safe"] is False, polled.stderr
        # `transactions list` still lists every coordinator that can answer, and names the one that cannot.
        listed = local(d, "transactions", "list", "-o", "json")
        assert "Traceback" not in listed.stderr
        assert listed.returncode == 1 and report_of(listed) == [], (listed.stdout, listed.stderr)
        tc_id = txn.strip("()").split(",")[0]
        assert f"coordinator {tc_id}: its transactions could not be listed" in listed.stderr, listed.stderr
        alone = local(d, "transactions", "list", "-c", tc_id)
        assert alone.returncode == 1 and "Subscription s of" in alone.stderr and "Traceback" not in alone.stderr
