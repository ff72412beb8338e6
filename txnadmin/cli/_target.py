"""Target options shared by commands that talk to a Pulsar or an engine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

AdminUrl = typer.Option(None, "--admin-url", "-u", help="http(s)://host:port or local:PATH (engine directory).")
Conf = typer.Option(None, "--conf", help="A Pulsar client.conf (webServiceUrl, authPlugin, authParams, TLS).")


def admin_for(admin_url: Optional[str], conf: Optional[Path]):
    """Resolve and open the target; one-line error and exit 3 when it cannot be reached."""
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import open_admin, resolve_target
    from ._common import EXIT_UNREADABLE, fail

    try:
        target = resolve_target(admin_url, conf)
        return target, open_admin(target)
    except TargetUnreachableError as exc:
        fail(exc.reason, EXIT_UNREADABLE)
