"""`txnadmin scan`: Spark (or in-process) proof that no batched entries remain."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ._common import EXIT_UNREADABLE, EXIT_USAGE, fail, print_json, stdout_is_terminal
from .render import no_headers_option, output_option


def scan(
    paths: list[Path] = typer.Argument(..., help="Entry-log files, readledger/readlog dumps, or directories."),
    ledgers: Optional[Path] = typer.Option(None, "--ledgers", help="`listledgers -meta` output taken after the "
                                           "dumps were copied: the live ledgers (needed for a clean verdict)."),
    txn_ledgers: Optional[str] = typer.Option(None, "--txn-ledgers", help="Transaction ledger ids, comma-separated, "
                                              "when the list has no metadata."),
    ledger_id_format: str = typer.Option("long", "--ledger-id-format",
                                         help="How the dumps print ledger ids (-ledgeridformat): long or hex."),
    verify_all: bool = typer.Option(False, "--verify-all-digests", help="Also verify entry-log digests of the "
                                    "ledgers that are skipped by id (slower; catches a damaged ledger id)."),
    fmt: str = typer.Option("auto", "--format", help="Force a dump format (see docs/scan.md)."),
    engine: str = typer.Option("auto", "--engine", help="auto, spark or python."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (default local[*])."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Spark's logging and the JVM's start-up notes."),
    output: str = output_option("table", with_wide=True),
    no_headers: bool = no_headers_option(),
    report: Optional[Path] = typer.Option(None, "--report", help="Write per-entry findings (.parquet or .jsonl)."),
) -> None:
    """Prove that no batched entries remain in transaction ledgers, from bookie entry logs or shell dumps.

    Exit 0 clean (every entry of every live transaction ledger found and plain), 1 batched entries remain,
    3 incomplete (something missing, unreadable or failing its digest; no ledger list) or input unreadable.
    """
    from ..scan import ScanInputError, ScanUsageError, run_scan
    from ..scan.job import parse_txn_ledgers

    if output not in ("table", "json"):
        fail(f"--output {output!r}: use table or json", EXIT_USAGE)
    bar = None
    progress = None
    if output == "table" and stdout_is_terminal():
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        bar = Progress(TextColumn("scanning {task.description}"), BarColumn(), DownloadColumn(), transient=True)
        task = bar.add_task(f"0/{len(paths)} paths", total=None)

        def progress(files_done: int, files_total: int, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{files_done}/{files_total} files")

    try:
        named = parse_txn_ledgers(txn_ledgers, ledger_id_format if ledger_id_format in ("long", "hex") else "long")
        args: dict[str, Any] = dict(ledgers_file=ledgers, fmt=fmt, engine=engine, master=master, report=report, progress=progress,
                    txn_ledgers=named, ledger_id_format=ledger_id_format, verify_all_digests=verify_all,
                    verbose=verbose)
        if bar:
            with bar:
                result = run_scan([str(p) for p in paths], **args)
        else:
            result = run_scan([str(p) for p in paths], **args)
    except ScanUsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except ScanInputError as exc:
        fail(str(exc), EXIT_UNREADABLE)
    if output == "json":
        print_json(result.to_json())
    else:
        _render(result)
    raise typer.Exit(result.exit_code)


def _render(result) -> None:
    """Every transaction ledger whole on its line (-o wide adds the entry counts); the reasons a verdict is not
    proven on their own lines. Managed-ledger names, notes and reasons come from the dumps: printed, never markup."""
    from .render import print_rows

    txn = [l for l in result.ledgers if l["transactionLedger"]]
    rows = []
    for l in txn[:200]:
        missing = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in l["missing"][:3])
        rows.append([str(l["ledgerId"]), l["managedLedger"] or "?", {True: "yes", False: "no", None: "?"}[l["live"]],
                     str(l["batchedEntries"]), missing or "-",
                     "?" if l["expectedEntries"] is None else str(l["expectedEntries"]), str(l["foundEntries"]),
                     str(l["verifiedEntries"])])
    print_rows(["LEDGER", "MANAGED LEDGER", "LIVE", "BATCHED", "MISSING", "EXPECTED", "FOUND", "VERIFIED"], rows,
               title=f"Transaction ledgers ({result.engine})", extra=3)
    if len(txn) > 200:
        typer.echo(f"… {len(txn) - 200} more transaction ledgers (use -o json)")
    by_ml: dict[str, int] = {}
    for l in txn:
        if l["batchedEntries"]:
            by_ml[l["managedLedger"] or "?"] = by_ml.get(l["managedLedger"] or "?", 0) + l["batchedEntries"]
    where = "in live ledgers" if result.ledger_list_given else "in ledgers not known to be live (no ledger list)"
    for ml, n in sorted(by_ml.items()):
        typer.echo(f"  {ml}: {n} batched entries {where}")
    if result.dead_ledgers:
        typer.echo(f"{len(result.dead_ledgers)} ledgers are in the dumps but no longer live (trimmed, awaiting "
                   "bookie GC): not counted")
    if any(i["format"] == "readledger-string" for i in result.inputs):
        typer.echo("note: string-formatter dumps show only the batch magic; the rest of each entry is not "
                   "recoverable (use -entryformat hex for details)")
    for note in result.notes:
        typer.echo(f"note: {note}")
    for reason in result.reasons[:20]:
        typer.echo(typer.style("not proven:", fg="yellow") + f" {reason}")
    if len(result.reasons) > 20:
        typer.echo(f"… {len(result.reasons) - 20} more reasons (use -o json)")
    if result.verdict == "clean":
        verdict = typer.style("clean", fg="green", bold=True)
    elif result.verdict == "batched":
        verdict = typer.style("batched", fg="red", bold=True) + (
            f": {result.live_batched_entries} batched entries remain in live transaction ledgers"
            if result.ledger_list_given else
            f": {result.live_batched_entries} batched entries in transaction ledgers, live or not (no ledger list)")
    else:
        verdict = typer.style("incomplete", fg="yellow", bold=True) + ": cannot prove clean (see the reasons above)"
    typer.echo(f"verdict: {verdict}")
