"""`txnadmin metrics`: buffered-writer metrics per component, and a tuning recommendation."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .render import output_option
from ._common import EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE, fail, print_json


def metrics(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="A broker's /metrics URL, a saved exposition file, or local:PATH."),
    token: Optional[str] = typer.Option(None, "--token", envvar="TXNADMIN_TOKEN", help="Bearer token for the URL: "
                                        "the global --token given here (it wins over the global auth options)."),
    config: Optional[Path] = typer.Option(None, "--config", help="broker.conf / engine.conf with the current thresholds."),
    output: str = output_option("table"),
) -> None:
    """Flush triggers (shares), records and bytes per entry, oldest-record delay, and what to set.

    Exit 0 ok, 2 usage, 3 when the source is unreadable or holds no writer metrics.
    """
    from ..metrics import MetricsError, analyze_text, fetch

    if output not in ("table", "json"):
        fail(f"--output {output!r}: use table or json", EXIT_USAGE)
    thresholds = _thresholds(config) if config else {}
    opts = ctx.find_root().obj or {}
    if token is not None and (opts.get("auth_plugin") or opts.get("auth_params")):
        source_of = ctx.get_parameter_source("token")
        if source_of is None or source_of.name != "COMMANDLINE":
            token = None  # $TXNADMIN_TOKEN yields to auth options given on the command line; metrics --token wins
    try:
        reports = analyze_text(fetch(source, token, _http_get(ctx)), thresholds)
    except MetricsError as exc:
        message = str(exc)
        fail(message if message.startswith(source) or "://" in message else f"{source}: {message}", EXIT_UNREADABLE)
    if output == "json":
        print_json({"source": source, "components": [r.to_json() for r in reports]})
        raise typer.Exit(EXIT_OK)
    from .render import print_rows

    for i, r in enumerate(reports):
        shares = r.trigger_shares()
        if i:
            typer.echo("")
        # BY …: the share of flushes each trigger caused; LARGE: flushes forced by one record of the max size
        print_rows(["FLUSHES", "BY RECORDS", "BY SIZE", "BY DELAY", "LARGE", "REC/ENTRY", "BYTES/ENTRY", "OLDEST"],
                   [[f"{r.flushes:g}", f"{shares['max_records']:.0%}", f"{shares['max_size']:.0%}",
                     f"{shares['max_delay']:.0%}", f"{r.triggers.get('large_data', 0):g}", f"{r.records.mean:.1f}",
                     f"{r.size.mean:.0f}", f"{r.delay.mean * 1000:.1f} ms"]],
                   title=f"{r.component} ({r.names} metric names)")
        rec = r.recommendation
        typer.echo(f"recommendation: {rec['reason']}")
        for key, value in rec["set"].items():
            typer.echo(f"  set {key}={value:g}")
        if rec.get("assumedDefaults"):
            typer.echo("  (current thresholds assumed to be Pulsar's defaults 512 / 4 MiB / 1 ms; pass --config)")


def _http_get(ctx: typer.Context):
    """Read a metrics URL with HttpAdmin, under the root options (--request-timeout, TLS): the same deadline, retry
    policy and redirect rules as every admin call, and secrets masked in what it reports."""

    def get(url: str, token: Optional[str]) -> str:
        import httpx

        from ..admin.auth import auth_from
        from ..admin.http import HttpAdmin
        from ..admin.protocol import AdminError
        from ..metrics import MetricsError

        opts = ctx.find_root().obj or {}
        tls = {k: v for k, v in (opts.get("tls") or {}).items() if v is not None}
        origin = url
        try:
            parsed = httpx.URL(url)
            origin = f"{parsed.scheme}://{parsed.netloc.decode()}"
            # the global auth options, as every command takes them; a token of its own (--token, a local
            # engine's server.json, $TXNADMIN_TOKEN) when none is given
            auth = None if token or not opts.get("auth_plugin") and not opts.get("auth_params") else \
                auth_from(opts.get("auth_plugin"), opts.get("auth_params"), tls)
            with HttpAdmin.with_settings(origin, tls, auth=auth, token=None if auth else token) as admin:
                return admin.text(parsed.raw_path.decode() or "/")
        except httpx.InvalidURL as exc:
            raise MetricsError(f"{url}: not a valid URL ({exc})") from None
        except AdminError as exc:
            reason = exc.reason if url in exc.reason or origin in exc.reason else f"{url}: {exc.reason}"
            raise MetricsError(reason) from None

    return get


def _thresholds(path: Path) -> dict[str, float]:
    out = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        fail(f"{path}: cannot read ({exc.strerror or exc})", EXIT_UNREADABLE)
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and "BatchedWrite" in key:
            try:
                out[key.strip()] = float(value.strip())
            except ValueError:
                pass
    return out
