"""`txnadmin context`: named targets kept in a file, as pulsarctl's contexts (admin/contexts.py)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Optional

import typer

from ._common import EXIT_UNREADABLE, EXIT_USAGE, fail, print_json
from .render import output_option

app = typer.Typer(help="Named targets (URL, auth, TLS) kept in $TXNADMIN_HOME/contexts.json (mode 600), as "
                       "pulsarctl's contexts. --context NAME uses one for one command; `use` makes one current for "
                       "reads (changes still need --context, -u or --conf on their command line).",
                  no_args_is_help=True)


def _failed(exc: Exception) -> NoReturn:
    from ..admin.contexts import ContextUsageError
    from ..admin.protocol import TargetUnreachableError

    reason = exc.reason if isinstance(exc, TargetUnreachableError) else str(exc)
    fail(reason, EXIT_USAGE if isinstance(exc, ContextUsageError) else EXIT_UNREADABLE)


def _load():
    from ..admin.contexts import ContextError, load

    try:
        return load()
    except ContextError as exc:
        _failed(exc)


@app.command("add")
def add(
    name: str = typer.Argument(..., help="The context's name (letters, digits, '.', '_', '-')."),
    admin_url: str = typer.Option(..., "--admin-url", "-u", help="http(s)://host:port or local:PATH."),
    auth_plugin: Optional[str] = typer.Option(None, "--auth-plugin", help="e.g. AuthenticationToken (a short class "
                                              "name, or the full org.apache.pulsar.client.impl.auth.… one)."),
    auth_params: Optional[str] = typer.Option(None, "--auth-params", help="e.g. token:XYZ or file:///path/to/token "
                                              "(kept in the file, which only you can read)."),
    tls_trust_cert_path: Optional[str] = typer.Option(None, "--tls-trust-cert-path", help="CA certificates file."),
    tls_allow_insecure: bool = typer.Option(False, "--tls-allow-insecure", help="Accept untrusted TLS certificates."),
    tls_enable_hostname_verification: bool = typer.Option(False, "--tls-enable-hostname-verification",
                                                          help="Check the server's hostname."),
    tls_cert_file: Optional[str] = typer.Option(None, "--tls-cert-file", help="Client certificate (AuthenticationTls)."),
    tls_key_file: Optional[str] = typer.Option(None, "--tls-key-file", help="Client key (AuthenticationTls)."),
    replace: bool = typer.Option(False, "--replace", help="Replace a context of that name."),
    use: bool = typer.Option(False, "--use", help="Also make it the current context."),
) -> None:
    """Keep a named target. Its URL and auth plugin are checked now; nothing is contacted."""
    from ..admin.auth import auth_from, register_secret
    from ..admin.contexts import Context, ContextUsageError, check_name
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import check_admin_url

    register_secret(auth_params)
    store = _load()
    try:
        check_name(name)
        if name in store.items and not replace:
            raise ContextUsageError(f"a context named {name!r} exists ({store.items[name].url}): give --replace to "
                                    "replace it")
        tls = {"tlsTrustCertsFilePath": tls_trust_cert_path,
               "tlsAllowInsecureConnection": "true" if tls_allow_insecure else None,
               "tlsEnableHostnameVerification": "true" if tls_enable_hostname_verification else None,
               "tlsCertificateFilePath": tls_cert_file, "tlsKeyFilePath": tls_key_file}
        url = check_admin_url(admin_url, "--admin-url")  # the rules of -u: scheme, no credentials in the URL
        if url.startswith("local:"):  # a context serves from any directory
            url = f"local:{Path(url[len('local:'):]).expanduser().absolute()}"
        if not url.startswith("local:"):
            auth_from(auth_plugin, auth_params, {k: v for k, v in tls.items() if v is not None})
    except ContextUsageError as exc:
        _failed(exc)
    except TargetUnreachableError as exc:
        fail(exc.reason, EXIT_USAGE)  # what the operator typed cannot be used
    store.items[name] = Context(name, url, auth_plugin, auth_params, {k: v for k, v in tls.items() if v is not None})
    if use:
        store.current = name
    store.save()
    typer.echo(f"context {name}: {url}" + (" (current)" if store.current == name else "") + f", in {store.path}")


@app.command("use")
def use(name: str = typer.Argument(..., help="The context that serves commands naming no target.")) -> None:
    """Make a context current: read commands naming no target use it. Changes (downgrade, abort-transaction,
    batch-log changes, doctor) still need --context, -u or --conf on their command line."""
    from ..admin.contexts import ContextUsageError

    store = _load()
    try:
        store.get(name)
    except ContextUsageError as exc:  # an unknown name
        _failed(exc)
    store.current = name
    store.save()
    typer.echo(f"current context: {name} ({store.items[name].url})")


@app.command("remove")
def remove(name: str = typer.Argument(..., help="The context to forget.")) -> None:
    """Forget a context (when it was current, no context is current any more)."""
    from ..admin.contexts import ContextUsageError

    store = _load()
    try:
        store.get(name)
    except ContextUsageError as exc:  # an unknown name
        _failed(exc)
    del store.items[name]
    if store.current == name:
        store.current = None
    store.save()
    typer.echo(f"removed context {name}")


@app.command("list")
def list_contexts(output: str = output_option("table", ("table", "json"))) -> None:
    """Every context: name, URL, auth plugin; the current one marked `*`. Secrets are never shown."""
    from .render import print_rows

    store = _load()
    rows = [dict(c.describe(), current=store.current == n) for n, c in sorted(store.items.items())]
    if output == "json":
        print_json({"file": str(store.path), "current": store.current, "contexts": rows})
        return
    if not rows:
        typer.echo(f"no contexts in {store.path}; add one with `txnadmin context add NAME -u URL`")
        return
    # the tables' one way (render.format_rows): whole cells, no markup, no trailing spaces
    print_rows(["CURRENT", "NAME", "URL", "AUTH"],
               [["*" if row["current"] else "", row["name"], row["url"],
                 str(row.get("authPlugin") or "-").rsplit(".", 1)[-1]] for row in rows])


@app.command("show")
def show(name: Optional[str] = typer.Argument(None, help="A context (default: the current one)."),
         output: str = output_option("table", ("table", "json"))) -> None:
    """One context's settings (the auth params masked). Exit 2 when none is named and none is current."""
    from ..admin.contexts import ContextUsageError

    store = _load()
    if name is None:
        if store.current is None:
            fail(f"no current context in {store.path}: name one, or `txnadmin context use NAME`", EXIT_USAGE)
        name = store.current
    try:
        info = dict(store.get(name).describe(), current=store.current == name)
    except ContextUsageError as exc:  # an unknown name
        _failed(exc)
    if output == "json":
        print_json(info)
        return
    for key, value in info.items():
        typer.echo(f"{key}: {str(value).lower() if isinstance(value, bool) else value}")
