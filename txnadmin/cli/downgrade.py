"""`txnadmin downgrade`: the guided, resumable PIP-160 downgrade."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .render import output_option
from ._common import EXIT_FAILURE, EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE, fail, print_json, stdout_is_terminal
from ._target import AdminUrl, Conf, admin_for

app = typer.Typer(help="Guided PIP-160 downgrade: disable batching, record, wait until safe, verify.",
                  no_args_is_help=True)

StateOpt = typer.Option(Path("txnadmin-downgrade.json"), "--state", help="The checklist file (JSON).")
OutputOpt = output_option("table")


def _guard(fn, *args, **kwargs):
    from ..procedures.downgrade import DowngradeError
    from ..procedures.state import StateError

    try:
        return fn(*args, **kwargs)
    except DowngradeError as exc:
        fail(str(exc), exc.exit_code)
    except StateError as exc:
        fail(str(exc), EXIT_UNREADABLE)


def _progress(label: str):
    """A rich progress callback for people; None when output is piped."""
    if not stdout_is_terminal():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)
    task = bar.add_task(label, total=None)
    return bar, (lambda done, total: bar.update(task, completed=done, total=total))


def _with_progress(label: str, admin, fn, *args, **kwargs):
    """Run one procedure step with a progress bar for people, then release the target."""
    import contextlib

    bar, progress = _progress(label)
    try:
        with bar or contextlib.nullcontext():
            return _guard(fn, admin, *args, progress=progress, **kwargs)
    finally:
        getattr(admin, "close", lambda: None)()


@app.command("start")
def start(
    ctx: typer.Context,
    state: Path = StateOpt,
    no_reload: bool = typer.Option(False, "--no-reload",
                                   help="Do not unload coordinators and topics (you restart brokers yourself); "
                                        "then LastBatched is the newest ledger, the conservative choice."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256),
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
) -> None:
    """Disable batching, reload the stores, and record each log's LastBatched ledger (resumable)."""
    from ..procedures.downgrade import start as do_start

    target, admin = admin_for(ctx, admin_url, conf)
    result = _with_progress("recording", admin, do_start, state, target.url, not no_reload, concurrency)
    summary = {"state": str(state), "phase": result["phase"], "coordinators": len(result["coordinators"]),
               "pendingAckStores": len(result["pendingAckStores"]), "reloaded": result.get("reload", True)}
    if output == "json":
        print_json(summary)
    else:
        typer.echo(f"batching disabled; recorded LastBatched for {summary['coordinators']} coordinator logs and "
                   f"{summary['pendingAckStores']} pending-ack logs in {state}")
        typer.echo("next: txnadmin downgrade wait   (or: status)")


def _render_report(report, output: str) -> None:
    if output == "json":
        print_json(report.to_json())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="PIP-160 downgrade: " + ("SAFE" if report.safe else "waiting"))
    for col in ("component", "name", "LastBatched", "OldestExists", "done", "reason"):
        table.add_column(col)
    shown = report.waiting[:50] if report.waiting else report.logs[:20]
    for log in shown:
        reason = log.reason + (f"\n→ {log.suggestion}" if log.suggestion else "")
        table.add_row(log.component, log.name, str(log.last_batched_ledger_id), str(log.oldest_ledger_id),
                      "yes" if log.done else "no", reason)
    console = Console()
    console.print(table)
    console.print(f"{len(report.logs) - len(report.waiting)} of {len(report.logs)} logs done"
                  + (f"; verification: {report.verification['verdict']}" if report.verification else ""))
    console.print("verdict: " + ("[bold green]safe to downgrade[/]" if report.safe else "[bold yellow]not yet[/]"))


@app.command("status")
def status(
    ctx: typer.Context,
    state: Path = StateOpt,
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256),
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
) -> None:
    """Per log: LastBatched, OldestExists, done or why it waits. Exit 0 when safe, 1 when not yet."""
    from ..procedures.downgrade import status as do_status

    _, admin = admin_for(ctx, admin_url, conf)
    report = _with_progress("checking", admin, do_status, state, concurrency)
    _render_report(report, output)
    raise typer.Exit(EXIT_OK if report.safe else EXIT_FAILURE)


@app.command("wait")
def wait(
    ctx: typer.Context,
    state: Path = StateOpt,
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds to wait at most."),
    interval: float = typer.Option(10.0, "--interval", help="Seconds between checks."),
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
) -> None:
    """Poll until every log is past its LastBatched ledger. Exit 0 safe, 1 timeout, 3 target unreadable."""
    from ..procedures.downgrade import wait as do_wait

    if interval <= 0 or timeout < 0:
        fail("--interval must be > 0 and --timeout >= 0", EXIT_USAGE)
    _, admin = admin_for(ctx, admin_url, conf)
    bar, _ = _progress("waiting")
    try:
        if bar:
            task = bar.add_task("logs done", total=None)
            with bar:
                report = _guard(do_wait, admin, state, timeout, interval,
                                lambda r: bar.update(task, completed=len(r.logs) - len(r.waiting), total=len(r.logs)))
        else:
            report = _guard(do_wait, admin, state, timeout, interval)
    finally:
        getattr(admin, "close", lambda: None)()
    _render_report(report, output)
    raise typer.Exit(EXIT_OK if report.safe else EXIT_FAILURE)


@app.command("verify")
def verify(
    dumps: list[Path] = typer.Option(..., "--dumps", help="Entry logs or readledger/readlog dumps (repeatable)."),
    ledgers: Optional[Path] = typer.Option(None, "--ledgers", help="listledgers -meta output (live ledgers)."),
    state: Path = StateOpt,
    engine: str = typer.Option("auto", "--engine", help="auto, spark or python."),
    output: str = OutputOpt,
) -> None:
    """Scan dumps for batched entries and fold the result into the verdict (0 clean, 1 batched, 3 unreadable)."""
    from ..procedures.downgrade import record_verification
    from ..scan import ScanInputError, run_scan

    try:
        result = run_scan([str(p) for p in dumps], ledgers_file=ledgers, engine=engine)
    except ScanInputError as exc:
        fail(str(exc), EXIT_UNREADABLE)
    summary = {"verdict": result.verdict, "liveBatchedEntries": result.live_batched_entries, "engine": result.engine}
    _guard(record_verification, state, summary)
    if output == "json":
        print_json(summary)
    else:
        typer.echo(f"scan ({result.engine}): {result.verdict}, {result.live_batched_entries} batched entries in live "
                   "transaction ledgers")
    raise typer.Exit(EXIT_OK if result.verdict == "clean" else EXIT_FAILURE)


@app.command("reset")
def reset(state: Path = StateOpt) -> None:
    """Discard the checklist (the flags stay as they are)."""
    from ..procedures.downgrade import reset as do_reset

    removed = _guard(do_reset, state)
    typer.echo(f"removed {state}" if removed else f"nothing to remove at {state}")
