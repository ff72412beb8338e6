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
    brokers: int = typer.Option(1, "--brokers", min=1, max=16, help="Rehearse on an engine of this many brokers: "
                                "bundles shed between them, one restarted during the wait, then the rolling "
                                "downgrade (`downgrade roll`) to a release before 2.11."),
    too_early: bool = typer.Option(False, "--too-early", help="The negative control (with --brokers 2 or more): "
                                   "downgrade one broker right after `start`, before safe, and show the logs that "
                                   "then fail to recover on it (exit 1)."),
    output: str = output_option("table"),
) -> None:
    """Workload with batching on → downgrade start → wait until safe → dump → Spark scan → verdict.

    With --brokers N (2 or more) the engine plays N brokers in this process; after safe, every broker is walked down
    to 2.10.6 and every log must recover on it. Exit 0 only when the procedure, the scan and the engine's own census
    all say no batched entry is live (and, with --brokers, every broker runs the older release and every log
    recovered there). --too-early exits 1 when it shows the failure it is for.
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
    if too_early and brokers < 2:
        fail("--too-early downgrades one broker of several: give --brokers 2 or more", EXIT_USAGE)

    def show(name: str, info: dict) -> None:
        if output != "json":
            from .render import human_value

            details = ", ".join(f"{k}={human_value('', v)}" for k, v in info.items())  # true, not Python's True
            typer.echo(f"• {name}" + (f": {details}" if details else ""))

    try:
        if brokers > 1:
            from ..procedures.rehearsal_cluster import rehearse_cluster
            from ..server.cluster import open_served_cluster

            result = rehearse_cluster(open_served_cluster, brokers, directory, warmup, timeout, scan_engine, show,
                                      verbose=verbose, discard=discard, too_early=too_early)
        else:
            result = run(directory, warmup, timeout, scan_engine, show, verbose=verbose, discard=discard)
    except RehearsalDirError as exc:  # another rehearsal took the directory since the check above
        fail(str(exc), EXIT_USAGE)
    except ScanUsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except ScanInputError as exc:  # Java went away (or broke) between the check and the scan
        fail(str(exc).replace("--engine python", "--scan-engine python"), EXIT_UNREADABLE)
    if output == "json":
        print_json(result.to_json())
    elif result.too_early is not None:
        _too_early(result)
    else:
        _checklist(result)
    if result.too_early is not None and not result.too_early["failed"]:
        raise typer.Exit(EXIT_UNREADABLE)  # the control could not show what it is for: no verdict either way
    raise typer.Exit(EXIT_OK if result.safe else EXIT_FAILURE)


def _too_early(result) -> None:
    early = result.too_early
    typer.echo("")
    if not early["failed"]:
        typer.echo(f"the negative control showed nothing: every log moved onto {early['broker']} (on "
                   f"{early['version']}) recovered, so no live batched entry was left to fail on; rehearse again "
                   "with a longer --warmup")
        return
    typer.echo(f"broker {early['broker']} was downgraded to {early['version']} before the procedure said safe; "
               f"{early['failed']} log(s) could not recover on it:")
    for failure in result.recovery_failures or []:
        typer.echo(f"  {failure['log']}: batched entry {failure['ledgerId']}:{failure['entryId']} cannot be read by "
                   f"{failure['version']}")
    typer.echo("verdict: NOT SAFE (as expected: this is why `downgrade wait` waits for every log to pass its "
               "LastBatched ledger before any broker goes down)")


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
    if result.brokers > 1:
        walk = result.rolling or {}
        steps = walk.get("brokers") or {}
        typer.echo(f"  {ok(walk.get('done'))} rolling downgrade to {walk.get('toVersion', 'an older release')}: "
                   f"{sum(1 for s in steps.values() if s.get('state') == 'done')} of {result.brokers} brokers walked "
                   "down, each after the proof held again")
        failures = result.recovery_failures
        typer.echo(f"  {ok(failures == [])} every log recovered on the older brokers (the engine's record of "
                   f"replays: {len(failures) if failures is not None else 'not read'} failed)")
    typer.echo("")
    where = (f"files in {result.directory}" if result.kept else
             "its files were removed; keep them with: txnadmin rehearse --dir DIR")
    typer.echo("verdict: " + ("SAFE to downgrade" if result.safe else "NOT SAFE") + f"   ({where})")
