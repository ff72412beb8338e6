"""`txnadmin serve`: the embedded engine over Pulsar's admin REST paths (and /metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ._common import EXIT_UNREADABLE, EXIT_USAGE, fail
from ._target import engine_dir_for


def serve(
    ctx: typer.Context,
    engine_dir: Optional[Path] = typer.Option(None, "--engine-dir", help="Engine directory (or the global -u local:PATH; default: the embedded one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8080, "--port", help="Port (0 = any free port)."),
    token_file: Optional[Path] = typer.Option(
        None, "--token-file", help="Require `Authorization: Bearer <this file's token>` (default: a generated token)."),
) -> None:
    """Serve /admin/v3/transactions/…, the /admin/v2 calls txnadmin needs, and /metrics until Ctrl-C.

    Every request needs `Authorization: Bearer <token>`: the token in --token-file, or else one generated at start.
    Either way it is written to <engine-dir>/server.json (mode 600), where `txnadmin -u local:<engine-dir>` finds
    it; other clients pass it with `--auth-params token:<token>` (or `file://…`).
    """
    from ..admin.protocol import TargetUnreachableError
    from ..server.cluster import serve_engine

    from ._target import unopened

    token = None
    if token_file:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            fail(f"{token_file}: cannot read token ({exc.strerror or exc})", EXIT_USAGE)
        if not token:
            fail(f"{token_file}: empty token", EXIT_USAGE)
    # The engine the operator named with -u local:PATH, not the default one beside it (never act on an unnamed target).
    directory, why = engine_dir_for(ctx, engine_dir, "serve", "--engine-dir")
    source = f"the token in {token_file}" if token_file else "a token generated now"

    def ready(url: str) -> None:
        typer.echo(f"serving {directory} ({why}) at {url}; requests need `Authorization: Bearer <token>` with {source}, "
                   f"recorded in {directory / 'server.json'} (local:{directory} commands use it)")

    from ..engine.config import ConfigError

    try:
        serve_engine(directory, host, port, token, on_ready=ready)
    except TargetUnreachableError as exc:
        fail(unopened(ctx, exc).reason, EXIT_UNREADABLE)
    except ConfigError as exc:  # engine.conf unreadable before the engine opens (the broker count is read first)
        fail(f"{directory}: {str(exc).strip()}", EXIT_UNREADABLE)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
