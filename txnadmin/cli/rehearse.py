"""`txnadmin rehearse`: a full PIP-160 downgrade on a fresh embedded engine (what `make run` runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .render import output_option
from ._common import EXIT_FAILURE, EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE, fail, print_json


def rehearse(
    directory: Optional[Path] = typer.Option(None, "--dir", help="Keep the engine, dump and checklist here "
                                                                   "(default: a new temporary directory)."),
    warmup: float = typer.Option(4.0, "--warmup", help="Seconds of batched workload before the downgrade starts."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for 'safe' at most."),
    scan_engine: str = typer.Option("auto", "--scan-engine", help="auto (Spark when Java is present), spark, python."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier rehearsal kept in --dir (its engine, "
                               "dump and checklist; nothing else)."),
    discard: bool = typer.Option(False, "--discard", help="Remove the rehearsal's files when it ends, whatever the "
                                 "verdict (what `make run` does; not with --dir)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Spark's logging and the JVM's start-up notes."),
    output: str = output_option("table"),
) -> None:
    """Workload with batching on → downgrade start → wait until safe → dump → Spark scan → verdict.

    Exit 0 only when the procedure, the scan and the engine's own census all say no batched entry is live.
    """
    from ..procedures.rehearsal import RehearsalDirError, prepare_directory
    from ..procedures.rehearsal import rehearse as run
    from ..scan import ScanInputError, ScanUsageError
    from ..scan.job import java_available

    import math

    for flag, seconds in (("--warmup", warmup), ("--timeout", timeout)):
        if not (math.isfinite(seconds) and seconds >= 0):
            fail(f"{flag} {seconds:g}: not a number of seconds (0 or more)", EXIT_USAGE)
    # Both checked before the workload: a rehearsal takes minutes, and would only fail at its scan.
    if scan_engine not in ("auto", "spark", "python"):
        fail(f"--scan-engine {scan_engine!r}: use auto, spark or python", EXIT_USAGE)
    if scan_engine == "spark" and not java_available():
        fail("--scan-engine spark needs Java 17: install a JDK 17 and put java on PATH or set JAVA_HOME, or use "
             "--scan-engine python", EXIT_UNREADABLE)

    if directory is not None:
        try:  # before the workload: a rehearsal takes minutes
            prepare_directory(directory, force)
        except RehearsalDirError as exc:
            fail(str(exc), EXIT_USAGE)
    elif force:
        fail("--force goes with --dir (a rehearsal without --dir works in a new temporary directory)", EXIT_USAGE)
    if discard and directory is not None:
        fail("--discard goes without --dir: a directory you name is kept", EXIT_USAGE)

    def show(name: str, info: dict) -> None:
        if output != "json":
            from .render import human_value

            details = ", ".join(f"{k}={human_value('', v)}" for k, v in info.items())  # true, not Python's True
            typer.echo(f"• {name}" + (f": {details}" if details else ""))

    try:
        result = run(directory, warmup, timeout, scan_engine, show, verbose=verbose, discard=discard)
    except RehearsalDirError as exc:  # another rehearsal took the directory since the check above
        fail(str(exc), EXIT_USAGE)
    except ScanUsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except ScanInputError as exc:  # Java went away (or broke) between the check and the scan
        fail(str(exc).replace("--engine python", "--scan-engine python"), EXIT_UNREADABLE)
    if output == "json":
        print_json(result.to_json())
    else:
        _checklist(result)
    raise typer.Exit(EXIT_OK if result.safe else EXIT_FAILURE)


def _checklist(result) -> None:
    status = result.status or {}
    def ok(b):
        return "[x]" if b else "[ ]"
    typer.echo("")
    typer.echo("PIP-160 downgrade checklist")
    on = result.flags_on
    typer.echo(f"  {ok(on == {})} batching disabled for coordinators and pending-ack stores"
               + ("" if on == {} else f" (read on at the verdict: {on if on else 'could not be read'})"))
    typer.echo(f"  {ok(bool(status.get('logs')))} LastBatched recorded for {status.get('logs', 0)} logs "
               f"(stores reloaded so they reopened without batching)")
    typer.echo(f"  {ok(status.get('safe'))} every log's oldest live ledger is newer than its LastBatched")
    moving = result.moving or {}
    typer.echo(f"  {ok(bool(moving.get('restarts')) and moving.get('startRuns') == 1)} on a moving cluster: "
               f"{moving.get('topicUnloads', 0)} topic and {moving.get('coordinatorUnloads', 0)} coordinator unloads "
               f"and {moving.get('restarts', 0)} restart; {moving.get('reopensAccepted', 0)} reopens proven harmless, "
               f"{moving.get('rerecordedInWait', 0)} logs re-recorded by `wait --rerecord`, `start` run once")
    scan = result.scan or {}
    typer.echo(f"  {ok(scan.get('verdict') == 'clean')} scan of the dumped ledgers: {scan.get('verdict')} "
               f"({scan.get('engine')}, {scan.get('trimmedLedgersStillInLogs', 0)} trimmed ledgers still in entry "
               "logs, not counted)")
    typer.echo(f"  {ok(result.census_batched_live == 0)} engine census: {result.census_batched_live} batched "
               "entries in live transaction ledgers")
    typer.echo("")
    where = (f"files in {result.directory}" if result.kept else
             "its files were removed; keep them with: txnadmin rehearse --dir DIR")
    typer.echo("verdict: " + ("SAFE to downgrade" if result.safe else "NOT SAFE") + f"   ({where})")
