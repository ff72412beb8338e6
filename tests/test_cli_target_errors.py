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
