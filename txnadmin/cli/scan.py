"""`txnadmin scan`: Spark (or in-process) verification that no batched entries remain."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .render import output_option
from ._common import EXIT_FAILURE, EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE, fail, print_json, stdout_is_terminal


def scan(
    paths: list[Path] = typer.Argument(..., help="Entry-log files, readledger/readlog dumps, or directories."),
    ledgers: Optional[Path] = typer.Option(None, "--ledgers", help="`listledgers -meta` output: the live ledgers."),
    fmt: str = typer.Option("auto", "--format", help="Force a dump format (see docs/scan.md)."),
    engine: str = typer.Option("auto", "--engine", help="auto, spark or python."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (default local[*])."),
    output: str = output_option("table"),
    report: Optional[Path] = typer.Option(None, "--report", help="Write per-entry findings (.parquet or .jsonl)."),
) -> None:
    """Prove that no batched entries remain in transaction ledgers, from bookie entry logs or shell dumps.

    Exit 0 clean, 1 batched entries remain in live transaction ledgers, 3 input unreadable.
    """
    from ..scan import ScanInputError, run_scan

    if output not in ("table", "json"):
        fail(f"--output {output!r}: use table or json", EXIT_USAGE)
    progress = None
    bar = None
    if output == "table" and stdout_is_terminal():
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        bar = Progress(TextColumn("scanning"), BarColumn(), DownloadColumn(), transient=True)
        task = bar.add_task("scan", total=None)
        progress = lambda done, total: bar.update(task, completed=done, total=total)  # noqa: E731
    try:
        if bar:
            with bar:
                result = run_scan([str(p) for p in paths], ledgers, fmt, engine, master, report, progress)
        else:
            result = run_scan([str(p) for p in paths], ledgers, fmt, engine, master, report, progress)
    except ScanInputError as exc:
        fail(str(exc), EXIT_UNREADABLE)
    if output == "json":
        print_json(result.to_json())
    else:
        _render(result)
    raise typer.Exit(EXIT_OK if result.verdict == "clean" else EXIT_FAILURE)


def _render(result) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    txn = [l for l in result.ledgers if l["transactionLedger"]]
    table = Table(title=f"Transaction ledgers in the dumps ({result.engine})")
    for col in ("ledger", "managed ledger", "live", "entries", "batched", "suspicious"):
        table.add_column(col)
    for l in txn[:200]:
        table.add_row(str(l["ledgerId"]), l["managedLedger"] or "?", {True: "yes", False: "no", None: "?"}[l["live"]],
                      str(l["entries"]), str(l["batchedEntries"]), str(l["suspiciousEntries"]))
    console.print(table)
    by_ml: dict[str, int] = {}
    for l in txn:
        if l["batchedEntries"]:
            by_ml[l["managedLedger"] or "?"] = by_ml.get(l["managedLedger"] or "?", 0) + l["batchedEntries"]
    for ml, n in sorted(by_ml.items()):
        console.print(f"  {ml}: {n} batched entries in live ledgers")
    if result.dead_ledgers:
        console.print(f"{len(result.dead_ledgers)} ledgers are in the dumps but no longer live (trimmed, awaiting "
                      "bookie GC): not counted")
    console.print(f"suspicious entries: {len(result.suspicious)}; unreadable spots: {len(result.unreadable)}")
    if any(i["format"] == "readledger-string" for i in result.inputs):
        console.print("note: string-formatter dumps show only the batch prefix; the rest of each entry is not "
                      "trustworthy (use -entryformat hex for exact results)")
    for note in result.notes:
        console.print(f"note: {note}")
    verdict = "[bold green]clean[/]" if result.verdict == "clean" else (
        f"[bold red]batched[/]: {result.live_batched_entries} batched entries remain in live transaction ledgers")
    console.print(f"verdict: {verdict}")
