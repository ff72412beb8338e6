"""Errors about the target name the right cause with the right exit code (issue 34, points 3–5): a URL without a
scheme is a usage error like `-u ""`, "Error connecting to Pulsar" follows only a connection that failed, and a
web server that is not Pulsar is "cannot read the target" (exit 3) for every command."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

runner = CliRunner()


def _env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TXNADMIN_ADMIN_URL", "PULSAR_CLIENT_CONF", "PULSAR_HOME", "TXNADMIN_ENGINE_DIR")}
    env.update(TXNADMIN_HOME=str(tmp_path / "home"), HOME=str(tmp_path / "home"), COLUMNS="200")
    return env


# -- point 5: an admin URL without a scheme is a usage error, as an empty one is ------------------------------------

OWN_COMMANDS = (["doctor"], ["upgrade", "--dry-run"], ["downgrade", "status", "--state", "s.json"],
                ["downgrade", "start", "--dry-run", "--state", "s.json"], ["target"])


@pytest.mark.parametrize("args", OWN_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("url", ["localhost:8080", "", "broker:8080/admin"])
def test_an_admin_url_that_is_no_url_is_a_usage_error_in_every_own_command(tmp_path, args, url):
    result = runner.invoke(app, ["-u", url, *args], env=_env(tmp_path))
    assert result.exit_code == 2, result.output  # both before and after the command's name, the same code
    assert result.stderr.count("\n") == 1 and "http(s)://host:port or local:PATH" in result.stderr, result.stderr
    assert "Traceback" not in result.output
    after = runner.invoke(app, [*args[:1], "-u", url, *args[1:]], env=_env(tmp_path))
    assert after.exit_code == 2, after.output


# -- point 4: "Error connecting to Pulsar" only after a connection that failed ---------------------------------------

def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


@pytest.mark.parametrize("args,cause", [
    (["transactions", "abort", "--owner", "x", "--dry-run"], "needs a named target"),
    (["-u", "", "transactions", "list"], "--admin-url is empty"),
    (["-u", "localhost:8080", "transactions", "list"], "use http(s)://host:port"),
    (["--context", "nope", "transactions", "list"], "no context named 'nope'"),
    (["transactions", "list"], "cannot read the contexts file"),  # contexts.json damaged (below)
    (["transactions", "coordinators-list"], "no cluster named and no engine"),
])
def test_a_target_not_named_right_is_not_called_a_connection_error(tmp_path, args, cause):
    env = _env(tmp_path)
    if "cannot read" in cause:
        os.makedirs(env["TXNADMIN_HOME"])
        (tmp_path / "home" / "contexts.json").mkdir()  # a directory where the file belongs: it cannot be read
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 1, result.output  # pulsar-admin's code for every failure
    assert cause in result.stderr and "Error connecting" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def test_a_damaged_contexts_file_is_not_called_a_connection_error(tmp_path):
    env = _env(tmp_path)
    os.makedirs(env["TXNADMIN_HOME"])
    (tmp_path / "home" / "contexts.json").write_text("{not json")
    result = runner.invoke(app, ["transactions", "list"], env=env)
    assert result.exit_code == 1 and "contexts.json" in result.stderr, result.output
    assert "Error connecting" not in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_a_connection_refused_is_called_a_connection_error(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    result = runner.invoke(app, ["-u", url, "transactions", "coordinators-list"], env=_env(tmp_path))
    assert result.exit_code == 1, result.output
    assert "cannot connect" in result.stderr and result.stderr.endswith("\n\nError connecting to Pulsar\n"), \
        result.stderr


# -- point 3: a web server that is not Pulsar is "cannot read the target" (exit 3) for every command --------------

@pytest.fixture(scope="module")
def plain_web_server(tmp_path_factory):
    """Python's own http.server in a process of its own: answers 404 to every admin path, as any web server does."""
    import subprocess
    import sys
    import time
    import urllib.request

    root = tmp_path_factory.mktemp("www")
    port = _closed_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _checklist_for(url: str, tmp_path) -> str:
    """A checklist recorded on ``url`` when a broker answered there (an engine's, with the URL rewritten): the
    server on that port is no broker now."""
    import json

    engine, state = tmp_path / "e", tmp_path / "recorded.json"
    env = _env(tmp_path)
    assert runner.invoke(app, ["engine", "init", str(engine), "-c", "1"], env=env).exit_code == 0
    started = runner.invoke(app, ["-u", f"local:{engine}", "downgrade", "start", "--yes", "--state", str(state)],
                            env=env)
    assert started.exit_code == 0, started.output
    from txnadmin.procedures.downgrade.checklist import load_state, save_state

    data = json.loads(json.dumps(load_state(state)).replace(f"local:{engine}", url))
    assert data["identity"]["adminUrl"] == url
    save_state(state, data)  # with its digest, as txnadmin writes it
    return str(state)


@pytest.mark.parametrize("args", [
    ["downgrade", "start", "--dry-run", "--state", "{new}"],
    ["downgrade", "start", "--yes", "--state", "{new}"],
    ["downgrade", "status", "--state", "{new}"],
    ["downgrade", "status", "--state", "{recorded}"],
    ["downgrade", "wait", "--state", "{recorded}", "--timeout", "5", "--interval", "1"],
    ["downgrade", "wait", "--state", "{new}", "--timeout", "5", "--interval", "1"],
    ["doctor"],
    ["upgrade", "--dry-run"],
    ["upgrade", "--preflight", "--to", "4.2.5"],
], ids=["start --dry-run", "start --yes", "status, no checklist", "status", "wait", "wait, no checklist", "doctor", "upgrade",
        "upgrade --preflight"])
def test_a_web_server_that_is_not_pulsar_cannot_be_read_whatever_the_command(plain_web_server, tmp_path, args):
    env = _env(tmp_path)
    fill = {"new": str(tmp_path / "new.json")}
    if "{recorded}" in args:
        fill["recorded"] = _checklist_for(plain_web_server, tmp_path)
    argv = [a.format(**fill) for a in args]
    result = runner.invoke(app, ["-u", plain_web_server, *argv], env=env)
    assert result.exit_code == 3, result.output
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "cannot read the target" in error[0], result.stderr
    assert "--debug" not in result.stderr and "Traceback" not in result.output  # an answer, not a bug of ours
    assert "recorded on another target" not in result.stderr
    assert not (tmp_path / "new.json").exists()
