"""The screens an operator stares at (issue #26): nothing from a target is markup, no identifier or option name is
cut at 60, 80 or 200 columns, far-future timestamps render as numbers, and `downgrade wait`'s clock moves."""

from __future__ import annotations

import re

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from txnadmin.cli.main import app

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
    (["transactions", "slow-transactions", "-c", "0", "-t", "1s", "-o", "table"], ["[bold]x[/]", "orders",
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
