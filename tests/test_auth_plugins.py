"""Each Pulsar auth plugin, from flags and from client.conf, against local servers that check the credentials
(an HTTPS broker demanding a client certificate and a local OAuth2 token endpoint included); the plugins we do not
implement are refused by name, never silently dropped."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

runner = CliRunner()
COORDINATORS = [{"id": 0, "brokerServiceUrl": "pulsar://broker:6650"}]


class Server:
    """A threaded HTTP(S) server; ``answer(method, path, headers, body, peer_cert)`` → (status, JSON value)."""

    def __init__(self, answer, tls: ssl.SSLContext | None = None):
        outer = self
        self.seen: list[tuple[str, str, dict, bytes]] = []

        class Handler(BaseHTTPRequestHandler):
            def _do(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                peer = self.connection.getpeercert() if tls else None
                outer.seen.append((self.command, self.path, dict(self.headers), body))
                status, value = answer(self.command, self.path, self.headers, body, peer)
                payload = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _do

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _coordinators_if(check):
    def answer(method, path, headers, body, peer):
        if not check(headers, peer):
            return 401, {"reason": "HTTP 401 Unauthorized"}
        return 200, COORDINATORS
    return answer


def _list(*args, env=None):
    return runner.invoke(app, [*args, "transactions", "coordinators-list"], env=env)


# -- Basic ---------------------------------------------------------------------------------------------

def test_basic_from_flags_and_from_client_conf(tmp_path):
    expected = "Basic " + base64.b64encode(b"operator:pa55:word").decode()
    server = Server(_coordinators_if(lambda h, p: h.get("Authorization") == expected))
    try:
        params = '{"userId":"operator","password":"pa55:word"}'
        flags = _list("-u", server.url, "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
                      "--auth-params", params)
        assert flags.exit_code == 0, flags.output
        assert flags.stdout == "0    pulsar://broker:6650\n"
        conf = tmp_path / "client.conf"
        conf.write_text(f"webServiceUrl={server.url}\nauthPlugin=org.apache.pulsar.client.impl.auth."
                        f"AuthenticationBasic\nauthParams={params}\n")
        assert _list("--conf", str(conf)).exit_code == 0
        wrong = _list("-u", server.url, "--auth-plugin", "AuthenticationBasic",
                      "--auth-params", '{"userId":"operator","password":"wrong-password"}')
        assert wrong.exit_code == 1 and "not authorized" in wrong.stderr and "wrong-password" not in wrong.output
    finally:
        server.close()


# -- OAuth2 client credentials ------------------------------------------------------------------------

@pytest.fixture
def oauth(tmp_path):
    issued = {"token": "oauth-access-token-1234"}

    def issuer(method, path, headers, body, peer):
        if path == "/.well-known/openid-configuration":
            return 200, {"issuer": idp.url, "token_endpoint": f"{idp.url}/oauth/token"}
        if path == "/oauth/token" and method == "POST":
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            if headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded") and form == {
                    "grant_type": "client_credentials", "client_id": "txn-client", "client_secret": "s3cret-value",
                    "audience": "urn:pulsar:cluster", "scope": "admin"}:
                return 200, {"access_token": issued["token"], "token_type": "Bearer", "expires_in": 3600}
            return 401, {"error": "invalid_client", "error_description": f"bad form {sorted(form)}"}
        return 404, {"error": "not found"}

    idp = Server(issuer)
    broker = Server(_coordinators_if(lambda h, p: h.get("Authorization") == f"Bearer {issued['token']}"))
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "client_credentials", "client_id": "txn-client",
                               "client_secret": "s3cret-value", "issuer_url": idp.url}))
    params = json.dumps({"type": "client_credentials", "issuerUrl": idp.url, "privateKey": f"file://{key}",
                         "audience": "urn:pulsar:cluster", "scope": "admin"})
    yield idp, broker, params, issued
    idp.close()
    broker.close()


def test_oauth2_client_credentials_from_flags(oauth):
    idp, broker, params, issued = oauth
    result = _list("-u", broker.url, "--auth-plugin", "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2",
                   "--auth-params", params)
    assert result.exit_code == 0, result.output
    assert [p for _, p, _, _ in idp.seen] == ["/.well-known/openid-configuration", "/oauth/token"]


def test_oauth2_from_client_conf_and_errors_hide_the_secret(oauth, tmp_path):
    idp, broker, params, issued = oauth
    conf = tmp_path / "client.conf"
    conf.write_text(f"webServiceUrl={broker.url}\nauthPlugin=org.apache.pulsar.client.impl.auth.oauth2."
                    f"AuthenticationOAuth2\nauthParams={params}\n")
    assert _list("--conf", str(conf)).exit_code == 0
    bad = json.loads(params)
    bad["scope"] = "everything"
    refused = _list("-u", broker.url, "--auth-plugin", "AuthenticationOAuth2", "--auth-params", json.dumps(bad))
    assert refused.exit_code == 1 and "token endpoint" in refused.stderr and "s3cret-value" not in refused.output
    status = runner.invoke(app, ["-u", broker.url, "--auth-plugin", "AuthenticationOAuth2", "--auth-params",
                                 json.dumps(bad), "upgrade"])
    assert status.exit_code == 3 and len(status.stderr.strip().splitlines()) == 1


def test_oauth2_missing_key_file_names_it(oauth, tmp_path):
    idp, broker, params, _ = oauth
    bad = json.loads(params)
    bad["privateKey"] = f"file://{tmp_path / 'missing.json'}"
    result = _list("-u", broker.url, "--auth-plugin", "AuthenticationOAuth2", "--auth-params", json.dumps(bad))
    assert result.exit_code == 1 and "missing.json" in result.stderr


# -- TLS client certificate ------------------------------------------------------------------------------

def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=txnadmin-test-ca", cwd=d)
    for name, cn in (("server", "127.0.0.1"), ("client", "txnadmin-operator")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}", cwd=d)
        ext = d / f"{name}.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\n" if name == "server" else "extendedKeyUsage=clientAuth\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return d


@pytest.fixture
def tls_broker(pki):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "server.pem", pki / "server.key")
    ctx.load_verify_locations(pki / "ca.pem")
    ctx.verify_mode = ssl.CERT_OPTIONAL  # the handler answers 401 itself, so the client sees a reason

    def has_client_cert(headers, peer):
        subject = dict(x[0] for x in (peer or {}).get("subject", ()))
        return subject.get("commonName") == "txnadmin-operator"

    server = Server(_coordinators_if(has_client_cert), tls=ctx)
    yield server
    server.close()


def test_tls_client_certificate_from_flags_and_client_conf(pki, tls_broker, tmp_path):
    params = f"tlsCertFile:{pki / 'client.pem'},tlsKeyFile:{pki / 'client.key'}"
    base = ["-u", tls_broker.url, "--tls-trust-cert-path", str(pki / "ca.pem")]
    with_cert = _list(*base, "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationTls",
                      "--auth-params", params)
    assert with_cert.exit_code == 0, with_cert.output
    without = _list(*base)
    assert without.exit_code == 1 and "not authorized" in without.stderr
    conf = tmp_path / "client.conf"
    conf.write_text(f"webServiceUrl={tls_broker.url}\ntlsTrustCertsFilePath={pki / 'ca.pem'}\n"
                    "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationTls\n"
                    f'authParams={{"tlsCertFile":"{pki / "client.pem"}","tlsKeyFile":"{pki / "client.key"}"}}\n')
    assert _list("--conf", str(conf)).exit_code == 0


def test_tls_client_certificate_errors_name_the_file(pki, tls_broker, tmp_path):
    missing = _list("-u", tls_broker.url, "--auth-plugin", "AuthenticationTls", "--auth-params",
                    f"tlsCertFile:{tmp_path / 'nope.pem'},tlsKeyFile:{pki / 'client.key'}")
    assert missing.exit_code == 1 and "nope.pem" in missing.stderr
    mismatched = _list("-u", tls_broker.url, "--auth-plugin", "AuthenticationTls", "--auth-params",
                       f"tlsCertFile:{pki / 'client.pem'},tlsKeyFile:{pki / 'server.key'}")
    assert mismatched.exit_code == 1 and "client.pem" in mismatched.stderr


# -- refused plugins and where client.conf is found ------------------------------------------------------

@pytest.mark.parametrize("plugin, named", [
    ("org.apache.pulsar.client.impl.auth.AuthenticationAthenz", "Athenz"),
    ("org.apache.pulsar.client.impl.auth.AuthenticationSasl", "SASL"),
    ("org.apache.pulsar.client.impl.auth.AuthenticationKeyStoreTls", "keystore TLS"),
    ("com.example.auth.MyCompanyAuth", "unknown authentication plugin"),
])
def test_unsupported_plugins_are_refused_by_name(plugin, named, tmp_path):
    result = _list("-u", "http://127.0.0.1:9", "--auth-plugin", plugin, "--auth-params", "x:y")
    assert result.exit_code == 1 and named in result.stderr and plugin in result.stderr
    shown = runner.invoke(app, ["-u", "http://127.0.0.1:9", "--auth-plugin", plugin, "target"])
    assert shown.exit_code == 3 and named in shown.stderr
    own = runner.invoke(app, ["-u", "http://127.0.0.1:9", "--auth-plugin", plugin, "downgrade", "status",
                              "--state", str(tmp_path / "s.json")])
    assert own.exit_code == 3 and named in own.stderr


def test_keystore_tls_is_refused(tmp_path):
    conf = tmp_path / "client.conf"
    conf.write_text("webServiceUrl=https://127.0.0.1:9\nuseKeyStoreTls=true\ntlsTrustStorePath=/x.jks\n")
    result = _list("--conf", str(conf))
    assert result.exit_code == 1 and "useKeyStoreTls" in result.stderr


def test_pulsar_home_client_conf_is_read_after_pulsar_client_conf(tmp_path):
    home = tmp_path / "pulsar"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "client.conf").write_text("webServiceUrl=http://from-pulsar-home:8080\n")
    explicit = tmp_path / "explicit.conf"
    explicit.write_text("webServiceUrl=http://from-env:8080\n")
    env = {"PULSAR_HOME": str(home), "PULSAR_CLIENT_CONF": "", "TXNADMIN_ADMIN_URL": ""}
    result = runner.invoke(app, ["target", "-o", "json"], env=env)
    assert json.loads(result.stdout)["target"] == "http://from-pulsar-home:8080"
    result = runner.invoke(app, ["target", "-o", "json"], env={**env, "PULSAR_CLIENT_CONF": str(explicit)})
    assert json.loads(result.stdout)["target"] == "http://from-env:8080"


# -- token ---------------------------------------------------------------------------------------------

def test_token_from_flags_file_json_and_client_conf(tmp_path):
    token = "tok-" + "x" * 40
    server = Server(_coordinators_if(lambda headers, peer: headers.get("Authorization") == f"Bearer {token}"))
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    (tmp_path / "token.jwt").write_text(token + "\n")
    conf = tmp_path / "client.conf"
    conf.write_text(f"webServiceUrl={server.url}\nauthPlugin={plugin}\nauthParams=file://{tmp_path / 'token.jwt'}\n")
    try:
        for args in (["--auth-plugin", plugin, "--auth-params", f"token:{token}"],
                     ["--auth-plugin", plugin, "--auth-params", f"file://{tmp_path / 'token.jwt'}"],
                     ["--auth-plugin", plugin, "--auth-params", json.dumps({"token": token})]):
            result = _list("-u", server.url, *args)
            assert result.exit_code == 0 and result.stdout.startswith("0 "), (args, result.output)
        assert _list("--conf", str(conf)).exit_code == 0
        wrong = _list("-u", server.url, "--auth-plugin", plugin, "--auth-params", "token:wrong-token-value")
        assert wrong.exit_code == 1 and "not authorized" in wrong.stderr and "wrong-token-value" not in wrong.output
        missing = _list("-u", server.url, "--auth-plugin", plugin, "--auth-params", f"file://{tmp_path / 'none'}")
        assert missing.exit_code == 1 and str(tmp_path / "none") in missing.stderr
    finally:
        server.close()
    assert all(h.get("Authorization") for _, _, h, _ in server.seen)  # an unreadable token file sends nothing
