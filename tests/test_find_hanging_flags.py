"""find-hanging's suggested abort commands name the same target with the same flags, however it was named (-u,
--conf, $PULSAR_CLIENT_CONF, both -u and --conf), and work when run as printed."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

runner = CliRunner()
TOKEN = "hanging-flags-token-0123"
PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.fixture
def served(tmp_path):
    from txnadmin.engine.engine import Engine
    from txnadmin.engine.manage import init_engine
    from txnadmin.server.run import BackgroundServer

    init_engine(tmp_path / "e", {"transactionCoordinatorCount": "1"})
    engine = Engine(tmp_path / "e")
    server = BackgroundServer(engine, token=TOKEN).start()
    try:
        for topic in ("t1", "t2"):
            engine.produce(engine.begin(600_000), topic, b"x")
        conf = tmp_path / "client.conf"
        conf.write_text(f"webServiceUrl={server.url}\nauthPlugin={PLUGIN}\nauthParams=token:{TOKEN}\n")
        yield server.url, conf
    finally:
        server.stop()
        engine.close()


def _suggested(args, env=None):
    result = runner.invoke(app, [*args, "transactions", "find-hanging", "--max-transaction-timeout", "0"],
                           env={"COLUMNS": "400", "TXNADMIN_ADMIN_URL": "", "PULSAR_CLIENT_CONF": "", **(env or {})})
    assert result.exit_code == 1, result.output
    commands = re.findall(r"^\s*(txnadmin .*abort-transaction.*)$", result.stdout, flags=re.M)
    assert len(commands) == 2, result.stdout
    assert TOKEN not in result.output
    return commands


@pytest.mark.parametrize("how", ["--conf", "$PULSAR_CLIENT_CONF", "-u and --conf"])
def test_suggested_commands_carry_the_conf_that_named_the_target_and_run_as_printed(served, how):
    url, conf = served
    args, env = {"--conf": (["--conf", str(conf)], {}),
                 "$PULSAR_CLIENT_CONF": ([], {"PULSAR_CLIENT_CONF": str(conf)}),
                 "-u and --conf": (["-u", url, "--conf", str(conf)], {})}[how]
    first, second = _suggested(args, env)
    words = shlex.split(first)
    assert words[words.index("--conf") + 1] == str(conf), first
    assert ("-u" in words) == (how == "-u and --conf")
    # run the suggestion as printed, in a shell that has none of the environment that named the target
    done = runner.invoke(app, words[1:], env={"TXNADMIN_ADMIN_URL": "", "PULSAR_CLIENT_CONF": ""})
    assert done.exit_code == 0, done.output
    result = runner.invoke(app, [*args, "transactions", "list", "-o", "json"],
                           env={"TXNADMIN_ADMIN_URL": "", "PULSAR_CLIENT_CONF": "", **env})
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 1, result.output
