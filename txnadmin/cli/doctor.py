"""`txnadmin doctor`: find what is wrong with a cluster's transactions, explain it, say the fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ._common import EXIT_UNREADABLE, EXIT_USAGE, fail, print_json
from .render import counted, output_option
from ._target import AdminUrl, Conf, hint, open_target

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "unknown": "magenta", "info": "dim"}


def doctor(
    ctx: typer.Context,
    only: Optional[str] = typer.Option(None, "--only", help="Comma-separated checks to run (default: all). "
                                       "coordinators, stuck-transactions, max-read-position, recovery, snapshots, "
                                       "batched-log, leftovers, coverage, versions, bookie-rocksdb."),
    threshold: list[str] = typer.Option([], "--threshold", help="name=value, repeatable: stuck-margin, ending, "
                                        "stalled, recovery, idle (durations with their unit: 500ms, 90s, 5m, 2h; a bare number "
                                        "is refused) and snapshot-share (a fraction)."),
    output: str = output_option("table"),
    strict: bool = typer.Option(False, "--strict", help="Count 'unknown' findings (checks that could not run) as "
                                "warnings (exit 1 instead of 3)."),
    fix: bool = typer.Option(False, "--fix", help="Abort the transactions that are OPEN past their timeout (judged on "
                             "the target's clock), after showing the plan."),
    yes: bool = typer.Option(False, "--yes", "-y", help="With --fix: apply the plan without asking."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --fix: show the plan and change nothing."),
    bookie_dir: Optional[Path] = typer.Option(None, "--bookie-dir", help="A bookie's data directory: check its RocksDB "
                                              "databases for what an older BookKeeper cannot open."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256, help="Admin calls in flight."),
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
) -> None:
    """Check a cluster's transactions and say, for each problem, the evidence, why it matters and the fix.

    Exit 0 healthy (info findings only), 1 any warning or critical, 2 usage, 3 not all checked (an unknown
    finding: a check that could not run) or the target cannot be read at all. --strict counts unknown as warning.
    See docs/doctor.md for every check.
    """
    from ..procedures import doctor as proc

    if output not in ("table", "json"):
        fail(f"--output {output!r}: use table or json", EXIT_USAGE)
    if (yes or dry_run) and not fix:
        fail("--yes and --dry-run go with --fix", EXIT_USAGE)
    if yes and dry_run:
        fail("--yes and --dry-run exclude each other", EXIT_USAGE)
    try:
        thresholds = proc.parse_thresholds(threshold)
        checks = [c.strip() for c in only.split(",") if c.strip()] if only else None
        proc.select_checks(checks, bookie_dir)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    except proc.DoctorError as exc:
        fail(str(exc), exc.code)
    if fix and checks and "stuck-transactions" not in checks:
        fail("--fix aborts what the stuck-transactions check finds: add stuck-transactions to --only", EXIT_USAGE)
    if bookie_dir is not None and not bookie_dir.is_dir():
        fail(f"--bookie-dir {bookie_dir}: not a directory", EXIT_UNREADABLE)
    # doctor judges a whole cluster and --fix aborts transactions: never on the embedded default unless named
    target, admin = open_target(ctx, admin_url, conf, require_named="doctor")  # closed when the command ends
    bar, progress = _progress(output)
    try:
        import contextlib

        with bar or contextlib.nullcontext():
            report = proc.run(admin, target.url, checks, thresholds, concurrency, progress, bookie_dir)
        if fix:
            report = _fix(admin, report, target, checks, thresholds, concurrency, bookie_dir, yes, dry_run, output)
    except proc.DoctorError as exc:
        fail(hint(ctx, str(exc)), exc.code)
    for finding in report.findings:  # each suggested command names this target again, so that it pastes
        finding.why, finding.fix = hint(ctx, finding.why), hint(ctx, finding.fix)
    if output == "json":
        print_json(report.to_json(strict))
    else:
        _render(report, target, strict)
    raise typer.Exit(proc.exit_code(report, strict))


def _progress(output: str):
    """A progress bar on stderr for people at a terminal; nothing when piped or for JSON."""
    if output != "table" or not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True,
                   console=Console(stderr=True))
    task = bar.add_task("checking", total=None)
    return bar, (lambda done, total: bar.update(task, completed=done, total=total))


def _fix(admin, report, target, checks, thresholds, concurrency, bookie_dir, yes, dry_run, output):
    """Abort what the plan lists, after A's plan-then-ask (cli/confirm.py); then check again and report that."""
    from ..procedures import doctor as proc
    from .confirm import Plan, confirm

    plan = proc.fix_plan(report)
    say = (lambda text: typer.echo(text, err=True)) if output == "json" else typer.echo
    if not plan:
        say("fix: nothing to abort (no transaction is OPEN past its timeout plus the margin)")
        return report
    steps = [f"abort {txn}" for txn in plan]
    fix = Plan(f"abort {counted(len(plan), 'transaction')} OPEN past their timeout (judged on the target's clock)",
               target.label, steps, {"abort": [str(txn) for txn in plan]})
    if dry_run and output == "json":
        report.fix = {"dryRun": True, "plan": fix.to_json()}  # one JSON document: the plan rides in the report
        return report
    if not confirm(fix, yes=yes, dry_run=dry_run, output=output):
        return report  # dry run: plan printed, nothing changed; the exit code still says what doctor found
    from .aborting import abort_rows, account

    # the one abort procedure, its outcomes said as `transactions abort` says them
    results = abort_rows(lambda call: call(admin), proc.fix_rows(plan), say,
                         lambda target_admin, said: proc.apply_fix(target_admin, plan, said))
    for line in account(results, target.url):
        say(line)
    say("checking again after the fix:")
    after = proc.run(admin, target.url, checks, thresholds, concurrency, None, bookie_dir)
    after.fix = {"dryRun": False, "plan": fix.to_json(), "results": results}
    return after


def _render(report, target, strict: bool) -> None:
    from rich.console import Console
    from rich.markup import escape

    from ..admin.auth import mask

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"doctor: {escape(target.label)}, clock: {escape(str(report.clock))}")
    for f in report.findings:
        style = SEVERITY_STYLE[f.severity]
        console.print(f"[{style}]{f.severity.upper():8}[/] {escape(f.check)}  {escape(f.subject)}")
        evidence = ", ".join(f"{k}={_text(v)}" for k, v in f.evidence.items() if v not in (None, [], {}))
        console.print(f"  evidence: {escape(mask(evidence))}")  # evidence quotes what the target answered
        console.print(f"  why: {escape(f.why)}")
        console.print(f"  fix: {escape(f.fix)}")
        if f.refs:
            console.print(f"  refs: {escape(', '.join(f.refs))}")
    counts = report.counts()
    verdict = report.verdict(strict)
    console.print(f"{verdict}: " + ", ".join(f"{counts[s]} {s}" for s in ("critical", "warning", "unknown", "info"))
                  + f" ({counted(len(report.checks), 'check')})")


def _text(value) -> str:
    """Evidence for people: lists joined, maps as k=v, long lists cut (the JSON output has everything)."""
    if isinstance(value, list):
        shown = ", ".join(_text(v) for v in value[:5])
        return f"[{shown}{f', … {len(value) - 5} more' if len(value) > 5 else ''}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()  # as Pulsar writes them, not Python's True/None
    return str(value)
