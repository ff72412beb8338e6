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
