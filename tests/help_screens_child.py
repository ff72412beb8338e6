"""Prints every command's help on this process's terminal, each after a line `@@ <command words>`: run on a
pseudo-terminal by tests/test_help_width.py, so that one process shows all of them at the terminal's own width."""

from __future__ import annotations

import sys
from typing import Any, Iterator

import typer

from txnadmin.cli.main import app


def command_paths(command: Any, path: list[str]) -> Iterator[list[str]]:
    """Every command and group below ``command``, as the words that name it (hidden aliases left out)."""
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from command_paths(sub, [*path, name])


def main() -> None:
    root = typer.main.get_command(app)  # built once (what `txnadmin` builds per run), then asked for each help
    for path in command_paths(root, []):
        print("@@ " + " ".join(path), flush=True)
        try:
            root.main(args=[*path, "-h"], prog_name="txnadmin", standalone_mode=False)
        except SystemExit:
            pass
        sys.stdout.flush()


if __name__ == "__main__":
    main()
