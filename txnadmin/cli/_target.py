"""Target options shared by commands that talk to a Pulsar or an engine, and the one way commands open a target."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from ..admin.protocol import TargetUnreachableError, TransactionsAdmin
    from ..admin.target import Target

AdminUrl = typer.Option(None, "--admin-url", "-u", help="http(s)://host:port or local:PATH (engine directory).")
Conf = typer.Option(None, "--conf", help="A Pulsar client.conf (webServiceUrl, authPlugin, authParams, TLS).")

OnError = Callable[["TargetUnreachableError"], NoReturn]
TARGET_META = "txnadmin.target"  # the target this command resolved, in the context's shared meta (for hints)


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
                                opts.get("tls"), opts.get("context"))
        ctx.meta[TARGET_META] = target
        if require_named:
            _require(target, require_named)
        return target
    except TargetUnreachableError as exc:
        on_error(exc)


def hint(ctx: typer.Context, text: str, state: Optional[Path] = None) -> str:
    """``text`` with every suggested ``txnadmin …`` command naming this command's target again (and ``--state``
    for a downgrade step when the checklist is not the default one), so that, pasted, it acts on the same cluster.
    Text from before a target was resolved is returned as it is."""
    from ..admin.target import retarget
    from ..procedures.downgrade.checklist import DEFAULT_STATE

    target = ctx.meta.get(TARGET_META)
    if target is None:
        return text
    flags = ("--state", str(state)) if state is not None and Path(state) != Path(DEFAULT_STATE) else ()
    return retarget(text, target, flags)


def banner(target: "Target") -> None:
    """Name an implicit target on stderr for people at a terminal: stdout stays pulsar-admin's byte for byte."""
    import sys

    if not target.on_command_line and sys.stderr.isatty():
        from ..admin.auth import mask

        typer.echo(mask(f"target: {target.url} (from {target.source})"), err=True)


def open_target(ctx: typer.Context, admin_url: Optional[str] = None, conf: Optional[Path] = None,
                require_named: str = "", on_error: OnError = own_command_errors, name_it: bool = False
                ) -> tuple["Target", "TransactionsAdmin"]:
    """Resolve and open this command's target: (target, admin).

    The admin is entered as a context manager on the command's context (Click's ``with_resource``), so it is
    closed when the command ends, however it ends (a result, an exit code, an error, Ctrl-C): a local engine's
    lock and an HTTP admin's connections never outlive the command. ``on_error`` as for :func:`resolve_for`;
    ``name_it`` (commands that print no target line of their own) shows an implicit target's :func:`banner`.
    """
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import open_admin

    target = resolve_for(ctx, admin_url, conf, require_named, on_error)
    if name_it:
        banner(target)
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


LATE_META = "txnadmin.late-target-options"
LATE_OPTIONS = {"-u": "admin_url", "--admin-url": "admin_url", "--conf": "conf", "--context": "context"}


def pull_target_options(ctx: Any, rest: list[str], flags: tuple = tuple(LATE_OPTIONS)) -> list[str]:
    """``rest`` (a command's arguments) without the target options in ``flags``, which go to the root options as if
    given before the command. Given both before and after, they must agree. Help and completion pass untouched."""
    root = ctx.find_root()
    if "--help" in rest or "-h" in rest:
        return rest
    # before the root options are parsed (the root group's own pulling), kept aside for take_late_options
    given = root.obj if root.obj is not None else root.meta.setdefault(LATE_META, {})
    kept: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--":
            kept += rest[i:]
            break
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg[:2], "", arg[2:])
        if flag not in flags or not (eq or value or flag == arg):
            kept.append(arg)
            i += 1
            continue
        if not (eq or value):
            if i + 1 >= len(rest):
                raise typer.BadParameter(f"{flag} needs a value", ctx=ctx)
            value, i = rest[i + 1], i + 1
        _merge(ctx, given, LATE_OPTIONS[flag], flag, value)
        i += 1
    return kept


def take_late_options(ctx: Any) -> None:
    """Into the root options (ctx.obj), the target options the root group found after the command's name."""
    for key, value in ctx.meta.pop(LATE_META, {}).items():
        _merge(ctx, ctx.obj, key, "--" + key.replace("_", "-"), str(value))


def _merge(ctx: Any, given: dict, key: str, flag: str, value: str) -> None:
    before = given.get(key)
    if before is not None and str(before) != value:
        raise typer.BadParameter(f"{flag} {value} differs from {before}, also given; give it once", ctx=ctx)
    given[key] = Path(value) if key == "conf" else value


class TargetOptionsAfter(TyperGroup):
    """A group that also takes -u/--admin-url, --conf and --context after its name, before or after its
    subcommand's (pulsar-admin takes them only before it; operators type them after as often)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, pull_target_options(ctx, args))
