"""The `txnadmin` root command. Groups are Typer apps in sibling modules; nothing heavy is imported here."""

from __future__ import annotations

import typer

from .. import __version__
from . import downgrade
from . import engine as engine_cli
from . import inspect
from . import rehearse as rehearse_cli
from . import scan as scan_cli

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
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """The operator's toolkit for Apache Pulsar transactions."""


app.add_typer(inspect.app, name="inspect")
app.add_typer(engine_cli.app, name="engine")
app.add_typer(downgrade.app, name="downgrade")
app.command("scan")(scan_cli.scan)
app.command("rehearse")(rehearse_cli.rehearse)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
