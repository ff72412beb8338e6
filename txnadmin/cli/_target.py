"""Target options shared by commands that talk to a Pulsar or an engine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

AdminUrl = typer.Option(None, "--admin-url", "-u", help="http(s)://host:port or local:PATH (engine directory).")
Conf = typer.Option(None, "--conf", help="A Pulsar client.conf (webServiceUrl, authPlugin, authParams, TLS).")


def admin_for(ctx: typer.Context, admin_url: Optional[str], conf: Optional[Path]):
    """Resolve and open the target (this command's -u/--conf, else the root options); exit 3 when unreachable."""
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import open_admin, resolve_target
    from ._common import EXIT_UNREADABLE, fail

    opts = ctx.find_root().obj or {}
    try:
        target = resolve_target(admin_url or opts.get("admin_url"), conf or opts.get("conf"), opts.get("auth_plugin"),
                                opts.get("auth_params"), opts.get("tls"))
        return target, open_admin(target)
    except TargetUnreachableError as exc:
        fail(exc.reason, EXIT_UNREADABLE)
