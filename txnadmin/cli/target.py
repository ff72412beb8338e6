"""`txnadmin target`: which Pulsar or engine commands talk to, and why."""

from __future__ import annotations

import typer

from ._common import EXIT_UNREADABLE, EXIT_USAGE, fail, print_json
from .render import FORMATS, output_option, to_yaml


def target(ctx: typer.Context, output: str = output_option("table", FORMATS)) -> None:
    """Print the target in use and where it came from (see docs/transactions.md for the precedence). Secrets masked.

    Credentials that cannot be read or used (a client.conf, a token file, a refused plugin), or a local target with
    no engine in its directory, are flagged beside the target, which is still shown, and the command exits 3. Exit 2
    for a wrong option (-u "", an unknown --context), 3 when no target can be worked out at all.
    """
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import TargetUsageError, missing_engine, resolve_target

    opts = ctx.find_root().obj or {}
    try:
        t = resolve_target(opts.get("admin_url"), opts.get("conf"), opts.get("auth_plugin"), opts.get("auth_params"),
                           opts.get("tls"), opts.get("context"), lenient=True)
    except TargetUnreachableError as exc:
        fail(exc.reason, EXIT_USAGE if isinstance(exc, TargetUsageError) else EXIT_UNREADABLE)
    from ..admin.auth import mask

    info = t.describe()
    info["named"] = t.named
    problem = t.unreadable
    if problem is None and not t.is_local:
        from ..admin.auth import auth_from

        try:
            auth_from(t.auth_plugin, t.auth_params, t.tls)  # a plugin we would refuse is not shown as in use
        except TargetUnreachableError as exc:
            problem = exc.reason
    if problem:
        info["credentials"] = f"UNREADABLE: {problem}"
    no_engine = missing_engine(t)
    if no_engine is not None:  # every command would stop there: not a target to report as in working order
        info["engine"] = f"MISSING: no engine at {t.engine_dir}"
        problem = problem or no_engine
    if output == "json":
        print_json(info)
    elif output == "yaml":
        typer.echo(to_yaml(info))
    else:
        for key, value in info.items():
            typer.echo(mask(f"{key}: {str(value).lower() if isinstance(value, bool) else value}"))
    if problem:
        fail(problem, EXIT_UNREADABLE)  # shown, but the target cannot be used as it stands
