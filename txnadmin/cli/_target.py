"""Target options shared by commands that talk to a Pulsar or an engine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

AdminUrl = typer.Option(None, "--admin-url", "-u", help="http(s)://host:port or local:PATH (engine directory).")
Conf = typer.Option(None, "--conf", help="A Pulsar client.conf (webServiceUrl, authPlugin, authParams, TLS).")


def resolve_for(ctx: typer.Context, admin_url: Optional[str], conf: Optional[Path], require_named: str = ""):
    """The target of this command (its -u/--conf, else the root options), without opening it.

    ``require_named`` (a command name such as "downgrade start") refuses the embedded default unless the
    operator named it. Exit 2 on usage errors (``-u ""``, nothing named), 3 when a client.conf is unreadable.
    """
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import TargetUsageError, require_named as _require, resolve_target
    from ._common import EXIT_UNREADABLE, EXIT_USAGE, fail

    opts = ctx.find_root().obj or {}
    try:
        target = resolve_target(admin_url if admin_url is not None else opts.get("admin_url"),
                                conf or opts.get("conf"), opts.get("auth_plugin"), opts.get("auth_params"),
                                opts.get("tls"))
        if require_named:
            _require(target, require_named)
        return target
    except TargetUsageError as exc:
        fail(exc.reason, EXIT_USAGE)
    except TargetUnreachableError as exc:
        fail(exc.reason, EXIT_UNREADABLE)


def admin_for(ctx: typer.Context, admin_url: Optional[str], conf: Optional[Path], require_named: str = ""):
    """Resolve and open the target; exit 2 on usage errors, 3 when unreachable. Returns (target, admin)."""
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import open_admin
    from ._common import EXIT_UNREADABLE, fail

    target = resolve_for(ctx, admin_url, conf, require_named)
    try:
        return target, open_admin(target)
    except TargetUnreachableError as exc:
        fail(exc.reason, EXIT_UNREADABLE)
