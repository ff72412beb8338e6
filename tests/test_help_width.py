"""Every help screen fits the terminal it is shown on (issue 34, point 6): each command's `-h`, on a real
pseudo-terminal of 60 and of 80 columns, draws no line wider than the terminal and still shows every option whole.

One process per width shows every help screen (tests/help_screens_child.py), so the whole tree is checked in a few
seconds; the width comes from the terminal itself (TIOCSWINSZ), as an operator's does, not from $COLUMNS."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import typer
from rich.cells import cell_len

from txnadmin.cli.main import app

from help_screens_child import command_paths
from pty_helpers import run_on_terminal

CHILD = Path(__file__).resolve().parent / "help_screens_child.py"
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _screens(columns: int, tmp_path) -> dict[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")}
    env["TXNADMIN_HOME"] = str(tmp_path / "home")
    code, out = run_on_terminal([sys.executable, str(CHILD)], env, size=(40, columns))
    assert code == 0, out.decode(errors="replace")[-2000:]
    screens: dict[str, list[str]] = {}
    current = None
    for line in ESCAPES.sub("", out.decode()).replace("\r", "").split("\n"):
        if line.startswith("@@"):
            current = line[3:]
            screens[current] = []
        elif current is not None:
            screens[current].append(line)
    return screens


@pytest.mark.parametrize("columns", [60, 80])
def test_every_help_screen_fits_the_terminal_and_shows_every_option_whole(columns, tmp_path):
    root = typer.main.get_command(app)
    commands = {" ".join(path): path for path in command_paths(root, [])}
    screens = _screens(columns, tmp_path)
    assert set(screens) == set(commands)  # every command was shown, none failed to
    too_wide = {name: max(cell_len(line) for line in lines) for name, lines in screens.items()
                if any(cell_len(line) > columns for line in lines)}
    assert not too_wide, too_wide
    for name, path in commands.items():
        text = "\n".join(screens[name])
        assert "Usage:" in text and "Traceback" not in text, (name, text)
        command = root
        for word in path:
            command = command.commands[word]  # type: ignore[attr-defined]  # a group here: the path came from it
        for param in command.params:
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("-"):
                    assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), (name, opt)  # whole, not cut
