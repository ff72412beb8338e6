"""The screens an operator stares at (issue #26): nothing from a target is markup, no identifier or option name is
cut at 60, 80 or 200 columns, far-future timestamps render as numbers, and `downgrade wait`'s clock moves."""

from __future__ import annotations

import re

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from txnadmin.cli.main import app
from pty_helpers import run_on_terminal

runner = CliRunner()
WIDTHS = ("60", "80", "200")


def _commands(command, path):
    yield path, command
    for name, sub in sorted((getattr(command, "commands", {}) or {}).items()):
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, path + [name])


def _help_is_whole(path: list[str], command, columns: str) -> None:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": columns, "NO_COLOR": "1"})
    assert result.exit_code == 0, (path, result.output)
    assert not re.search(r"…\s*(│|$)", result.output, re.M), (path, columns, result.output)  # rich's cut
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("--"):
                assert name in result.output, (path, columns, name)


def _find(path: list[str]):
    command = get_command(app)
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("columns", WIDTHS)
def test_help_never_cuts_an_option_name_or_a_word(columns):
    for path in ([], ["engine", "run"], ["doctor"], ["transactions", "transaction-in-pending-ack-stats"]):
        _help_is_whole(path, _find(path), columns)
    engine_run = runner.invoke(app, ["engine", "run", "--help"], env={"COLUMNS": columns})
    assert "stall-buffer-recovery[=TOPIC]" in engine_run.output


@pytest.mark.slow
def test_no_help_screen_cuts_anything_at_60_columns():
    for path, command in _commands(get_command(app), []):
        _help_is_whole(path, command, "60")


def test_help_prose_has_no_hard_line_breaks():
    wait = runner.invoke(app, ["downgrade", "wait", "--help"], env={"COLUMNS": "200"}).output
    assert "every active broker (every 2 s): a store reopened" in wait  # a source line break is not a screen's


# -- strings and numbers from a target ------------------------------------------------------------------------

INT64_MAX = 2**63 - 1  # a timestamp past the year 9999: a number, not a crash


@pytest.fixture
def hostile(monkeypatch, tmp_path):
    """A broker stand-in (HttpAdmin's own HTTP code) whose strings look like rich markup and whose clocks overflow."""
    from broker_standin import BrokerStandIn, open_transaction

    standin = BrokerStandIn()
    topic = "persistent://public/default/orders"
    standin.state["topics"][topic]["subscriptions"]["[/]"] = {"state": "[red]Ready[/]", "ongoingTxnSize": 0,
                                                              "recoverStartTime": INT64_MAX, "recoverEndTime": -1}
    standin.state["coordinators"][0]["recoverStartTime"] = INT64_MAX
    open_transaction(standin.state, "(0,5)", 20 * 60_000, 60_000, produced=[topic], owner="[bold]x[/]")
    open_transaction(standin.state, "(0,6)", standin.state["now"] - INT64_MAX, 60_000, owner="[/]")
    monkeypatch.setattr("txnadmin.admin.target.open_admin", lambda target: standin.admin())
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    return ["-u", standin.base]


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("command, shown", [
    (["transactions", "list"], ["(0,5)", "[bold]x[/]"]),
    (["transactions", "list", "-o", "wide"], ["(0,5)", "[bold]x[/]", "(0,6)", str(INT64_MAX)]),
    (["transactions", "slow-transactions", "-c", "0", "-t", "1s", "-o", "wide"], ["[bold]x[/]", "(0,5)",
                                                                                 str(INT64_MAX)]),
    (["transactions", "coordinator-stats", "-c", "0", "-o", "table"], [str(INT64_MAX)]),
    (["transactions", "pending-ack-stats", "-t", "orders", "-s", "[/]", "-o", "table"], ["[red]Ready[/]",
                                                                                      str(INT64_MAX)]),
])
def test_target_strings_are_printed_as_they_are_and_far_future_times_as_numbers(hostile, command, shown, columns):
    result = runner.invoke(app, [*hostile, *command], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "out of range" not in result.output
    for text in shown:
        assert text in result.stdout, (text, result.stdout)


def test_doctor_shows_a_target_owner_as_written(hostile):
    result = runner.invoke(app, [*hostile, "doctor", "--only", "stuck-transactions"], env={"COLUMNS": "80"})
    assert result.exit_code == 1 and "(0,5)" in result.stdout, result.output
    assert "MarkupError" not in result.output and "Traceback" not in result.output


def test_control_characters_from_a_target_are_shown_not_sent_to_the_terminal(monkeypatch, tmp_path):
    from broker_standin import BrokerStandIn, open_transaction

    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,7)", 60_000, 600_000, owner="ev\x1b[2Jil\nnext")
    monkeypatch.setattr("txnadmin.admin.target.open_admin", lambda target: standin.admin())
    result = runner.invoke(app, ["-u", standin.base, "transactions", "list"])
    assert result.exit_code == 0 and "\x1b" not in result.stdout
    assert "ev\\x1b[2Jil\\x0anext" in result.stdout  # one line, the escape shown, not obeyed


# -- tables at 60, 80 and 200 columns --------------------------------------------------------------------------

LONG_TOPIC = "a-topic-name-long-enough-to-fill-most-of-a-narrow-terminal-on-its-own"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """An engine that batched (pending-ack stores on txn-topic-N/sub-N), its downgrade recorded, two open
    transactions (one on a long topic name), and its dump."""
    import os

    home = tmp_path_factory.mktemp("screens")
    directory, state = home / "engine", home / "state.json"
    env = {"TXNADMIN_HOME": str(home / "home"), "TXNADMIN_ENGINE_DIR": ""}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        steps = [["engine", "init", str(directory), "-c", "2", "--set", "transactionLogBatchedWriteEnabled=true",
                  "--set", "transactionPendingAckBatchedWriteEnabled=true"],
                 ["engine", "run", str(directory), "--duration", "1", "--topics", "2", "-o", "json"],
                 ["-u", f"local:{directory}", "downgrade", "start", "--yes", "--state", str(state)],
                 ["engine", "txn", "begin", "--dir", str(directory), "--produce", f"{LONG_TOPIC}=x",
                  "--owner", "an-owner-whose-name-is-also-rather-long-for-a-column"],
                 ["engine", "txn", "begin", "--dir", str(directory), "--produce", "t1=y"],
                 ["engine", "dump", str(directory), "--out", str(home / "dump")]]
        for step in steps:
            result = runner.invoke(app, step)
            assert result.exit_code == 0, (step, result.output)
        yield {"target": ["-u", f"local:{directory}"], "state": str(state), "dump": str(home / "dump")}
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def _lines(result) -> list[str]:
    return result.stdout.splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("columns", WIDTHS)
def test_no_table_cuts_an_identifier(recorded, columns):
    import json

    env = {"COLUMNS": columns}
    target, state = recorded["target"], recorded["state"]
    listed = runner.invoke(app, [*target, "transactions", "list", "-o", "json"])
    txn_ids = [row["txnId"] for row in json.loads(listed.stdout)]
    assert len(txn_ids) == 2
    table = runner.invoke(app, [*target, "transactions", "list"], env=env)
    hanging = runner.invoke(app, [*target, "transactions", "find-hanging", "--max-transaction-timeout", "0"], env=env)
    for result in (table, hanging):
        for txn in txn_ids:
            assert any(line.startswith(txn + " ") for line in _lines(result)), result.stdout  # one row, id whole
        assert "an-owner-whose-name-is-also-rather-long-for-a-column" in result.stdout
    commands = [line.strip() for line in _lines(hanging) if "abort-transaction" in line]
    assert [c.rsplit(" ", 1)[1] for c in commands] == [f"'{t}'" for t in txn_ids]  # each under its row, whole
    wide = runner.invoke(app, [*target, "transactions", "list", "-o", "wide"], env=env)
    assert "OPENED (UTC)" in wide.stdout and "OPENED" not in table.stdout
    bare = runner.invoke(app, [*target, "transactions", "list", "--no-headers"], env=env)
    assert [line.split()[0] for line in _lines(bare)] == txn_ids  # rows only: for grep and awk

    stats = runner.invoke(app, [*target, "transactions", "coordinator-stats", "-o", "table"], env=env)
    assert [line.split()[:2] for line in _lines(stats)[1:]] == [["0", "Ready"], ["1", "Ready"]]

    status = runner.invoke(app, [*target, "downgrade", "status", "--state", state], env=env)
    assert status.exit_code in (0, 1), status.output
    stores = json.loads(open(state).read())["pendingAckStores"]
    assert stores
    for info in stores.values():
        topic, sub = info["topic"].removeprefix("persistent://"), info["subscription"]
        assert any(line.split()[:2] == [topic, sub] for line in _lines(status)), status.stdout
    assert "persistent://" not in status.stdout and "__transaction_pending_ack" not in status.stdout
    for tc in ("__transaction_log_0", "__transaction_log_1"):
        assert any(line.startswith(tc + " ") for line in _lines(status))
    notes = [line for line in _lines(status) if line.startswith("    ")]
    commands = [line.strip() for line in notes if line.lstrip().startswith("txnadmin ")]  # on lines of their own
    reasons = [line for line in notes if not line.lstrip().startswith("txnadmin ")]
    assert reasons and all(len(line) <= 160 for line in reasons)  # a reason wraps over 2 lines at 80 columns at most
    assert commands and all(f"--state {state}" in c for c in commands if " downgrade " in c), notes
    status_wide = runner.invoke(app, [*target, "downgrade", "status", "--state", state, "-o", "wide"], env=env)
    assert all(name in status_wide.stdout for name in stores)  # the full store names, with -o wide
    as_json = runner.invoke(app, [*target, "downgrade", "status", "--state", state, "-o", "json"])
    assert {log["name"] for log in json.loads(as_json.stdout)["components"]} >= set(stores)

    scan = runner.invoke(app, ["scan", recorded["dump"], "--ledgers", f"{recorded['dump']}/ledgers.txt", "--engine",
                                "python"], env=env)
    assert "pulsar/system/persistent/__transaction_log_0 " in scan.stdout, scan.output
    assert "…" not in scan.stdout and "…" not in status.stdout and "…" not in table.stdout


@pytest.mark.slow
def test_on_a_real_60_column_terminal_help_and_tables_cut_nothing(hostile_engine):
    """The width comes from the terminal itself (TIOCSWINSZ), not from $COLUMNS."""
    import os
    import sys

    def on_terminal(args: list[str]) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")}
        _, out = run_on_terminal([sys.executable, "-m", "txnadmin.cli.main", *args], dict(env, TERM="xterm"),
                                 size=(40, 60), wait_s=60)
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode("utf-8", "replace")).replace("\r", "")

    helped = on_terminal(["--help"])
    assert "--tls-enable-hostname-verification" in helped and "AuthenticationToken" in helped \
        and "org.apache.pulsar.client.impl.auth.…" in helped, helped  # every help screen: tests/test_help_width.py
    listed = on_terminal([*hostile_engine, "transactions", "list"])
    assert "[bold]x[/]" in listed and re.search(r"^\(0,0\) ", listed, re.M), listed


@pytest.fixture
def hostile_engine(tmp_path, monkeypatch):
    directory = tmp_path / "engine"
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    assert runner.invoke(app, ["engine", "init", str(directory), "-c", "1"]).exit_code == 0
    begun = runner.invoke(app, ["engine", "txn", "begin", "--dir", str(directory), "--owner", "[bold]x[/]",
                                "--produce", f"{LONG_TOPIC}=x"])
    assert begun.exit_code == 0, begun.output
    return ["-u", f"local:{directory}"]
