"""`txnadmin inspect`: look inside single entries."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Optional

import typer

from ._common import EXIT_FAILURE, EXIT_UNREADABLE, EXIT_USAGE, fail, print_json

app = typer.Typer(help="Decode transaction-log and pending-ack entries.", no_args_is_help=True)


@app.command("entry")
def entry(
    file: Optional[Path] = typer.Argument(None, help="Binary file holding exactly one entry payload."),
    hex_: Optional[str] = typer.Option(None, "--hex", help="The entry as hex (spaces and colons ignored)."),
    base64_: Optional[str] = typer.Option(None, "--base64", help="The entry as base64."),
    kind: str = typer.Option("auto", "--kind", help="txn-log, pending-ack or auto."),
) -> None:
    """Decode one entry and print its form, version, kind and records as JSON.

    Exit 0 on success, 1 with a one-line reason when the entry is malformed.
    """
    given = [x for x in (file, hex_, base64_) if x is not None]
    if len(given) != 1:
        fail("give exactly one of FILE, --hex or --base64", EXIT_USAGE)
    if kind not in ("auto", "txn-log", "pending-ack"):
        fail(f"--kind {kind!r}: use txn-log, pending-ack or auto", EXIT_USAGE)
    data = _read_input(file, hex_, base64_)
    from ..codec import EntryDecodeError, decode_entry  # protobuf: only this command needs it at start-up

    try:
        decoded = decode_entry(data, kind)
    except EntryDecodeError as exc:
        fail(f"malformed entry: {exc}", EXIT_FAILURE)
    print_json(decoded.to_json())


def _read_input(file: Optional[Path], hex_: Optional[str], base64_: Optional[str]) -> bytes:
    if hex_ is not None:
        cleaned = "".join(hex_.split()).replace(":", "")
        if cleaned.lower().startswith("0x"):
            cleaned = cleaned[2:]
        try:
            return bytes.fromhex(cleaned)
        except ValueError:
            fail("--hex: not a hex string (expected pairs of 0-9a-f)", EXIT_USAGE)
    if base64_ is not None:
        try:
            return base64.b64decode(base64_, validate=True)
        except (binascii.Error, ValueError):
            fail("--base64: not valid base64", EXIT_USAGE)
    assert file is not None
    try:
        return file.read_bytes()
    except OSError as exc:
        fail(f"{file}: cannot read ({exc.strerror or exc})", EXIT_UNREADABLE)
