"""The `txnadmin` root command. Groups are Typer apps in sibling modules; nothing heavy is imported here.

The root group is also the last line of defence: any exception a command did not turn into a message becomes one
line on stderr naming what failed, plus how to see the traceback (``--debug``), with a documented exit code — 3 in
txnadmin's own commands (1 means "not yet" / "batched remain" there), 1 under ``transactions`` as pulsar-admin
does, 130 on Ctrl-C. See docs/exit-codes.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup, TyperOption
from typer.exceptions import TyperException

from .. import __version__
from . import context as context_cli
from . import doctor as doctor_cli
from . import downgrade
from . import engine as engine_cli
from . import exporter as exporter_cli
from . import inspect
from . import metrics as metrics_cli
from . import rehearse as rehearse_cli
from . import scan as scan_cli
from . import serve as serve_cli
from . import target as target_cli
from . import transactions
from . import upgrade as upgrade_cli
from ._common import debug_requested
from ._help import install as install_help
from ._target import TargetOptionsAfter, pull_target_options, take_late_options

PULSAR_STYLE = ("transactions", "txn")
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE, what a shell reports for `… | head`
# Top-level commands in the order operators reach for them; anything not named keeps its place after these.
ORDER = ("transactions", "downgrade", "upgrade", "scan", "target", "context", "doctor", "exporter", "rehearse", "serve",
         "engine", "inspect", "metrics")
EXIT_INTERRUPTED = 130
# Commands taking --context after their name too (their own -u/--conf are declared; `transactions` takes all three)
CONTEXT_AFTER = ("downgrade", "upgrade", "doctor", "target")


def _flag_metavar(display=TyperOption.display_type_rich):
    """Help screens show a value placeholder only for options that take a value (not `<bool>` after flags)."""

    def display_type_rich(self, ctx):
        return None if self.is_flag or self.count else display(self, ctx)

    return display_type_rich


TyperOption.display_type_rich = _flag_metavar()  # type: ignore[method-assign]  # deliberate patch: Typer has no hook for it
install_help()  # help never cuts an option name or value (cli/_help.py)


class GuardedGroup(TyperGroup):
    """The root group: commands listed by use, and no exception leaves as a traceback (see the module docstring)."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(super().list_commands(ctx))
        return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), names.index(n)))

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        if name in CONTEXT_AFTER:
            rest = pull_target_options(ctx, rest, ("--context",))
        return name, command, rest

    def invoke(self, ctx: Any):
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, TyperException):
            raise  # exits, aborts and usage errors show themselves
        except KeyboardInterrupt:
            if debug_requested(ctx):
                raise
            typer.echo("interrupted", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:
            raise  # the reader of stdout went away: main() ends quietly (141); not a failure to describe
        except Exception as exc:  # this is the one place that may catch everything
            if debug_requested(ctx):
                raise
            pulsar_style = ctx.invoked_subcommand in PULSAR_STYLE
            typer.echo(describe_failure(exc, ctx), err=True)
            raise typer.Exit(1 if pulsar_style else 3) from None


def describe_failure(exc: BaseException, ctx: Optional[Any] = None) -> str:
    """One line: what failed, on which input, and how to see more. Secrets are masked."""
    from ..admin.auth import mask
    from ..admin.protocol import AdminError

    command = " ".join(["txnadmin", *([ctx.invoked_subcommand] if ctx and ctx.invoked_subcommand else [])])
    opts = (ctx.obj or {}) if ctx else {}
    where = opts.get("admin_url") or (str(opts["conf"]) if opts.get("conf") else None)
    text = " ".join(str(exc).split())[:400]
    if isinstance(exc, AdminError):  # the target's own answer, not a bug here: no traceback to ask for
        return mask(f"error: cannot read the target: {' '.join(exc.reason.split())}")
    if "JAVA_GATEWAY" in text or type(exc).__name__.startswith("PySpark") and "java" in text.lower():
        java_home = os.environ.get("JAVA_HOME") or "unset"
        line = (f"Java could not start for Spark (JAVA_HOME={java_home}): install Java 17 and put it on PATH or fix "
                "JAVA_HOME, or use the in-process engine (--engine python / --scan-engine python)")
    elif isinstance(exc, OSError) and getattr(exc, "filename", None):
        line = f"{exc.filename}: {exc.strerror or text}"
    elif isinstance(exc, RecursionError):
        line = f"{command}: input nested too deeply to process" + (f" (from {where})" if where else "")
    else:
        line = f"{command}: unexpected {type(exc).__name__}" + (f" ({text})" if text else "") + \
            (f" while talking to {where}" if where else "")
    return mask(f"error: {' '.join(line.split())} — run with --debug for the traceback")


app = typer.Typer(
    name="txnadmin",
    cls=GuardedGroup,
    help="The operator's toolkit for Apache Pulsar transactions.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"txnadmin {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", "-v", "-V", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show the Python traceback of an unexpected failure."),
    admin_url: Optional[str] = typer.Option(None, "--admin-url", "-u",
                                            help="http(s)://host:port or local:PATH (an engine directory)."),
    conf: Optional[Path] = typer.Option(None, "--conf", help="Pulsar client.conf (default $PULSAR_CLIENT_CONF)."),
    context: Optional[str] = typer.Option(None, "--context", help="A named target kept by `txnadmin context add`, "
                                          "for this command only."),
    auth_plugin: Optional[str] = typer.Option(None, "--auth-plugin", help="e.g. AuthenticationToken (a short class "
                                              "name, or the full org.apache.pulsar.client.impl.auth.… one)."),
    auth_params: Optional[str] = typer.Option(None, "--auth-params", help="e.g. token:XYZ or file:///path/to/token"),
    token: Optional[str] = typer.Option(None, "--token", help="A bearer token: the same as --auth-plugin "
                                        "AuthenticationToken --auth-params token:TOKEN."),
    tls_allow_insecure: Optional[bool] = typer.Option(None, "--tls-allow-insecure", help="Accept untrusted TLS certificates."),
    tls_trust_cert_path: Optional[str] = typer.Option(None, "--tls-trust-cert-path", help="CA certificates file."),
    tls_enable_hostname_verification: Optional[bool] = typer.Option(
        None, "--tls-enable-hostname-verification", help="Check the server's hostname (Pulsar's default: off)."),
    request_timeout: Optional[float] = typer.Option(
        None, "--request-timeout", help="Seconds one HTTP call may take in all: connect, redirects, retries, body "
                                        "(default 30)."),
) -> None:
    """The operator's toolkit for Apache Pulsar transactions."""
    from .render import reset_machine_yaml

    reset_machine_yaml()  # a command without -o prints JSON, whatever an earlier in-process run asked for
    if request_timeout is not None and not (0 < request_timeout < float("inf")):
        raise typer.BadParameter(f"{request_timeout:g} is not a positive number of seconds",
                                 param_hint="'--request-timeout'")
    if token is not None:
        auth_plugin, auth_params = _token_auth(token, auth_plugin, auth_params)
    from ..admin.auth import register_params

    register_params(auth_params)  # masked in every line printed from here on, whatever fails first
    ctx.obj = {"admin_url": admin_url, "conf": conf, "context": context, "auth_plugin": auth_plugin,
               "auth_params": auth_params,
               "tls": {"tlsAllowInsecureConnection": _bool_text(tls_allow_insecure),
                       "tlsTrustCertsFilePath": tls_trust_cert_path,
                       "tlsEnableHostnameVerification": _bool_text(tls_enable_hostname_verification),
                       "requestTimeout": request_timeout}}
    take_late_options(ctx)


TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def _token_auth(token: str, plugin: Optional[str], params: Optional[str]) -> tuple[str, str]:
    """--token is a short way to say the token plugin and its params; with other auth options it is ambiguous."""
    from ..admin.auth import register_secret

    register_secret(token)
    if not token.strip():
        raise typer.BadParameter("the token is empty", param_hint="'--token'")
    if params is not None or (plugin is not None and plugin.rsplit(".", 1)[-1] != "AuthenticationToken"):
        raise typer.BadParameter("give either --token or --auth-plugin/--auth-params, not both",
                                 param_hint="'--token'")
    return TOKEN_PLUGIN, f"token:{token.strip()}"


def _bool_text(value: Optional[bool]) -> Optional[str]:
    return None if value is None else str(value).lower()


app.add_typer(inspect.app, name="inspect")
app.add_typer(engine_cli.app, name="engine")
app.add_typer(downgrade.app, name="downgrade")
app.command("scan")(scan_cli.scan)
app.command("rehearse")(rehearse_cli.rehearse)
app.command("serve")(serve_cli.serve)
app.command("target")(target_cli.target)
app.add_typer(context_cli.app, name="context")
app.command("upgrade")(upgrade_cli.upgrade)
app.command("metrics")(metrics_cli.metrics)
app.command("doctor")(doctor_cli.doctor)
app.command("exporter")(exporter_cli.exporter)
TRANSACTIONS_HELP = ("Operations on transactions (pulsar-admin transactions). The target options -u/--admin-url, --conf "
                     "and --context may also come after `transactions` or after its subcommand.")
app.add_typer(transactions.app, name="transactions", cls=TargetOptionsAfter, help=TRANSACTIONS_HELP)
app.add_typer(transactions.app, name="txn", hidden=True, cls=TargetOptionsAfter, help=TRANSACTIONS_HELP)


def _pulsar_style(argv: list[str]) -> bool:
    """The command line runs `transactions` (or its alias `txn`): the first command word decides, so `engine txn
    begin --bogus` keeps txnadmin's usage code 2."""
    words = set(ORDER) | set(PULSAR_STYLE)
    return next((arg for arg in argv if arg in words), None) in PULSAR_STYLE


def main() -> None:
    """Run the CLI; `transactions` keeps pulsar-admin's exit codes (usage errors are 1, not 2)."""
    import sys

    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        sys.exit(EXIT_PIPE_CLOSED)
    except Exception as exc:
        # Usage errors (typer's vendored click or click itself) know how to show themselves. Anything else got
        # past the root group's guard (parsing, completion): still one line, never a traceback.
        if not (hasattr(exc, "show") and hasattr(exc, "exit_code")):
            if "--debug" in sys.argv[1:] or os.environ.get("TXNADMIN_DEBUG", "") not in ("", "0"):
                raise
            typer.echo(describe_failure(exc), err=True)
            sys.exit(1 if _pulsar_style(sys.argv[1:]) else 3)
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()
            sys.exit(0)
        if type(exc).__name__ == "Abort":
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        exc.show()
        sys.exit(1 if _pulsar_style(sys.argv[1:]) else exc.exit_code)
    code = code if isinstance(code, int) else 0
    if downgrade.exit_hard_requested() or exporter_cli.exit_hard_requested():
        # `downgrade wait` (at its deadline) or the exporter (when stopped) left a hung request behind: exit without
        # joining that thread.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
