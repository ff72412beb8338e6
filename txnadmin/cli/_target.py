"""Target options shared by commands that talk to a Pulsar or an engine, and the one way commands open a target."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, NoReturn, Optional

import typer

if TYPE_CHECKING:
    from ..admin.protocol import TargetUnreachableError, TransactionsAdmin
    from ..admin.target import Target

AdminUrl = typer.Option(None, "--admin-url", "-u", help="http(s)://host:port or local:PATH (engine directory).")
Conf = typer.Option(None, "--conf", help="A Pulsar client.conf (webServiceUrl, authPlugin, authParams, TLS).")

OnError = Callable[["TargetUnreachableError"], NoReturn]


def own_command_errors(exc: "TargetUnreachableError") -> NoReturn:
    """txnadmin's own commands: exit 2 on usage errors (``-u ""``, nothing named where a name is required),
    3 when the target or a client.conf cannot be read or reached."""
    from ..admin.target import TargetUsageError
    from ._common import EXIT_UNREADABLE, EXIT_USAGE, fail

    fail(exc.reason, EXIT_USAGE if isinstance(exc, TargetUsageError) else EXIT_UNREADABLE)


def resolve_for(ctx: typer.Context, admin_url: Optional[str] = None, conf: Optional[Path] = None,
                require_named: str = "", on_error: OnError = own_command_errors) -> "Target":
    """The target of this command without opening it: its own -u/--conf, else the root options.

    ``require_named`` (a command name such as "downgrade start") refuses the embedded default unless the
    operator named it. A target that cannot be resolved goes to ``on_error``, which ends the command.
    """
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import require_named as _require, resolve_target

    opts = ctx.find_root().obj or {}
    try:
        target = resolve_target(admin_url if admin_url is not None else opts.get("admin_url"),
                                conf or opts.get("conf"), opts.get("auth_plugin"), opts.get("auth_params"),
                                opts.get("tls"))
        if require_named:
            _require(target, require_named)
        return target
    except TargetUnreachableError as exc:
        on_error(exc)


def open_target(ctx: typer.Context, admin_url: Optional[str] = None, conf: Optional[Path] = None,
                require_named: str = "", on_error: OnError = own_command_errors
                ) -> tuple["Target", "TransactionsAdmin"]:
    """Resolve and open this command's target: (target, admin).

    The admin is entered as a context manager on the command's context (Click's ``with_resource``), so it is
    closed when the command ends, however it ends (a result, an exit code, an error, Ctrl-C): a local engine's
    lock and an HTTP admin's connections never outlive the command. ``on_error`` as for :func:`resolve_for`.
    """
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import open_admin

    target = resolve_for(ctx, admin_url, conf, require_named, on_error)
    try:
        admin = open_admin(target)
    except TargetUnreachableError as exc:
        on_error(unopened(ctx, exc))
    return target, ctx.with_resource(admin)


def unopened(ctx: typer.Context, exc: "TargetUnreachableError") -> "TargetUnreachableError":
    """The error to report for a target or engine that did not open.

    An unexpected failure underneath (chained as the cause, see TargetUnreachableError) goes on as it is under
    --debug, so the root group lets its traceback through; otherwise its one line says how to see that traceback.
    """
    from ..admin.protocol import TargetUnreachableError
    from ._common import debug_requested

    if exc.__cause__ is None:
        return exc
    if debug_requested(ctx):
        raise exc
    return TargetUnreachableError(f"{exc.reason} — run with --debug for the traceback")


def engine_dir_for(ctx: typer.Context, directory: Optional[Path], command: str, given_as: str) -> tuple[Path, str]:
    """The engine directory a command that runs an engine itself (``engine run``, ``serve``) works on, and why:
    the directory it was given (``given_as`` words how, for messages), the global ``-u local:PATH``, or the default.
    Both given and naming different directories is a usage error: never guess which one was meant; an http(s)
    ``-u`` is one too, since such a command cannot act on a remote broker."""
    from ._common import EXIT_USAGE, fail

    admin_url = ((ctx.find_root().obj or {}).get("admin_url") or "").strip()
    from_url: Optional[Path] = None
    if admin_url:
        if not admin_url.startswith("local:"):
            fail(f"-u {admin_url}: `{command}` runs an embedded engine; give -u local:PATH or {given_as}", EXIT_USAGE)
        from_url = Path(admin_url[len("local:"):]).expanduser()
    if directory is not None and from_url is not None:
        if directory.expanduser().resolve() != from_url.resolve():
            fail(f"{given_as} {directory} and -u {admin_url} name different engines; give one of them", EXIT_USAGE)
        return from_url, f"-u and {given_as}"
    if from_url is not None:
        return from_url, "-u"
    if directory is not None:
        return directory.expanduser(), given_as
    from ..engine import default_engine_dir

    return default_engine_dir(), "default engine directory"
