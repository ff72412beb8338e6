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
