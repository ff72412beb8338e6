"""HttpAdmin against a misbehaving local HTTP server: the documented messages and exit codes."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

runner = CliRunner()
SECRET = "s3cr3t-token-value"


class Misbehaving:
    """A tiny HTTP/1.1 server on 127.0.0.1; ``behaviour(path, headers)`` decides each answer."""

    def __init__(self, behaviour):
        self.behaviour = behaviour if callable(behaviour) else (lambda p, h: behaviour)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.hits: list[tuple[str, dict]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                conn.close()
                return
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0].decode()
        request_line, *lines = head.split("\r\n")
        path = request_line.split()[1]
        headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines if ":" in l}
        self.hits.append((path, headers))
        action = self.behaviour(path, headers)
        if action == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()
            return
        if action == "hang":
            time.sleep(3)
            conn.close()
            return
        status, body, extra = action
        payload = body.encode()
        response = (f"HTTP/1.1 {status} X\r\nContent-Length: {len(payload)}\r\nContent-Type: application/json\r\n"
                    + "".join(f"{k}: {v}\r\n" for k, v in extra.items()) + "Connection: close\r\n\r\n").encode()
        conn.sendall(response + payload)
        conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture
def server(request):
    srv = Misbehaving(request.param)
    yield srv
    srv.close()


def invoke(url, *args):
    return runner.invoke(app, ["-u", url, "--request-timeout", "1", "--auth-params", f"token:{SECRET}",
                               "transactions", *args])


@pytest.mark.parametrize("server", [lambda p, h: (500, '{"reason":"broker melted"}', {})], indirect=True)
def test_5xx_retries_then_prints_pulsars_reason(server):
    result = invoke(server.url, "coordinators-list")
    assert result.exit_code == 1
    assert result.stderr == "broker melted\n\nReason: broker melted\n"
    assert len(server.hits) == 3  # bounded retries of an idempotent GET


@pytest.mark.parametrize("server", [lambda p, h: (500, '{"reason":"no"}', {})], indirect=True)
def test_posts_are_not_retried(server):
    assert invoke(server.url, "abort-transaction", "-m", "0", "-l", "1").exit_code == 1
    assert len(server.hits) == 1


@pytest.mark.parametrize("server", ["reset"], indirect=True)
def test_connection_reset(server):
    result = invoke(server.url, "coordinators-list")
    assert result.exit_code == 1 and server.url in result.stderr and "Traceback" not in result.output
    assert "Error connecting to Pulsar" in result.stderr


@pytest.mark.parametrize("server", ["hang"], indirect=True)
def test_timeout(server):
    result = invoke(server.url, "coordinators-list")
    assert result.exit_code == 1 and "timeout" in result.stderr


@pytest.mark.parametrize("server", [lambda p, h: (200, "{not json", {})], indirect=True)
def test_invalid_json_is_an_error_not_a_crash(server):
    result = invoke(server.url, "coordinator-stats", "-c", "0")
    assert result.exit_code == 1 and "malformed JSON" in result.stderr


@pytest.mark.parametrize("server", [lambda p, h: (401, '{"reason":"HTTP 401 Unauthorized"}', {})], indirect=True)
def test_401_says_not_authorized_and_hides_the_token(server):
    result = invoke(server.url, "coordinators-list")
    assert result.exit_code == 1 and "not authorized" in result.stderr
    assert SECRET not in result.output
    assert server.hits[0][1]["authorization"] == f"Bearer {SECRET}"


def test_connection_refused_names_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = invoke(f"http://127.0.0.1:{port}", "coordinators-list")
    assert result.exit_code == 1 and f"127.0.0.1:{port}" in result.stderr and "Traceback" not in result.output


def test_307_is_followed_with_credentials_reapplied():
    owner = Misbehaving(lambda p, h: (200, '[{"id":0,"brokerServiceUrl":"pulsar://owner:6650"}]', {})
                        if h.get("authorization") == f"Bearer {SECRET}" else (401, '{"reason":"no token"}', {}))
    front = Misbehaving(lambda p, h: (307, "", {"Location": f"{owner.url}{p}"}))
    try:
        result = invoke(front.url, "coordinators-list")
        assert result.exit_code == 0, result.output
        assert result.stdout == "0    pulsar://owner:6650\n"
    finally:
        owner.close()
        front.close()


def test_target_masks_secrets(tmp_path):
    conf = tmp_path / "client.conf"
    conf.write_text("webServiceUrl=https://pulsar.example:8443/\nauthPlugin=org.apache.pulsar.client.impl.auth."
                    f"AuthenticationToken\nauthParams=token:{SECRET}\ntlsAllowInsecureConnection=true\n")
    result = runner.invoke(app, ["--conf", str(conf), "target", "-o", "json"])
    out = json.loads(result.stdout)
    assert out["target"] == "https://pulsar.example:8443" and out["source"].startswith("client.conf")
    assert out["authParams"] == "****" and SECRET not in result.output
    env_wins = runner.invoke(app, ["--conf", str(conf), "target", "-o", "json"],
                             env={"TXNADMIN_ADMIN_URL": "http://other:8080"})
    assert json.loads(env_wins.stdout)["target"] == "http://other:8080"
    flag_wins = runner.invoke(app, ["-u", "local:/x", "target", "-o", "json"], env={"TXNADMIN_ADMIN_URL": "http://o:1"})
    # (no engine at /x: the target is still shown, and said missing, exit 3: issue #34)
    assert json.loads(flag_wins.stdout) == {"target": "local:/x", "source": "--admin-url", "named": True,
                                            "engine": "MISSING: no engine at /x"}
    assert flag_wins.exit_code == 3
    default = runner.invoke(app, ["target", "-o", "json"], env={"TXNADMIN_ENGINE_DIR": str(tmp_path / "eng"),
                                                                "TXNADMIN_ADMIN_URL": "", "PULSAR_CLIENT_CONF": ""})
    assert json.loads(default.stdout) == {"target": f"local:{tmp_path / 'eng'}", "source": "embedded default",
                                          "named": False, "engine": f"MISSING: no engine at {tmp_path / 'eng'}"}
    assert default.exit_code == 3


def test_token_from_file(tmp_path):
    from txnadmin.admin.http import token_from_auth

    (tmp_path / "t").write_text(SECRET + "\n")
    assert token_from_auth("AuthenticationToken", f"file://{tmp_path / 't'}") == SECRET
    assert token_from_auth(None, f'{{"token": "{SECRET}"}}') == SECRET


@pytest.mark.parametrize("server", [lambda p, h: (200, "[]", {})], indirect=True)
def test_each_thread_has_its_own_connection_and_finished_threads_release_theirs(server):
    from concurrent.futures import ThreadPoolExecutor

    from txnadmin.admin.http import HttpAdmin

    admin = HttpAdmin(server.url, token=SECRET)
    for _ in range(3):  # three polls, each with a fresh pool of 4 threads, as `downgrade wait` does
        with ThreadPoolExecutor(max_workers=4) as pool:
            assert list(pool.map(lambda _: admin.list_coordinators(), range(8))) == [[]] * 8
    admin.list_coordinators()  # a new thread's first call closes the finished threads' transports
    assert set(admin._transports) == {threading.current_thread()}
    assert all(h.get("authorization") == f"Bearer {SECRET}" for _, h in server.hits)
    admin.close()
    assert admin._transports == {}


@pytest.mark.parametrize("server", [lambda p, h: (200, "[]", {})], indirect=True)
def test_the_environment_proxy_is_used_unless_no_proxy_names_the_host(server, monkeypatch):
    from txnadmin.admin.http import HttpAdmin

    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.setenv("NO_PROXY", "localhost")
    admin = HttpAdmin("http://broker.example:8080", token=SECRET)
    assert admin.list_coordinators() == []
    assert server.hits[-1][0] == "http://broker.example:8080/admin/v3/transactions/coordinators"  # via the proxy
    admin.close()
    monkeypatch.setenv("NO_PROXY", "broker.example")
    bypassed = HttpAdmin("http://broker.example:8080", token=SECRET)
    assert bypassed._proxy is None
    bypassed.close()
