"""The engine commands in one form: a directory held by another process is named once with the command that works
meanwhile; `engine set` takes DIR and NAME=VALUE as `engine init` does (and NAME VALUE still); `target` does not
report a missing default engine as a target in working order."""

from __future__ import annotations

import json
import shlex
import subprocess

from typer.testing import CliRunner

from txnadmin.cli.main import app

from serve_helpers import serving

runner = CliRunner()


def _init(directory, **env) -> None:
    made = runner.invoke(app, ["engine", "init", str(directory), "-c", "1"], env=env or None)
    assert made.exit_code == 0, made.output


def test_a_second_writer_names_the_directory_once_and_a_command_that_works_meanwhile(tmp_path):
    directory = tmp_path / "eng"
    _init(directory)
    with serving(directory, tmp_path / "home"):
        for args in (["engine", "run", str(directory), "--duration", "1"],
                     ["engine", "txn", "begin", "--dir", str(directory)]):
            refused = runner.invoke(app, args)
            assert refused.exit_code == 3, refused.output
            line = refused.stderr.strip()
            assert "\n" not in line and line.count(str(directory)) == 3, line  # the directory, then -u twice
            assert line.startswith(f"error: {directory}: already open for writing by process ")
            assert "open read-only" not in line  # no read-only view opens beside a writer
            pasted = line.split("`")[1]
            assert pasted == f"txnadmin -u {shlex.quote(f'local:{directory}')} transactions list"
            done = subprocess.run(["bash", "-c", pasted.replace("txnadmin ", f"{_python()} -m txnadmin ", 1)],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and "0 open transactions" in done.stdout, done.stderr


def test_a_writer_without_a_server_is_named_without_offering_one(tmp_path):
    from txnadmin.engine.engine import Engine

    directory = tmp_path / "eng"
    _init(directory)
    held = Engine(directory, maintenance=False)  # another writer, with no admin API to go through
    try:
        refused = runner.invoke(app, ["engine", "run", str(directory), "--duration", "1"])
    finally:
        held.close()
    assert refused.exit_code == 3
    import os

    assert refused.stderr == (f"error: {directory}: already open for writing by process {os.getpid()}; stop it, or "
                              "wait for it to end\n")


def _python() -> str:
    import sys

    return shlex.quote(sys.executable)


def test_engine_set_takes_dir_and_name_equals_value_as_init_does(tmp_path, monkeypatch):
    monkeypatch.setenv("TXNADMIN_ENGINE_DIR", str(tmp_path / "no-engine-here"))  # the default is never consulted
    directory = tmp_path / "eng"
    _init(directory)
    stored = directory / "dynamic-config.json"

    def dynamic(*args: str) -> dict:
        result = runner.invoke(app, ["engine", "set", *args])
        assert result.exit_code == 0, (args, result.output)
        return json.loads(result.stdout)

    assert dynamic(str(directory), "transactionLogBatchedWriteEnabled=true") == {
        "transactionLogBatchedWriteEnabled": "true"}
    assert dynamic(str(directory), "transactionLogBatchedWriteEnabled=false",
                   "transactionPendingAckBatchedWriteEnabled=true") == {
        "transactionLogBatchedWriteEnabled": "false", "transactionPendingAckBatchedWriteEnabled": "true"}
    assert dynamic("transactionLogBatchedWriteEnabled", "true", "--dir", str(directory))[
        "transactionLogBatchedWriteEnabled"] == "true"  # NAME VALUE as before
    assert dynamic(str(directory), "transactionPendingAckBatchedWriteEnabled", "false")[
        "transactionPendingAckBatchedWriteEnabled"] == "false"
    assert dynamic("transactionLogBatchedWriteEnabled=false", "--dir", str(directory))[
        "transactionLogBatchedWriteEnabled"] == "false"
    before = stored.read_bytes()
    for args, says in (([str(directory), "transactionLogBatchedWriteEnabled=true",
                         "transactionPendingAckBatchedWriteEnabled=maybe"], "'maybe' is not a valid bool"),
                       ([str(directory), "transactionLogBatchedWriteEnable=true"], "did you mean"),
                       (["transactionLogBatchedWriteEnabled=true", str(directory)], "directory comes first"),
                       ([str(directory), "a", "b", "c"], "give [DIR] NAME=VALUE"),
                       ([str(directory), "transactionLogBatchedWriteEnabled=true", "--dir", str(tmp_path / "x")],
                        "name different engines")):
        refused = runner.invoke(app, ["engine", "set", *args])
        assert refused.exit_code == 2 and says in refused.stderr, (args, refused.output)
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.output
    assert stored.read_bytes() == before  # nothing half-written: the good setting beside a bad one was not stored
    nowhere = runner.invoke(app, ["engine", "set", "transactionLogBatchedWriteEnabled=true"])
    assert nowhere.exit_code == 3 and str(tmp_path / "no-engine-here") in nowhere.stderr


def test_target_with_no_engine_at_the_default_place_says_so_and_exits_3(tmp_path):
    import os

    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items()
           if k not in ("TXNADMIN_ADMIN_URL", "PULSAR_CLIENT_CONF", "PULSAR_HOME", "TXNADMIN_ENGINE_DIR")}
    env.update(TXNADMIN_HOME=str(home), HOME=str(tmp_path))
    engine = tmp_path / ".txnadmin" / "engine"  # the embedded default under HOME
    missing = runner.invoke(app, ["target"], env=env)
    assert missing.exit_code == 3, missing.output
    assert f"target: local:{engine}" in missing.stdout and f"engine: MISSING: no engine at {engine}" in missing.stdout
    line = missing.stderr.strip()
    assert "\n" not in line and f"no engine at {engine}" in line and f"txnadmin engine init {engine}" in line
    assert "-u http(s)://host:port" in line  # naming a cluster first: what an operator there most likely meant
    document = runner.invoke(app, ["target", "-o", "json"], env=env)
    assert document.exit_code == 3 and json.loads(document.stdout)["engine"] == f"MISSING: no engine at {engine}"
    named = runner.invoke(app, ["-u", f"local:{tmp_path / 'elsewhere'}", "target"], env=env)
    assert named.exit_code == 3 and "txnadmin engine init" in named.stderr
    _init(engine, **env)
    present = runner.invoke(app, ["target"], env=env)
    assert present.exit_code == 0 and "engine:" not in present.stdout, present.output
