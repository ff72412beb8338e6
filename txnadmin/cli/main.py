"""The `txnadmin` root command. Groups are Typer apps in sibling modules; nothing heavy is imported here."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import __version__
from . import doctor as doctor_cli
from . import downgrade
from . import engine as engine_cli
from . import inspect
from . import metrics as metrics_cli
from . import rehearse as rehearse_cli
from . import scan as scan_cli
from . import serve as serve_cli
from . import target as target_cli
from . import transactions
from . import upgrade as upgrade_cli

app = typer.Typer(
    name="txnadmin",
    help="The operator's toolkit for Apache Pulsar transactions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"txnadmin {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    admin_url: Optional[str] = typer.Option(None, "--admin-url", "-u",
                                            help="http(s)://host:port or local:PATH (an engine directory)."),
    conf: Optional[Path] = typer.Option(None, "--conf", help="Pulsar client.conf (default $PULSAR_CLIENT_CONF)."),
    auth_plugin: Optional[str] = typer.Option(None, "--auth-plugin", help="e.g. org.apache.pulsar.client.impl.auth.AuthenticationToken"),
    auth_params: Optional[str] = typer.Option(None, "--auth-params", help="e.g. token:XYZ or file:///path/to/token"),
    tls_allow_insecure: Optional[bool] = typer.Option(None, "--tls-allow-insecure", help="Accept untrusted TLS certificates."),
    tls_trust_cert_path: Optional[str] = typer.Option(None, "--tls-trust-cert-path", help="CA certificates file."),
    tls_enable_hostname_verification: Optional[bool] = typer.Option(
        None, "--tls-enable-hostname-verification", help="Check the server's hostname (Pulsar's default: off)."),
    request_timeout: Optional[float] = typer.Option(None, "--request-timeout", help="Seconds per HTTP request (default 30)."),
) -> None:
    """The operator's toolkit for Apache Pulsar transactions."""
    ctx.obj = {"admin_url": admin_url, "conf": conf, "auth_plugin": auth_plugin, "auth_params": auth_params,
               "tls": {"tlsAllowInsecureConnection": _bool_text(tls_allow_insecure),
                       "tlsTrustCertsFilePath": tls_trust_cert_path,
                       "tlsEnableHostnameVerification": _bool_text(tls_enable_hostname_verification),
                       "requestTimeout": request_timeout}}


def _bool_text(value: Optional[bool]) -> Optional[str]:
    return None if value is None else str(value).lower()


app.add_typer(inspect.app, name="inspect")
app.add_typer(engine_cli.app, name="engine")
app.add_typer(downgrade.app, name="downgrade")
app.command("scan")(scan_cli.scan)
app.command("rehearse")(rehearse_cli.rehearse)
app.command("serve")(serve_cli.serve)
app.command("target")(target_cli.target)
app.command("upgrade")(upgrade_cli.upgrade)
app.command("metrics")(metrics_cli.metrics)
app.command("doctor")(doctor_cli.doctor)
app.add_typer(transactions.app, name="transactions")
app.add_typer(transactions.app, name="txn", hidden=True)


def main() -> None:
    """Run the CLI; `transactions` keeps pulsar-admin's exit codes (usage errors are 1, not 2)."""
    import sys

    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except Exception as exc:
        # Usage errors (typer's vendored click or click itself) know how to show themselves.
        if not (hasattr(exc, "show") and hasattr(exc, "exit_code")):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()
            sys.exit(0)
        if type(exc).__name__ == "Abort":
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        exc.show()
        pulsar_style = any(arg in ("transactions", "txn") for arg in sys.argv[1:])
        sys.exit(1 if pulsar_style else exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
