"""`txnadmin downgrade`: the guided, resumable PIP-160 downgrade."""

from __future__ import annotations

import threading
from contextvars import ContextVar
from pathlib import Path
from typing import Optional

import typer

from .render import no_headers_option, output_option
from ._common import EXIT_FAILURE, EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE, fail, print_json, stdout_is_terminal, waiting_notice
from ..procedures.downgrade.checklist import DEFAULT_STATE, StateError
from ._target import AdminUrl, Conf, hint, open_target
from .confirm import DryRunOpt, Plan, YesOpt, confirm

app = typer.Typer(help="Guided PIP-160 downgrade: disable batching, record, wait until safe, verify.",
                  no_args_is_help=True)

StateOpt = typer.Option(Path(DEFAULT_STATE), "--state", help="The checklist file (JSON).")
OutputOpt = output_option("table", with_wide=True)
NoHeadersOpt = no_headers_option()


# The running command and its checklist: every command it suggests names the same target and checklist.
_HINTS: ContextVar[Optional[tuple[typer.Context, Path]]] = ContextVar("downgrade_hints", default=None)


def _suggest(ctx: typer.Context, state: Path) -> None:
    _HINTS.set((ctx, state))


def _hinted(text: str) -> str:
    """``text`` with each suggested ``txnadmin …`` carrying this command's target and checklist (cli/_target.hint)."""
    current = _HINTS.get()
    return hint(current[0], text, current[1]) if current else text


def _hint_report(report) -> None:
    """Once the procedure is done with the report (it reads its own reasons between polls)."""
    for log in report.logs:
        log.reason = _hinted(log.reason)
        log.suggestion = _hinted(log.suggestion) if log.suggestion else log.suggestion
    report.stop = _hinted(report.stop) if report.stop else report.stop


def _guard(fn, *args, **kwargs):
    from ..procedures.downgrade import DowngradeError
    from ..procedures.downgrade.checklist import StateError

    try:
        return fn(*args, **kwargs)
    except DowngradeError as exc:
        fail(_hinted(str(exc)), exc.exit_code)
    except StateError as exc:
        fail(_hinted(str(exc)), EXIT_UNREADABLE)


def _progress(label: str):
    """A rich progress callback for people; None when output is piped."""
    if not stdout_is_terminal():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)
    task = bar.add_task(label, total=None)
    return bar, (lambda done, total: bar.update(task, completed=done, total=total))


def _with_progress(label: str, admin, fn, *args, **kwargs):
    """Run one procedure step with a progress bar for people."""
    import contextlib

    bar, progress = _progress(label)
    with bar or contextlib.nullcontext():
        return _guard(fn, admin, *args, progress=progress, **kwargs)


EXIT_INTERRUPTED = 130


def _target_json(target) -> dict:
    return {"url": target.url, "source": target.source}


def _header(target, output: str) -> None:
    """Name the target at the top of human output (stderr when stdout carries JSON)."""
    typer.echo(f"target: {target.label}", err=output == "json")


def _as_given(ctx: typer.Context) -> str:
    """This command as the operator typed it: its name and every option given on the command line (the target and
    the checklist are added by _hinted, as for every suggestion)."""
    import shlex

    words = [f"txnadmin downgrade {ctx.info_name}"]
    for param in ctx.command.params:
        name = param.name or ""
        if name in ("admin_url", "conf", "state") or not param.opts or \
                getattr(ctx.get_parameter_source(name), "name", "") != "COMMANDLINE":  # (click's, or typer's own)
            continue
        flag, value = max(param.opts, key=len), ctx.params.get(name)
        if getattr(param, "is_flag", False):
            if value:
                words.append(flag)
        elif value is not None:
            words.append(f"{flag} {shlex.quote(f'{value:g}' if isinstance(value, float) else str(value))}")
    return " ".join(words)


def _interrupted(ctx: typer.Context, state: Path) -> None:
    typer.echo(_hinted(f"\ninterrupted: the checklist {state} is intact; resume with the same command: "
                       f"`{_as_given(ctx)}`"), err=True)
    raise typer.Exit(EXIT_INTERRUPTED)


@app.command("start")
def start(
    ctx: typer.Context,
    state: Path = StateOpt,
    no_reload: bool = typer.Option(False, "--no-reload",
                                   help="Do not unload coordinators and topics (you restart brokers yourself); each "
                                        "log then waits until it is seen reopened and `start` is run again."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256),
    coordinator_wait: float = typer.Option(30.0, "--coordinator-wait", min=0.0,
                                           help="Seconds a coordinator answering 404 (failing over to another "
                                                "broker, or replaying its log after the reload) is asked again "
                                                "before `start` gives up on it (exit 3; run `start` again)."),
    yes: bool = YesOpt,
    dry_run: bool = DryRunOpt,
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
) -> None:
    """Disable batching (confirmed on every broker), reload the stores, record each log's evidence (resumable).

    Shows its plan and asks first (--yes to skip, --dry-run to only print it). Run it again to re-record the logs
    whose stores reopened since recording.
    """
    from ..procedures.downgrade import plan as do_plan, start as do_start

    import math

    if not math.isfinite(coordinator_wait):
        fail(f"--coordinator-wait {coordinator_wait}: give a finite number of seconds (0 or more)", EXIT_USAGE)
    target, admin = open_target(ctx, admin_url, conf, require_named="downgrade start")  # closed when the command ends
    _suggest(ctx, state)
    try:
        _header(target, output) if not dry_run else None
        with waiting_notice(admin, target.url):  # the plan's calls have no progress display of their own
            counts = _guard(do_plan, admin, concurrency)
        steps = ["set transactionLogBatchedWriteEnabled=false and transactionPendingAckBatchedWriteEnabled=false "
                 "(dynamic config) and confirm both off on every active broker"]
        if no_reload:
            steps.append("unload nothing (--no-reload): logs wait until their stores reopen and `start` runs again")
        else:
            steps.append(f"unload {counts['coordinators']} coordinators and {counts['topics']} topics "
                         f"({counts['pendingAckStores']} pending-ack stores) so they reopen with batching off")
        steps.append(f"record each log's LastBatched ledger and recoverStartTime in {state}")
        confirmed = confirm(Plan("PIP-160 downgrade: stop batching", target.label, steps,
                                 dict(counts, reload=not no_reload, state=str(state))),
                            yes=yes, dry_run=dry_run, output=output)
        if not confirmed:
            return
        bar, progress = _progress("recording")
        import contextlib

        with bar or contextlib.nullcontext():
            result = _guard(do_start, admin, state, target.url, not no_reload, concurrency, progress=progress,
                            coordinator_wait_s=coordinator_wait)
    except KeyboardInterrupt:
        _interrupted(ctx, state)
    summary = {"target": _target_json(target), "state": str(state), "phase": result["phase"],
               "coordinators": len(result["coordinators"]), "pendingAckStores": len(result["pendingAckStores"]),
               "recordedThisRun": result.get("rerecorded", 0), "reloaded": result.get("reload", True),
               "brokersChecked": result.get("brokersChecked", []),
               "countedFlushes": result.get("countedFlushes", [])}
    if output == "json":
        print_json(summary)
    else:
        typer.echo(f"batching confirmed off on {len(summary['brokersChecked'])} broker(s): "
                   f"{', '.join(summary['brokersChecked'])}")
        for fact in summary["countedFlushes"]:
            typer.echo(f"re-recorded every log: {fact}")
        typer.echo(f"recorded {summary['recordedThisRun']} log(s) in this run; the checklist {state} covers "
                   f"{summary['coordinators']} coordinator logs and {summary['pendingAckStores']} pending-ack logs")
        typer.echo(_hinted("next: txnadmin downgrade wait"))
        typer.echo(_hinted("  or: txnadmin downgrade status"))


def _commands_out(reason: str) -> tuple[str, list[str]]:
    """A reason with the commands it names (`txnadmin …`, carrying the target and checklist, so often long) moved to
    lines of their own: the prose stays short enough to read at 80 columns, and each command pastes whole."""
    import re

    commands: list[str] = []

    def take(match: "re.Match[str]") -> str:
        commands.append(match.group(1))
        return "the command below" if len(commands) == 1 else f"command {len(commands)} below"

    return re.sub(r"`(txnadmin [^`]+)`", take, reason), commands


def _render_report(report, output: str, target=None) -> None:
    if output == "json":
        data = report.to_json()
        if target is not None:
            data["target"] = dict(data.get("target", {}), url=target.url, source=target.source)
        print_json(data)
        return
    from .render import print_rows

    if report.transient_error:
        typer.echo(f"last poll failed: {report.transient_error}")
    shown = report.waiting[:50] if report.waiting else report.logs[:20]
    rows, notes = [], []
    for log in shown:
        topic, subscription = _store_names(log)
        rows.append([topic, subscription, _number(log.last_batched_ledger_id), _number(log.oldest_ledger_id),
                     "-" if log.done else log.kind, log.component, log.name])
        reason, commands = _commands_out(log.reason)
        advice, more = _commands_out(log.suggestion or "")
        notes.append([reason] + ([f"→ {advice}"] if advice else []) + [f"  {c}" for c in commands + more])
    print_rows(["TOPIC / LOG", "SUBSCRIPTION", "LAST BATCHED", "OLDEST", "WAITING FOR", "COMPONENT", "STORE"], rows,
               notes, "PIP-160 downgrade: " + ("SAFE" if report.safe else "waiting"), extra=2)
    if len(report.waiting) > len(shown):
        typer.echo(f"… and {len(report.waiting) - len(shown)} more waiting (-o json lists every log)")
    for kind, logs in sorted(report.groups().items()):
        typer.echo(f"  {len(logs)} waiting: {kind}")
    typer.echo(f"{len(report.logs) - len(report.waiting)} of {len(report.logs)} logs done; flags confirmed off on "
               f"{', '.join(report.brokers) or '?'}"
               + (f"; verification: {report.verification['verdict']}" if report.verification else ""))
    verdict = "safe to downgrade" if report.safe else "not yet"
    typer.secho(f"verdict: {verdict}", fg="green" if report.safe else "yellow", bold=True)


def _store_names(log) -> tuple[str, str]:
    """A pending-ack store as the topic and subscription the checklist recorded for it (`persistent://` and the
    store suffix dropped; the full name stays in -o json and -o wide); a coordinator by its log's name."""
    topic, subscription = log.extra.get("topic"), log.extra.get("subscription")
    if log.component != "pending-ack" or topic is None:
        return log.name, "-"
    return topic.removeprefix("persistent://"), subscription if subscription is not None else "?"


def _number(value) -> str:
    return "-" if value is None else str(value)


@app.command("status")
def status(
    ctx: typer.Context,
    state: Path = StateOpt,
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256),
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
    no_headers: bool = NoHeadersOpt,
) -> None:
    """Per log: LastBatched, OldestExists, done or why it waits. Exit 0 when safe, 1 when not yet, 3 cannot tell."""
    from ..procedures.downgrade import status as do_status

    target, admin = open_target(ctx, admin_url, conf, require_named="downgrade status")
    _suggest(ctx, state)
    if output != "json":
        _header(target, output)
    try:
        # only the checklist's one writer (`start`, `wait`) saves it: status may run beside a wait
        report = _with_progress("checking", admin, do_status, state, concurrency, target=target.url, save=False)
    except KeyboardInterrupt:
        _interrupted(ctx, state)
    _hint_report(report)
    _render_report(report, output, target)
    raise typer.Exit(EXIT_OK if report.safe else EXIT_FAILURE)


@app.command("guard")
def guard(
    ctx: typer.Context,
    broker: Optional[str] = typer.Option(None, "--broker", help="The broker you are about to take down, as the "
                                         "cluster lists it (host:port); checked to be an active broker."),
    state: Path = StateOpt,
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256),
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
    no_headers: bool = NoHeadersOpt,
) -> None:
    """Run just before each broker goes down: is the safe verdict still true?

    Takes the whole proof again, strictly: every recorded log still proven, and every active broker's flush
    counters read live with no batched flush since `start` (a store that opened batching unseen may write its first
    batched entry at any time after the verdict). Reads only; changes nothing.

    Exit 0 still safe (take the broker down, then guard the next one), 1 not safe any more (the reason and the
    re-record are named), 3 cannot tell.
    """
    from ..procedures.downgrade import guard as do_guard
    from ..procedures.downgrade.guard import describe

    target, admin = open_target(ctx, admin_url, conf, require_named="downgrade guard")
    _suggest(ctx, state)
    if output != "json":
        _header(target, output)
    try:
        report, verdict = _with_progress("checking", admin, do_guard, state, broker, target=target.url,
                                         concurrency=concurrency)
    except KeyboardInterrupt:
        _interrupted(ctx, state)
    _hint_report(report)
    if output == "json":
        data = report.to_json()
        data["target"] = dict(data.get("target", {}), url=target.url, source=target.source)
        data.update(guard={"broker": broker, "safeVerdict": verdict, "stillSafe": report.safe})
        print_json(data)
    elif report.safe:
        typer.echo(f"still safe: every log still proven, and no batched flush on any of {len(report.brokers)} "
                   f"broker(s) since `start`, read live now ({describe(verdict)} holds)")
        typer.secho(f"take {broker or 'the broker'} down now; run this again before the next one", fg="green",
                    bold=True)
    else:
        _render_report(report, output, target)
        typer.secho(f"not safe any more: {describe(verdict)} no longer holds; do not take "
                    f"{broker or 'a broker'} down", fg="red", bold=True)
    raise typer.Exit(EXIT_OK if report.safe else EXIT_FAILURE)


@app.command("roll")
def roll(
    ctx: typer.Context,
    to: str = typer.Option(..., "--to", help="The older Pulsar version every broker goes to (e.g. 2.10.6)."),
    state: Path = StateOpt,
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds each broker may take: the proof before it goes "
                                                           "down, and its return on the older version."),
    recovery_timeout: float = typer.Option(60.0, "--recovery-timeout", help="Seconds the recorded logs get to "
                                           "recover after each broker returns (a replay takes a while)."),
    interval: float = typer.Option(5.0, "--interval", help="Seconds between checks."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256),
    allow_renamed_stores: bool = typer.Option(False, "--allow-renamed-stores", help="Walk on although the older "
                                              "version names some recorded pending-ack stores otherwise (Pulsar PR "
                                              "#25727): their acks are not replayed there. Without it the walk "
                                              "refuses before touching a broker."),
    yes: bool = YesOpt,
    dry_run: bool = DryRunOpt,
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
) -> None:
    """Walk the brokers down to an older version, one at a time, after the safe verdict (the runbook's step 5).

    Before each broker: the proof is taken again (every log proven, no batched flush since `start`, a store that
    reopened elsewhere judged by the watch or re-recorded). Then the broker goes down and comes back on --to: an
    engine of several brokers is restarted by the walk itself; on a real cluster it says what to do and waits until
    the broker answers with that version as a new process. Then every recorded log must recover (coordinators and
    pending-ack stores Ready) before the next broker. Progress is kept in the checklist: after Ctrl-C or a kill, run
    the same command to resume.

    Exit 0 every broker on --to and every recorded log recovered; 1 a check failed (the broker, the log, and the way
    back are named); 3 the target cannot be read; 130 interrupted.
    """
    from ..procedures.downgrade import DowngradeError
    from ..procedures.downgrade.rolling import check_version, renamed_on, roll as do_roll

    if interval <= 0 or timeout < 0 or recovery_timeout < 0:
        fail("--interval must be > 0, --timeout and --recovery-timeout >= 0", EXIT_USAGE)
    try:
        to = check_version(to)
    except DowngradeError as exc:
        fail(str(exc), EXIT_USAGE)
    target, admin = open_target(ctx, admin_url, conf, require_named="downgrade roll")
    _suggest(ctx, state)
    if getattr(admin, "frozen", False):
        fail(f"the engine at {target.engine_dir} is stopped: start it (`txnadmin engine run {target.engine_dir}`), "
             "then walk its brokers down", EXIT_UNREADABLE)
    restart, how = _restarter(target)
    renamed = _guard(renamed_on, state, to)
    if not renamed:
        first = f"{to} names every recorded pending-ack store as recorded (Pulsar PR #25727 changed the naming)"
    else:
        key, name = renamed[0]
        example = f"{key} → {name or 'no valid name (a / in its subscription)'}" + (
            f", and {len(renamed) - 1} more" if len(renamed) > 1 else "")
        first = (f"walk on although {to} names {len(renamed)} recorded pending-ack store(s) otherwise ({example}): "
                 "their acks are not replayed there (--allow-renamed-stores)" if allow_renamed_stores else
                 f"refuse before touching a broker: {to} names {len(renamed)} recorded pending-ack store(s) "
                 f"otherwise ({example}); see --allow-renamed-stores")
    steps = [first,
             "for each active broker, in order: take the proof again (every log proven, no batched flush since "
             "`start`; reopens judged by the watch, or re-recorded)",
             f"{how} on {to}, and wait until it answers as a new process on {to}",
             "check that every recorded coordinator and pending-ack store recovered (Ready) before the next broker",
             f"keep the progress in {state} (run the same command to resume)"]
    details = {"to": to, "state": str(state),
               "renamedStores": [{"store": key, "namedOnTo": name} for key, name in renamed]}
    if not confirm(Plan(f"rolling downgrade to {to}", target.label, steps, details),
                   yes=yes, dry_run=dry_run, output=output):
        return
    if output != "json":
        _header(target, output)
    say = (lambda line: typer.echo(line, err=True)) if output == "json" else typer.echo
    try:
        report = _guard(do_roll, admin, state, to, restart, say, target=target.url, timeout_s=timeout,
                        interval_s=interval, recovery_timeout_s=recovery_timeout, concurrency=concurrency,
                        allow_renamed=allow_renamed_stores)
    except KeyboardInterrupt:
        _interrupted(ctx, state)
    if output == "json":
        data = report.to_json()
        data["target"] = _target_json(target)
        print_json(data)
    if report.done:
        if output != "json":
            typer.secho(f"done: every broker runs {to} and every recorded log recovered", fg="green", bold=True)
        raise typer.Exit(EXIT_OK)
    broker = report.failed_broker
    before = report.brokers.get(broker or "", {}).get("versionBefore") or "its previous version"
    for log in report.unrecovered:
        typer.echo(f"did not recover: {log.component} {log.key}: {log.why}", err=True)
    back = (f"`txnadmin engine broker restart {target.engine_dir} --broker {broker} --version {before}`"
            if restart is not None else f"start {broker} on {before} again")
    typer.echo(_hinted(f"error: after {broker} came back on {to}, {len(report.unrecovered)} recorded log(s) did not "
                       f"recover (a log that still holds a batched entry cannot be read before 2.11; the broker log "
                       f"names the entry); the way back: {back}, then `txnadmin downgrade wait --rerecord`"),
               err=True)
    raise typer.Exit(EXIT_FAILURE)


def _restarter(target):
    """(how the walk restarts a broker, in words): itself on an engine of several brokers that is served; on
    anything else the operator does it and the walk waits."""
    if not getattr(target, "is_local", False):
        return None, "ask you to restart the broker"
    from ..server.cluster import LifecycleError, broker_lifecycle, brokers_of

    directory = target.engine_dir
    if brokers_of(directory) < 2:
        return None, "ask you to restart the engine"

    def restart(broker: str, version: str) -> None:
        try:
            broker_lifecycle(directory, broker, "restart", version, timeout_s=60.0)
        except LifecycleError as exc:
            from ..procedures.downgrade import DowngradeError

            raise DowngradeError(str(exc), 1 if exc.exit_code == 1 else 3) from None

    return restart, f"restart the broker (txnadmin engine broker restart {directory})"


HEARTBEAT_S = 30.0  # on a pipe, a line at least this often, even when nothing changed ($TXNADMIN_HEARTBEAT_S)


class _LiveView:
    """`wait`'s story: on a terminal, a panel updated in place (its clock ticks between polls); piped, one stderr
    line per change of state, and a heartbeat line when nothing changed for ``HEARTBEAT_S``."""

    def __init__(self, started: float):
        import os
        import sys

        self.started = started
        self.terminal = sys.stderr.isatty()
        self.last_line: Optional[str] = None
        self.summary: Optional[str] = None
        self.detail: list[str] = []
        self.live = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.printed_at = started
        try:
            self.heartbeat_s = float(os.environ.get("TXNADMIN_HEARTBEAT_S", HEARTBEAT_S))
        except ValueError:
            self.heartbeat_s = HEARTBEAT_S
        if self.terminal:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(stderr=True), transient=True, refresh_per_second=4)

    def __enter__(self):
        if self.live:
            self.summary = "first poll: reading every recorded log"  # the clock runs from the start, not the answer
            self.live.__enter__()
        self.ticker = threading.Thread(target=self._tick, name="wait-heartbeat", daemon=True)
        self.ticker.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.live:
            self.live.__exit__(*exc)
            if exc and exc[0] is KeyboardInterrupt and self.summary is not None:
                # the live panel clears itself as it ends: leave its last frame on the screen, where it was
                with self.lock:
                    typer.echo("\n".join([f"[{self._elapsed()}] {self.summary}"] + self.detail), err=True)

    def _elapsed(self) -> str:
        import time

        secs = int(time.monotonic() - self.started)
        return f"{secs // 3600:d}:{secs // 60 % 60:02d}:{secs % 60:02d}"

    def _tick(self) -> None:
        """The terminal clock moves every second; a pipe gets the last state again when it has been quiet."""
        import time

        while not self.stop.wait(1.0 if self.live else min(1.0, self.heartbeat_s)):
            with self.lock:
                if self.summary is None:
                    continue
                if self.live:
                    self._render()
                elif time.monotonic() - self.printed_at >= self.heartbeat_s:
                    self._print(self.summary + " (no change)")

    def _render(self) -> None:
        from rich.text import Text

        assert self.live is not None
        self.live.update(Text("\n".join([f"[{self._elapsed()}] {self.summary}"] + self.detail)))

    def _print(self, line: str) -> None:
        import time

        typer.echo(f"[{self._elapsed()}] {line}", err=True)
        self.printed_at = time.monotonic()

    def _emit(self, summary: str, detail: list[str]) -> None:
        with self.lock:
            self.summary, self.detail = summary, detail
            if self.live:
                self._render()
            elif summary != self.last_line:
                self._print(summary)
            self.last_line = summary

    def poll(self, report) -> None:
        groups = report.groups()
        done = len(report.logs) - len(report.waiting)
        parts = [f"{len(v)} {k}" for k, v in sorted(groups.items())]
        summary = (f"{done}/{len(report.logs)} logs done" + (f"; waiting: {', '.join(parts)}" if parts else "")
                   + f"; {report.reopens_accepted} reopen(s) accepted")
        if report.topic_loads:
            topics = sorted({load["topic"] for load in report.topic_loads})
            failed = sum(1 for load in report.topic_loads if load["result"] != "loaded")
            summary += (f"; loaded {len(topics)} unloaded topic(s) with a stats read: {', '.join(topics[:3])}"
                        + (f" … and {len(topics) - 3} more" if len(topics) > 3 else "")
                        + (f" ({failed} load(s) failed)" if failed else ""))
        detail = []
        for kind, logs in sorted(groups.items()):
            detail.append(f"  {kind} ({len(logs)}):")
            for log in logs[:3]:
                topic, subscription = _store_names(log)
                # hinted here, not in the report: the procedure reads its own reasons again at the next poll
                detail.append(f"    {topic}{'' if subscription == '-' else ' ' + subscription}: {_hinted(log.reason)}")
            if len(logs) > 3:
                detail.append(f"    … and {len(logs) - 3} more")
        self._emit(summary, detail)

    def retry(self, error: str, pause: float) -> None:
        self._emit(f"target not answering, retrying in {pause:0.1f} s: {error}", [])

    def rerecorded(self, count: int) -> None:
        self._emit(f"re-recorded {count} log(s) whose reopen could not be proven harmless (--rerecord)", [])


@app.command("wait")
def wait(
    ctx: typer.Context,
    state: Path = StateOpt,
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds to wait at most (bounds everything, hung "
                                                            "requests included)."),
    interval: float = typer.Option(10.0, "--interval", help="Seconds between checks."),
    rerecord: bool = typer.Option(False, "--rerecord", help="Reload and re-record the logs whose reopen cannot be "
                                  "proven harmless (and logs created since recording), instead of stopping; "
                                  "shows its plan and asks first."),
    yes: bool = YesOpt,
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
    no_headers: bool = NoHeadersOpt,
) -> None:
    """Poll until every log is proven past its LastBatched ledger.

    While it polls, it watches both batching flags and the batched writers' flush counters on every active broker
    (every 2 s): a store reopened by a bundle move or failover is accepted when the watch proves the flags were
    off throughout and nothing batched. A reopen it cannot prove stops the wait (exit 1) naming the command, or,
    with --rerecord, is reloaded and re-recorded. A recorded store whose topic is not loaded (unloaded, and idle
    since) has its topic loaded by a read of its stats (`pulsar-admin topics stats`), at most once per poll; the
    reopen is judged like any other.

    Exit 0 safe, 1 not yet at --timeout or stopped for a re-record, 3 target unreadable (permanent errors stop at
    once; transient ones are retried and shown), 130 interrupted (the checklist stays; run the same command to
    resume).
    """
    import time

    from ..procedures.downgrade import wait as do_wait

    if interval <= 0 or timeout < 0:
        fail("--interval must be > 0 and --timeout >= 0", EXIT_USAGE)
    target, admin = open_target(ctx, admin_url, conf, require_named="downgrade wait")
    _suggest(ctx, state)
    if output != "json":
        _header(target, output)
    from ..procedures.downgrade import DowngradeError

    # A stopped engine read through local: cannot change while we read it (no engine starts under the view):
    # polling it for --timeout would only keep the operator from starting it. One poll, and say what to do.
    frozen = bool(getattr(admin, "frozen", False))
    if rerecord:
        steps = ["poll until safe, watching both batching flags and the flush counters on every active broker",
                 _LOADS_STEP,
                 "when a log's reopen cannot be proven harmless (or a log was created since recording): unload its "
                 f"topic or coordinator so it reopens with batching off, and re-record it in {state} (as `start` "
                 "does; a LastBatched is never lowered)"]
        if not confirm(Plan("PIP-160 downgrade: wait, re-recording unproven reopens", target.label, steps,
                            {"state": str(state), "rerecord": True}), yes=yes, dry_run=False, output=output):
            return
    view = _LiveView(time.monotonic())
    try:
        if not rerecord and output != "json":
            # Under the target line, on stdout: stderr stays the one line an error gets. (With --rerecord the
            # confirmed plan above says it; JSON carries the loads as topicLoads.) Inside the try: Ctrl-C resumes.
            typer.echo("plan: poll until safe, watching both batching flags and the flush counters on every active "
                       "broker")
            typer.echo(f"  - {_LOADS_STEP}")
        with view:
            # (an interval past the deadline: the first answer is the last; the poll itself keeps --timeout)
            report = do_wait(admin, state, timeout, timeout + 1.0 if frozen else interval, view.poll,
                             on_retry=view.retry, target=target.url, rerecord_unproven=rerecord,
                             watch_period=_watch_period(), on_rerecord=view.rerecorded)
    except KeyboardInterrupt:
        _interrupted(ctx, state)
    except DowngradeError as exc:
        if getattr(exc, "abandoned", False):
            _hard_exit(_hinted(f"error: {exc}"), exc.exit_code)
        fail(_hinted(str(exc)), exc.exit_code)
    except StateError as exc:
        fail(_hinted(str(exc)), EXIT_UNREADABLE)
    _hint_report(report)
    _render_report(report, output, target)
    code = EXIT_OK if report.safe else EXIT_FAILURE
    if report.stop:
        typer.echo(f"stopped: {report.stop}", err=True)
    elif not report.safe and not frozen:
        # the wait ends when the next poll could not end before the deadline: say so, and how long it waited
        typer.echo(_hinted(f"timed out: --timeout {timeout:g} s reached after {time.monotonic() - view.started:.1f} s "
                           f"(the next poll, {interval:g} s on, would have ended after it) and not safe yet; wait "
                           f"longer with `{_as_given(ctx)}`"), err=True)
    if frozen and not report.safe:
        typer.echo(f"not waiting: the engine at {target.engine_dir} is stopped, so nothing rolls or trims until it "
                   f"runs; start it (`txnadmin engine run {target.engine_dir}` or `txnadmin serve --engine-dir "
                   f"{target.engine_dir}`) and run this command again: it then waits through the engine", err=True)
    if report.abandoned:
        _hard_exit(None, code)
    raise typer.Exit(code)


_LOADS_STEP = ("a recorded store whose topic is not loaded (listed, but its stats answer 404): load that topic with "
               "a read of its stats (`pulsar-admin topics stats <topic>`), at most once per store per poll; the "
               "reopen that follows is judged like any other")


def _watch_period() -> float:
    """The watch's period: 2 s, or $TXNADMIN_WATCH_PERIOD_S (tests that squeeze time)."""
    import os

    from ..procedures.downgrade import WATCH_PERIOD_S

    try:
        return max(0.05, min(WATCH_PERIOD_S, float(os.environ.get("TXNADMIN_WATCH_PERIOD_S", WATCH_PERIOD_S))))
    except ValueError:
        return WATCH_PERIOD_S


_EXIT_HARD = threading.Event()


def _hard_exit(message: Optional[str], code: int) -> None:
    """A request still hangs in a worker thread; --timeout promised to bound the run, so the process must not wait
    for it at exit. The command ends normally here; `main()` (the real process, never an in-process runner)
    sees :func:`exit_hard_requested` and leaves without joining the hung thread."""
    if message:
        typer.echo(message, err=True)
    _EXIT_HARD.set()
    raise typer.Exit(code)


def exit_hard_requested() -> bool:
    return _EXIT_HARD.is_set()


@app.command("verify")
def verify(
    ctx: typer.Context,
    dumps: list[Path] = typer.Option(..., "--dumps", help="Entry logs or readledger/readlog dumps (repeatable)."),
    ledgers: Optional[Path] = typer.Option(None, "--ledgers", help="listledgers -meta output (live ledgers)."),
    txn_ledgers: Optional[str] = typer.Option(None, "--txn-ledgers", help="Transaction ledger ids, comma-separated, "
                                              "when the list has no metadata (as `txnadmin scan`)."),
    ledger_id_format: str = typer.Option("long", "--ledger-id-format",
                                         help="How the dumps print ledger ids (-ledgeridformat): long or hex."),
    fmt: str = typer.Option("auto", "--format", help="Force a dump format (see docs/scan.md)."),
    state: Path = StateOpt,
    engine: str = typer.Option("auto", "--engine", help="auto, spark or python."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, max=256),
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = OutputOpt,
) -> None:
    """Scan dumps for batched entries and fold the result into the verdict (0 clean, 1 batched, 3 incomplete).

    The ledger list must hold every ledger the target lists as live for the recorded logs (else exit 3, nothing
    recorded): a scan of another cluster's dumps proves nothing here. The inputs are recorded for an audit.
    """
    from ..procedures.downgrade import verify as do_verify
    from ..scan import ScanInputError, ScanUsageError

    target, admin = open_target(ctx, admin_url, conf, require_named="downgrade verify")
    _suggest(ctx, state)
    if output != "json":
        _header(target, output)
    try:
        result, record = _with_progress("checking", admin, do_verify, state, [str(p) for p in dumps], ledgers,
                                        txn_ledgers, ledger_id_format, fmt, engine, target=target.url,
                                        concurrency=concurrency)
    except ScanUsageError as exc:
        fail(str(exc), EXIT_USAGE)
    except ScanInputError as exc:
        fail(str(exc), EXIT_UNREADABLE)
    except KeyboardInterrupt:
        _interrupted(ctx, state)
    if output == "json":
        print_json(dict(record, state=str(state)))
    else:
        typer.echo(f"scan ({result.engine}): {result.verdict}, {result.live_batched_entries} batched entries in live "
                   "transaction ledgers")
        for reason in result.reasons[:20]:
            typer.echo(_hinted(f"  not proven: {reason}"))
        checked = record["liveLedgersChecked"]
        typer.echo(f"recorded in {state}" + (f", the list holding all {checked} live ledgers of the recorded logs"
                                             if checked is not None else ""))
    raise typer.Exit(result.exit_code)  # 0 clean, 1 batched, 3 incomplete: the scan's own codes


@app.command("reset")
def reset(state: Path = StateOpt) -> None:
    """Discard the checklist (the flags stay as they are)."""
    from ..procedures.downgrade import reset as do_reset

    _HINTS.set(None)  # it names no target: its messages are not about one

    removed = _guard(do_reset, state)
    typer.echo(f"removed {state}" if removed else f"nothing to remove at {state}")
