"""Small helpers every command uses: JSON printing, one-line errors, exit codes."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

# Exit codes of txnadmin's own commands (docs/exit-codes.md). `transactions` keeps pulsar-admin's 0/1.
EXIT_OK = 0
EXIT_FAILURE = 1  # failure, or "not yet" (waiting, batched entries remain)
EXIT_USAGE = 2
EXIT_UNREADABLE = 3  # target or input unreadable


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print a one-line error to stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()
