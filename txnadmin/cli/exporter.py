"""`txnadmin exporter`: serve a target's transaction health as Prometheus metrics (docs/observability.md)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

import typer

from ._common import EXIT_UNREADABLE, EXIT_USAGE, fail
from ._target import AdminUrl, Conf, resolve_for


def exporter(
    ctx: typer.Context,
    interval: float = typer.Option(15.0, "--interval", min=0.1, help="Seconds between the starts of two polls "
                                   "(a poll that takes longer is followed by the next at once)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address /metrics listens on (loopback by default)."),
    port: int = typer.Option(9721, "--port", min=0, max=65535, help="Port /metrics listens on (0 = any free port)."),
    top: int = typer.Option(20, "--top", min=1, max=10_000, help="Per-topic series kept: the N longest recoveries "
                            "and the N topics whose maxReadPosition is held longest."),
    checklist: Optional[Path] = typer.Option(None, "--checklist", help="A downgrade checklist (`downgrade start "
                                             "--state`): export its progress as `downgrade status` says it; never "
                                             "written."),
    with_doctor: bool = typer.Option(False, "--doctor", help="Run every doctor check on each poll and export the "
                                     "findings by check and severity."),
    threshold: list[str] = typer.Option([], "--threshold", help="name=value, repeatable, as for doctor: "
                                        "stuck-margin and ending set the past-timeout and stuck-ending metrics "
                                        "(durations with their unit: 90s, 5m)."),
    max_transaction_timeout: str = typer.Option("15", "--max-transaction-timeout", show_default=False,
                                                help="As for find-hanging: older open transactions hang (e.g. 15m, "
                                                     "90s; a bare number is minutes) [default: 15m]."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256, help="Admin calls in flight per poll."),
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
) -> None:
    """Poll a target every --interval seconds and serve what list, find-hanging, doctor and the downgrade checklist
    know on /metrics, until Ctrl-C (exit 130) or SIGTERM (exit 0).

    A scrape never waits on the cluster: it gets the last finished poll, and txnadmin_poll_age_seconds and
    txnadmin_poll_errors_total say how fresh that is. A failed poll is said on stderr and retried; the exporter stays
    up. Exit 2 usage (no target named), 3 when /metrics cannot listen. See docs/observability.md.
    """
    from ..procedures import doctor as doctor_proc
    from ..procedures import exporter as proc

    from ..durations import parse_duration_ms

    try:
        thresholds = doctor_proc.parse_thresholds(threshold)
        hang_ms = parse_duration_ms(max_transaction_timeout, "--max-transaction-timeout", "m")
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    # a service watches what the operator named, never the embedded default by accident
    target = resolve_for(ctx, admin_url, conf, require_named="exporter")
    options = proc.Options(top=top, checklist=checklist, doctor=with_doctor, thresholds=thresholds,
                           max_transaction_timeout_minutes=hang_ms / 60_000, concurrency=concurrency)

    def ready(url: str) -> None:
        typer.echo(f"exporting {target.label} on {url} every {interval:g} s")

    try:
        proc.export(target, options, interval, host, port, ready, _say, _EXIT_HARD.set)
    except proc.ListenError as exc:
        fail(str(exc), EXIT_UNREADABLE)


def _say(line: str) -> None:
    from ..admin.auth import mask

    typer.echo(mask(line), err=True)


_EXIT_HARD = threading.Event()  # a poll was still waiting on the target when the exporter stopped


def exit_hard_requested() -> bool:
    """main() then exits without joining that poll's threads (they would hold the exit up to a request timeout)."""
    return _EXIT_HARD.is_set()
