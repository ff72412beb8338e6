"""`txnadmin downgrade` through the CLI against a real `txnadmin serve` process, with the traps of issue #14."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from txnadmin.admin.http import HttpAdmin
from txnadmin.server.run import free_port, wait_until_listening

from engine_helpers import open_engine
from test_downgrade import BATCHED
from test_downgrade_adversarial import load

pytestmark = pytest.mark.slow  # every test drives `txnadmin serve` through a whole downgrade: several seconds each

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
TOKEN = "serve-test-token"
TC_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign-partition-{}"


def _engine(tmp_path):
    d = tmp_path / "e"
    with open_engine(d, **BATCHED) as engine:
        load(engine)
    (tmp_path / "token").write_text(TOKEN)
    return d


@contextmanager
def _serve(tmp_path, d, port=None):
    port = port or free_port()
    proc = subprocess.Popen(TXNADMIN + ["serve", "--engine-dir", str(d), "--port", str(port), "--token-file",
                                        str(tmp_path / "token")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until_listening(port, proc, timeout_s=60)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=20)


def cli(url, *args, timeout=120):
    return subprocess.run(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_reenabled_between_polls_and_no_reload_through_serve(tmp_path):
    d = _engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _serve(tmp_path, d) as (url, _):
        started = cli(url, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["target"] == {"url": url, "source": "--admin-url"}
        admin = HttpAdmin(url, token=TOKEN)
        # Between two polls: batching on, the stores reload and batch, batching off again.
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "true")
        admin.unload_topic(TC_ASSIGN.format(0))
        admin.update_dynamic_config("transactionLogBatchedWriteEnabled", "false")
        polled = cli(url, "downgrade", "status", "--state", state, "-o", "json")
        assert polled.returncode == 1
        report = json.loads(polled.stdout)
        assert report["waitingByReason"]["reopened since recording"] == 1
        assert report["target"]["url"] == url and report["brokersChecked"]
        human = cli(url, "downgrade", "status", "--state", state)
        assert human.stdout.startswith(f"target: {url} (from --admin-url)")
        again = cli(url, "downgrade", "start", "--yes", "--state", state, "-o", "json")
        assert json.loads(again.stdout)["recordedThisRun"] == 1  # exactly the coordinator that reopened
        # Without a reload nothing is proven: every log waits for its store to reopen.
        noreload = cli(url, "downgrade", "start", "--yes", "--no-reload", "--state", str(tmp_path / "n.json"),
                       "-o", "json")
        assert noreload.returncode == 0, noreload.stderr
        waiting = json.loads(cli(url, "downgrade", "status", "--state", str(tmp_path / "n.json"), "-o", "json").stdout)
        assert waiting["safe"] is False and set(waiting["waitingByReason"]) == {"store not reopened"}
        admin.close()


def test_wait_rides_out_a_broker_restart(tmp_path):
    d = _engine(tmp_path)
    state = str(tmp_path / "s.json")
    port = free_port()
    with _serve(tmp_path, d, port) as (url, proc):
        assert cli(url, "downgrade", "start", "--yes", "--state", state).returncode == 0
    # The broker is down; `wait` starts anyway and keeps trying; the broker comes back (its stores reopen).
    waiter = subprocess.Popen(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", "downgrade", "wait",
                                          "--state", state, "--timeout", "20", "--interval", "0.5", "-o", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    with _serve(tmp_path, d, port):
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
    d = _engine(tmp_path)
    state = str(tmp_path / "s.json")
    with _serve(tmp_path, d) as (url, _):
        assert cli(url, "downgrade", "start", "--yes", "--state", state).returncode == 0
    return state


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


def test_dry_run_and_a_checklist_from_another_target_through_serve(tmp_path):
    """--dry-run changes nothing on an http:// target either; a checklist recorded against one served engine is
    refused against another, saying how to proceed."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = _engine(tmp_path / "a"), _engine(tmp_path / "b")
    state = str(tmp_path / "s.json")
    with _serve(tmp_path / "a", a) as (url_a, _), _serve(tmp_path / "b", b) as (url_b, _):
        dry = cli(url_a, "downgrade", "start", "--dry-run", "--state", state)
        assert dry.returncode == 0 and "nothing was changed" in dry.stdout, dry.stderr
        assert not (tmp_path / "s.json").exists()
        flags = HttpAdmin(url_a, token=TOKEN).runtime_config()
        assert flags["transactionLogBatchedWriteEnabled"] == "true"  # still on: nothing changed
        assert cli(url_a, "downgrade", "start", "--yes", "--state", state).returncode == 0
        for cmd in (["downgrade", "start", "--yes"], ["downgrade", "status"]):
            refused = cli(url_b, *cmd, "--state", state)
            assert refused.returncode == 3, refused.stderr
            assert "recorded on another target" in refused.stderr and "reset" in refused.stderr
            assert "Traceback" not in refused.stderr


def test_ctrl_c_during_wait_through_serve_keeps_the_checklist_and_exits_130(tmp_path):
    import signal

    d = _engine(tmp_path)  # no traffic: its idle subscription's store never trims, so the wait cannot end safe
    state = tmp_path / "s.json"
    with _serve(tmp_path, d) as (url, _):
        assert cli(url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        before = json.loads(state.read_text())
        waiter = subprocess.Popen(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", "downgrade", "wait",
                                              "--state", str(state), "--interval", "30", "--timeout", "600"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert waiter.stderr is not None
        first = waiter.stderr.readline()  # its first poll shown: Python is up and the wait under way
        waiter.send_signal(signal.SIGINT)
        out, rest = waiter.communicate(timeout=60)
        err = first + rest
    assert waiter.returncode == 130, err
    assert "downgrade wait" in err and "Traceback" not in err  # how to resume
    after = json.loads(state.read_text())
    assert after["phase"] == before["phase"] == "recorded"
    assert after["pendingAckStores"].keys() == before["pendingAckStores"].keys()
