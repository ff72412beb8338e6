"""HttpAdmin's per-call rules — one deadline, one retry policy, where credentials may follow a redirect — and the
CLI's last line of defence (the root guard, bad TLS/timeout options, Java missing for Spark)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from typer.testing import CliRunner

from test_http_faults import Misbehaving
from txnadmin.admin.http import HttpAdmin, RetryPolicy, is_transient
from txnadmin.admin.protocol import AdminError, BadReplyError, NotAuthorizedError, TargetUnreachableError
from txnadmin.cli.main import app

SECRET = "policy-test-secret-token"
runner = CliRunner()


def _trickler(body: bytes, delay: float):
    """A server that sends its headers at once, then the body one byte every ``delay`` seconds."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)

    def handle(conn):
        try:
            conn.recv(65536)
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode())
            for i in range(len(body)):
                conn.sendall(body[i:i + 1])
                time.sleep(delay)
        except OSError:
            pass
        finally:
            conn.close()

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_the_timeout_bounds_the_whole_call_even_when_the_body_trickles():
    body = b"[" + b" " * 98 + b"]"  # 100 bytes at 0.3 s each: 30 s if only each read were bounded
    sock, url = _trickler(body, 0.3)
    try:
        admin = HttpAdmin(url, timeout=1)
        with pytest.raises(TargetUnreachableError, match=r"within --request-timeout 1 s"):
            admin.list_coordinators()
        admin.close()
    finally:
        sock.close()


def test_retry_after_is_honoured_on_429_within_the_deadline():
    hits: list[float] = []

    def reply(path, headers):
        hits.append(time.monotonic())
        return (429, '{"reason":"slow down"}', {"Retry-After": "1"}) if len(hits) == 1 else (200, "[]", {})

    server = Misbehaving(reply)
    try:
        admin = HttpAdmin(server.url, timeout=5, retry_backoff=0.01)
        assert admin.list_coordinators() == []
        assert len(hits) == 2 and hits[1] - hits[0] >= 0.9  # waited as asked, not the 0.01 s backoff
    finally:
        server.close()


def test_retry_after_beyond_the_deadline_fails_at_once_and_says_why():
    server = Misbehaving(lambda p, h: (503, '{"reason":"busy"}', {"Retry-After": "120"}))
    try:
        admin = HttpAdmin(server.url, timeout=2)
        with pytest.raises(AdminError, match=r"retry after 120 s — beyond --request-timeout 2 s"):
            admin.coordinator_stats()
        assert len(server.hits) == 1
    finally:
        server.close()


def test_503_is_retried_even_for_a_post_but_500_is_not():
    calls = []

    def reply(path, headers):
        calls.append(path)
        return (503, '{"reason":"busy"}', {"Retry-After": "0"}) if len(calls) == 1 else (204, "", {})

    server = Misbehaving(reply)
    try:
        HttpAdmin(server.url, timeout=5).abort_transaction(__import__("txnadmin.admin.protocol").admin.protocol.TxnId(0, 1))
        assert len(calls) == 2
    finally:
        server.close()


def test_is_transient_tells_retryable_failures_from_final_answers():
    assert is_transient(TargetUnreachableError("x"))
    assert is_transient(AdminError("busy", 503)) and is_transient(AdminError("slow", 429))
    assert not is_transient(NotAuthorizedError()) and not is_transient(AdminError("bad", 400))
    assert not is_transient(BadReplyError("unexpected JSON"))  # a wrong reply does not fix itself
    assert is_transient(AdminError("Bad Gateway", 502))  # a proxy's 502 while its broker restarts does
    assert RetryPolicy().should_retry("POST", 429) and not RetryPolicy().should_retry("POST", 500)


# -- redirects -------------------------------------------------------------------------------------

def _mock(routes: dict[str, httpx.Response], seen: list[httpx.Request]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return routes.get(request.url.host, httpx.Response(200, json=[]))
    return httpx.MockTransport(handler)


@pytest.mark.parametrize("location, allowed", [
    ("https://broker-2.example.com:8443/admin/v3/transactions/coordinators", True),  # same domain
    ("https://pulsar.example.com:9443/admin/v3/transactions/coordinators", True),  # same host
    ("https://attacker.example.org/admin/v3/transactions/coordinators", False),  # another domain
    ("http://broker-2.example.com:8080/admin/v3/transactions/coordinators", False),  # https → http
    ("ftp://broker-2.example.com/x", False),
])
def test_credentials_follow_redirects_only_within_the_cluster(location, allowed):
    seen: list[httpx.Request] = []
    routes = {"pulsar.example.com": httpx.Response(307, headers={"Location": location})}
    if "pulsar.example.com:9443" in location:
        routes = {}
        first = {"done": False}

        def handler(request):
            seen.append(request)
            if not first["done"]:
                first["done"] = True
                return httpx.Response(307, headers={"Location": location})
            return httpx.Response(200, json=[])
        transport = httpx.MockTransport(handler)
    else:
        transport = _mock(routes, seen)
    admin = HttpAdmin("https://pulsar.example.com:8443", token=SECRET, transport=transport)
    if allowed:
        assert admin.list_coordinators() == []
        assert seen[-1].url == httpx.URL(location)
        assert seen[-1].headers["authorization"] == f"Bearer {SECRET}"
    else:
        with pytest.raises(AdminError, match="refusing a redirect|invalid Location") as err:
            admin.list_coordinators()
        assert SECRET not in str(err.value)
        assert all(r.url.host == "pulsar.example.com" for r in seen)  # nothing went to the other host


def test_a_broker_in_the_active_broker_list_gets_the_credentials_and_any_other_host_does_not():
    owner = Misbehaving(lambda p, h: (200, "[]", {}))  # on 127.0.0.1 (another port)
    elsewhere = socket.socket()
    elsewhere.bind(("127.0.0.2", 0))
    elsewhere.listen(1)
    other_port = elsewhere.getsockname()[1]
    brokers = {"listed": f'["localhost:{owner.port}"]'}

    def front(path, headers):
        if path == "/admin/v2/clusters":
            return (200, '["standalone"]', {})
        if path == "/admin/v2/brokers/standalone":
            return (200, brokers["listed"], {})
        target = f"http://localhost:{owner.port}" if "coordinators" in path else f"http://127.0.0.2:{other_port}"
        return (307, "", {"Location": target + path})

    server = Misbehaving(front)
    try:
        admin = HttpAdmin(server.url, token=SECRET, timeout=5)
        assert admin.list_coordinators() == []  # localhost is not 127.0.0.1 by name, but it is a listed broker
        assert owner.hits[-1][1]["authorization"] == f"Bearer {SECRET}"
        with pytest.raises(AdminError, match=r"refusing a redirect to http://127\.0\.0\.2"):
            admin.list_tenants()
        elsewhere.settimeout(0.2)
        with pytest.raises(OSError):
            elsewhere.accept()  # never contacted
    finally:
        server.close()
        owner.close()
        elsewhere.close()


# -- options and the guard -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["missing", "directory", "garbage"])
def test_a_bad_trust_cert_path_is_one_line_naming_it(kind, tmp_path):
    path = tmp_path / "ca.pem"
    if kind == "directory":
        path.mkdir()
    elif kind == "garbage":
        path.write_text("not a certificate\n")
    base = ["-u", "https://127.0.0.1:9", "--tls-trust-cert-path", str(path)]
    txn = runner.invoke(app, [*base, "transactions", "coordinators-list"])
    assert txn.exit_code == 1 and str(path) in txn.stderr and "Traceback" not in txn.output
    own = runner.invoke(app, [*base, "downgrade", "status", "--state", str(tmp_path / "s.json")])
    assert own.exit_code == 3 and str(path) in own.stderr
    assert len(own.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_a_non_positive_request_timeout_is_a_usage_error(value):
    result = runner.invoke(app, ["-u", "http://127.0.0.1:9", "--request-timeout", value, "target"])
    assert result.exit_code == 2 and "--request-timeout" in result.stderr and "Traceback" not in result.output


def _main(argv, monkeypatch, capsys):
    from txnadmin.cli import main as main_module

    monkeypatch.setattr(sys, "argv", ["txnadmin", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main_module.main()
    return exit_info.value.code, capsys.readouterr()


def test_usage_errors_under_transactions_exit_1_as_pulsar_admin(monkeypatch, capsys):
    code, out = _main(["--request-timeout", "-1", "transactions", "coordinators-list"], monkeypatch, capsys)
    assert code == 1 and "--request-timeout" in out.err


def test_an_unexpected_exception_is_one_line_with_the_documented_code(monkeypatch):
    import txnadmin.admin.hanging as hanging
    import txnadmin.admin.target as target

    def boom(*a, **k):
        raise ValueError(f"something odd {SECRET}")

    monkeypatch.setattr(hanging, "open_transactions", boom)
    txn = runner.invoke(app, ["-u", "local:/nonexistent-engine", "--auth-params", f"token:{SECRET}",
                              "transactions", "list"])
    assert txn.exit_code == 1, txn.output
    monkeypatch.setattr(target, "resolve_target", boom)
    own = runner.invoke(app, ["--auth-params", f"token:{SECRET}", "target"])
    assert own.exit_code == 3
    line = own.stderr.strip()
    assert len(line.splitlines()) == 1 and "ValueError" in line and "run with --debug for the traceback" in line
    assert SECRET not in own.output
    debug = runner.invoke(app, ["--debug", "target"])
    assert isinstance(debug.exception, ValueError)  # --debug lets the traceback through


def test_ctrl_c_exits_130(monkeypatch):
    import txnadmin.admin.target as target

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, "resolve_target", interrupted)
    result = runner.invoke(app, ["target"])
    assert result.exit_code == 130 and result.stderr.strip() == "interrupted"


@pytest.mark.slow
def test_scan_with_a_stale_java_home_is_one_line_exit_3(tmp_path):
    from dumpgen import batched, write_entry_log

    log = tmp_path / "0.log"
    write_entry_log(log, [(7, 0, batched(3))])
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-such-jdk"), PATH="/usr/bin:/bin")
    proc = subprocess.run([sys.executable, "-m", "txnadmin.cli.main", "scan", "--engine", "spark", str(log)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 3, proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(ours) == 1 and "JAVA_HOME" in ours[0] and "Traceback" not in proc.stderr
