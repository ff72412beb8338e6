"""`txnadmin serve` does with tokens what its help and startup line say: --token-file's token, else a generated one
recorded in server.json; every request without it is refused (401, Pulsar's error shape)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.server.run import free_port, wait_until_listening

V3 = "/admin/v3/transactions"


@pytest.fixture
def engine_dir(tmp_path):
    assert CliRunner().invoke(app, ["engine", "init", str(tmp_path / "engine"), "-c", "1"]).exit_code == 0
    return tmp_path / "engine"


def _serve(engine_dir, home, *extra):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "txnadmin", "serve", "--engine-dir", str(engine_dir), "--port",
                             str(port), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TXNADMIN_HOME=str(home)))
    wait_until_listening(port, proc, timeout_s=60)
    return proc, f"http://127.0.0.1:{port}"


def _get(url, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.get(f"{url}{V3}/coordinators", headers=headers, timeout=10)


@pytest.mark.parametrize("from_file", [True, False], ids=["--token-file", "generated"])
def test_serve_says_which_token_it_needs_and_requires_exactly_that(engine_dir, tmp_path, from_file):
    token_file = tmp_path / "token"
    token_file.write_text("file-token-0123456789\n")
    proc, url = _serve(engine_dir, tmp_path / "home", *(["--token-file", str(token_file)] if from_file else []))
    try:
        line = proc.stdout.readline()
        recorded = json.loads((engine_dir / "server.json").read_text())
        token = recorded["token"]
        assert (token == "file-token-0123456789") == from_file
        assert "Authorization: Bearer <token>" in line and str(engine_dir / "server.json") in line
        assert (f"the token in {token_file}" if from_file else "a token generated now") in line, line
        assert token not in line  # the startup line names where the token is, never the token itself
        assert _get(url, token).status_code == 200
        for wrong in (None, "not-the-token"):
            refused = _get(url, wrong)
            assert refused.status_code == 401 and "reason" in refused.json()
        listed = CliRunner().invoke(app, ["-u", f"local:{engine_dir}", "transactions", "coordinators-list"])
        assert listed.exit_code == 0 and listed.stdout.split()[0] == "0"  # local: finds the token in server.json
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert not (engine_dir / "server.json").exists()


def test_serve_help_says_what_it_does_with_tokens():
    helped = CliRunner().invoke(app, ["serve", "-h"], env={"COLUMNS": "200"})
    assert helped.exit_code == 0
    assert "--token-file" in helped.stdout and "generated" in helped.stdout and "server.json" in helped.stdout


def test_serve_acts_on_the_engine_named_by_the_global_local_target(engine_dir, tmp_path, monkeypatch):
    """`txnadmin -u local:DIR serve` serves DIR, not the default engine beside it, and says so; a disagreeing
    --engine-dir or a remote -u is refused (exit 2) before anything listens."""
    default = tmp_path / "default-engine"
    monkeypatch.setenv("TXNADMIN_ENGINE_DIR", str(default))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "txnadmin", "-u", f"local:{engine_dir}", "serve", "--port",
                             str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TXNADMIN_HOME=str(tmp_path / "home")))
    try:
        wait_until_listening(port, proc, timeout_s=60)
        line = proc.stdout.readline()
        assert line.startswith(f"serving {engine_dir} (-u) at http://127.0.0.1:{port}"), line
        assert (engine_dir / "server.json").exists() and not default.exists()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    other = tmp_path / "other"
    refused = CliRunner().invoke(app, ["-u", f"local:{engine_dir}", "serve", "--engine-dir", str(other), "--port",
                                       "0"])
    assert refused.exit_code == 2 and "name different engines" in refused.stderr and not other.exists()
    remote = CliRunner().invoke(app, ["-u", "http://127.0.0.1:9", "serve", "--port", "0"])
    assert remote.exit_code == 2 and "local:PATH" in remote.stderr and not default.exists()
