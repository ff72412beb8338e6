"""`txnadmin target`: which Pulsar or engine commands talk to, and why."""

from __future__ import annotations

import typer

from ._common import EXIT_UNREADABLE, fail, print_json
from .render import FORMATS, output_option, to_yaml


def target(ctx: typer.Context, output: str = output_option("table", FORMATS)) -> None:
    """Print the target in use and where it came from (flags > env > client.conf > embedded engine). Secrets masked."""
    from ..admin.protocol import TargetUnreachableError
    from ._target import resolve_for

    t = resolve_for(ctx)  # exit 2 for `-u ""` (docs/exit-codes.md), 3 for an unreadable client.conf
    try:
        if not t.is_local:
            from ..admin.auth import auth_from

            auth_from(t.auth_plugin, t.auth_params, t.tls)  # a plugin we would refuse is not shown as in use
    except TargetUnreachableError as exc:
        fail(exc.reason, EXIT_UNREADABLE)
    info = t.describe()
    if output == "json":
        print_json(info)
    elif output == "yaml":
        typer.echo(to_yaml(info))
    else:
        for key, value in info.items():
            typer.echo(f"{key}: {value}")
