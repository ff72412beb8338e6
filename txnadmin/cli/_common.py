"""Small helpers every command uses: JSON printing, one-line errors, exit codes."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, NoReturn

import typer

# Exit codes of txnadmin's own commands (docs/exit-codes.md). `transactions` keeps pulsar-admin's 0/1.
EXIT_OK = 0
EXIT_FAILURE = 1  # failure, or "not yet" (waiting, batched entries remain)
EXIT_USAGE = 2
EXIT_UNREADABLE = 3  # target or input unreadable
EXIT_INTERRUPTED = 130  # Ctrl-C


def print_json(value: Any) -> None:
    """A command's machine-readable document: JSON, or YAML when the command was run with -o yaml."""
    from ..admin.auth import mask_value
    from .render import machine_yaml, to_yaml

    value = mask_value(value)  # documents carry what servers answered: never a credential of ours
    typer.echo(to_yaml(value) if machine_yaml() else json.dumps(value, indent=2))


def fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """Print a one-line error to stderr (secrets masked) and exit with ``code``."""
    from ..admin.auth import mask

    typer.echo(mask(f"error: {message}"), err=True)
    raise typer.Exit(code)


def debug_requested(ctx: Any) -> bool:
    """The operator asked for tracebacks of unexpected failures: the root's --debug, or TXNADMIN_DEBUG set."""
    root = ctx.find_root() if ctx is not None else None
    return bool(root is not None and root.params.get("debug")) or os.environ.get("TXNADMIN_DEBUG", "") not in ("", "0")


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


JAVA_LONG = (-(2 ** 63), 2 ** 63 - 1)  # a TxnID is two Java longs
_PAIR = r"(?P<most{n}>[+-]?\d{{1,20}})\s*[,:]\s*(?P<least{n}>[+-]?\d{{1,20}})"


def parse_txn_id(text: str) -> tuple[int, int]:
    """A TxnID as operators paste it: ``(1,42)`` as Pulsar prints it, ``1,42``, ``1:42``, ``TxnID(1,42)``.

    Raises ValueError with the one-line message to show.
    """
    import re

    pattern = r"\s*(?:TxnID\s*)?(?:\(\s*" + _PAIR.format(n=1) + r"\s*\)|" + _PAIR.format(n=2) + r")\s*"
    m = re.fullmatch(pattern, text, flags=re.IGNORECASE | re.ASCII)
    shown = " ".join(text.split())[:60]
    if not m:
        raise ValueError(f"--txn-id {shown!r}: expected mostSigBits,leastSigBits as (1,42), 1,42, 1:42 or TxnID(1,42)")
    most, least = (int(m.group("most1") or m.group("most2")), int(m.group("least1") or m.group("least2")))
    for name, value in (("mostSigBits", most), ("leastSigBits", least)):
        if not JAVA_LONG[0] <= value <= JAVA_LONG[1]:
            raise ValueError(f"--txn-id {shown!r}: {name} is outside a Java long's range")
    return most, least


def txn_id_from(most: "int | None", least: "int | None", txn_id: "str | None") -> tuple[int, int]:
    """-m/-l, or --txn-id in any form :func:`parse_txn_id` reads: exactly one of the two ways.

    Raises ValueError with the message to show.
    """
    if txn_id is not None:
        if most is not None or least is not None:
            raise ValueError("give either --txn-id or -m/-l, not both")
        return parse_txn_id(txn_id)
    if most is None or least is None:
        raise ValueError("Missing required option: give --most-sig-bits/-m and --least-sig-bits/-l, or --txn-id")
    return most, least


def waiting_notice(admin: Any, where: str):
    """On a terminal, a spinner appears once a call has waited a second, naming the call and the target; silent
    when piped (scripts) and for fast answers (people should not see it flash)."""
    import contextlib
    import sys
    import threading

    if not sys.stderr.isatty():
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def spinner():
        from rich.console import Console

        done = threading.Event()

        def show():
            if done.wait(1.0):
                return
            def text() -> str:
                from rich.markup import escape

                call = getattr(admin, "in_flight", None) or "the target"
                return escape(f"waiting for {call} on {where} (Ctrl-C to give up)")  # a topic or URL, not markup

            with Console(stderr=True).status(text(), spinner="dots") as status:
                while not done.wait(0.25):  # a command of several calls: name the one waiting now
                    status.update(text())

        thread = threading.Thread(target=show, name="txnadmin-spinner", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=1)

    return spinner()
