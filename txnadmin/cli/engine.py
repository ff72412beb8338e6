"""`txnadmin engine`: create, run, dump and tune the embedded engine."""

from __future__ import annotations

import json
import secrets
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from .render import output_option
from ._common import EXIT_INTERRUPTED, EXIT_UNREADABLE, EXIT_USAGE, fail, print_json, stdout_is_terminal
from ._target import engine_dir_for, unopened

if TYPE_CHECKING:
    from ..engine.engine import Engine

app = typer.Typer(help="The embedded engine: init, run a workload, dump ledgers, settings.", no_args_is_help=True)

DirArg = typer.Argument(None, help="Engine directory (default: $TXNADMIN_ENGINE_DIR or ~/.txnadmin/engine).",
                        show_default=False)
DirOpt = typer.Option(None, "--dir", help="Engine directory (the same as the DIR argument).")


def _given(directory: Optional[Path], dir_option: Optional[Path]) -> Optional[Path]:
    """The directory named positionally or with --dir (both only when they name the same one: never guess)."""
    if directory is not None and dir_option is not None:
        if directory.expanduser().resolve() != dir_option.expanduser().resolve():
            fail(f"DIR {directory} and --dir {dir_option} name different engines; give one of them", EXIT_USAGE)
    return directory if directory is not None else dir_option


def _dir(directory: Optional[Path], dir_option: Optional[Path] = None) -> Path:
    from ..engine import default_engine_dir

    return _given(directory, dir_option) or default_engine_dir()


@app.command("init")
def init(
    directory: Optional[Path] = DirArg,
    dir_option: Optional[Path] = DirOpt,
    coordinators: Optional[int] = typer.Option(
        None, "--coordinators", "-c", min=1, help="Number of transaction coordinators of a new engine [default: 16]."),
    brokers: Optional[int] = typer.Option(
        None, "--brokers", min=1, help="Number of brokers a served engine plays, each on its own 127.0.0.1 port, all in "
                                       "one process (kept in engine.conf as engineBrokers) [default: 1]."),
    settings: list[str] = typer.Option([], "--set", help="broker.conf-style key=value (repeatable)."),
    exist_ok: bool = typer.Option(False, "--exist-ok", help="Update the settings of an existing engine."),
) -> None:
    """Create an engine directory with its configuration and coordinators."""
    from ..engine.config import ConfigError
    from ..engine.manage import EngineDirError, init_engine, parse_settings

    path = _dir(directory, dir_option)
    try:
        values = parse_settings(settings)
        if coordinators is not None:
            values.setdefault("transactionCoordinatorCount", str(coordinators))
        if brokers is not None:
            values.setdefault("engineBrokers", str(brokers))
        config = init_engine(path, values, exist_ok)
    except ConfigError as exc:  # refused before anything was written (init_engine validates first)
        fail(f"{path}: {str(exc).strip()}; nothing was saved", EXIT_USAGE)
    except EngineDirError as exc:  # the directory is taken: the command line must change (--exist-ok, another one)
        fail(str(exc), EXIT_USAGE)
    from .render import counted

    brokers_said = f", {config.engineBrokers} brokers" if config.engineBrokers > 1 else ""
    typer.echo(f"engine ready at {path} ({counted(config.transactionCoordinatorCount, 'coordinator')}{brokers_said})")


@app.command("run")
def run(
    ctx: typer.Context,
    directory: Optional[Path] = DirArg,
    dir_option: Optional[Path] = DirOpt,
    rate: float = typer.Option(200.0, "--rate", help="Target transactions per second (0 = unlimited)."),
    concurrency: int = typer.Option(8, "--concurrency", help="Concurrent clients."),
    duration: float = typer.Option(10.0, "--duration", help="Seconds to run (0 = until Ctrl-C)."),
    topics: int = typer.Option(2, "--topics"),
    subscriptions: int = typer.Option(2, "--subscriptions"),
    abort_ratio: float = typer.Option(0.1, "--abort-ratio", min=0.0, max=1.0),
    timeout_ratio: float = typer.Option(0.0, "--timeout-ratio", min=0.0, max=1.0,
                                        help="Share of transactions left open to time out."),
    txn_timeout_ms: int = typer.Option(10_000, "--txn-timeout-ms"),
    seed: int = typer.Option(1, "--seed"),
    journal: Optional[Path] = typer.Option(None, "--journal",
                                           help="Append each committed transaction and its acks as JSON lines."),
    fault: list[str] = typer.Option([], "--fault", help="Put the running engine into a broken state for `txnadmin "
                                    "doctor` to find (repeatable): stuck-open (3 transactions left OPEN, their "
                                    "timeouts lost, apache/pulsar#19200), hold-ending (1 transaction held in "
                                    "COMMITTING, apache/pulsar#23550), stall-buffer-recovery[=TOPIC] (a topic's "
                                    "transaction buffer starts recovering and never finishes, apache/pulsar#17040), "
                                    "stall-coordinator-recovery[=ID] (coordinator ID, default 0, reloaded with a log "
                                    "replay that does not finish: its stats answer 404 until it is unloaded again); "
                                    "or make it a moving cluster: shed=SECONDS (every SECONDS one topic with "
                                    "pending-ack stores or open transactions and one coordinator are unloaded, in "
                                    "turn, as bundle shedding does, their bundles moved to another broker on an engine of several; "
                                    "what the other faults broke is left alone); "
                                    "rolling-restart=SECONDS (an engine of several brokers: every SECONDS the next "
                                    "broker is restarted, in turn)."),
    client_version: Optional[str] = typer.Option(
        None, "--client-version", help="Connect the workload's clients as producers that report this client "
                                       "version in topic stats (`publishers[].clientVersion`), e.g. "
                                       "Pulsar-Java-v4.0.13 to rehearse doctor's client-versions check."),
    output: str = output_option("table", help="table (live view), or json or yaml (final counters)."),
) -> None:
    """Run a transactional workload; Ctrl-C stops cleanly, kill -9 loses nothing acknowledged."""
    import math

    from ..engine.faults import FAULTS, ROLLING_RESTART, SHED, Shedder, Spared, fault_name, inject, shed_period, shown
    from ..engine.workload import WorkloadSpec, run_workload

    if abort_ratio + timeout_ratio > 1:
        fail("--abort-ratio plus --timeout-ratio must not exceed 1", EXIT_USAGE)
    # A negative or NaN duration used to mean "forever" (it is not > 0), a negative rate "unlimited".
    for flag, value in (("--duration", duration), ("--rate", rate)):
        if not (math.isfinite(value) and value >= 0):
            fail(f"{flag} {value:g}: must be 0 or more (0 = {'until Ctrl-C' if flag == '--duration' else 'unlimited'})",
                 EXIT_USAGE)
    if concurrency < 1:
        fail(f"--concurrency {concurrency}: must be at least 1", EXIT_USAGE)
    shed_every = None
    restart_every = None
    for name in fault:
        if fault_name(name) in (SHED, ROLLING_RESTART):
            if (shed_every if fault_name(name) == SHED else restart_every) is not None:
                fail(f"--fault {shown(name)}: give --fault {fault_name(name)}=SECONDS once", EXIT_USAGE)
            try:
                period = shed_period(name)
            except ValueError as exc:
                fail(str(exc), EXIT_USAGE)
            if fault_name(name) == SHED:
                shed_every = period
            else:
                restart_every = period
        elif fault_name(name) not in FAULTS or name.endswith("="):
            fail(f"--fault {shown(name)}: use one of {', '.join(FAULTS)}", EXIT_USAGE)
    given = _given(directory, dir_option)
    path, source = engine_dir_for(ctx, given, "engine run", "the directory argument" if directory else "--dir")
    cluster = _served_cluster(path)
    if restart_every is not None and cluster is None:
        fail(f"--fault rolling-restart: {path} plays one broker; create an engine of several with `txnadmin engine "
             "init DIR --brokers N`", EXIT_USAGE)
    engine = _open(ctx, path, **({"host_of": cluster.host_of} if cluster is not None else {}))
    stop = threading.Event()
    interrupted = threading.Event()  # Ctrl-C ends the run cleanly, and still exits 130 as every command does

    def on_ctrl_c(*_: Any) -> None:
        interrupted.set()
        stop.set()

    signal.signal(signal.SIGINT, on_ctrl_c)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    typer.echo(f"engine run: {path} ({source})", err=True)  # from here on Ctrl-C stops the run cleanly
    spec = WorkloadSpec(rate=rate, concurrency=concurrency, duration_s=duration, topics=topics,
                        subscriptions=subscriptions, abort_ratio=abort_ratio, timeout_ratio=timeout_ratio,
                        txn_timeout_ms=txn_timeout_ms, seed=seed, client_version=client_version)
    journal_fh = open(journal, "a", buffering=1) if journal else None

    def on_commit(txn, produced, acked):
        if journal_fh:
            journal_fh.write(json.dumps({"txn": list(txn), "produced": produced, "acked": acked}) + "\n")

    spared = Spared()
    try:
        said = inject(engine, fault, spec.topic_names()[0], txn_timeout_ms, spared)  # before other shells can look
    except Exception as exc:  # noqa: BLE001 — a fault that cannot be set up is a one-line exit 3, not a traceback
        engine.close()
        fail(f"{path}: --fault: {exc}", EXIT_UNREADABLE)
    for line in said:
        typer.echo(line, err=True)
    from ..server.cluster import start_server
    from .render import workload_view

    # Other shells reach this live engine through a loopback server (one per broker) recorded in the directory.
    server = start_server(engine, cluster, secrets.token_urlsafe(24))
    if cluster is not None:
        typer.echo(f"brokers: {', '.join(b.id for b in cluster.brokers)}", err=True)
    roller = None
    if restart_every is not None:
        from ..server.cluster import RollingRestart

        roller = RollingRestart(server, restart_every, (lambda line: typer.echo(line, err=True))
                                if output != "json" else (lambda _line: None)).start()
        typer.echo(f"fault rolling-restart: every {restart_every:g} s the next broker is restarted", err=True)
    live = workload_view(engine) if output == "table" and stdout_is_terminal() else None
    shedder = None
    if shed_every is not None:
        def tell(line: str) -> None:
            typer.echo(line, err=True)

        # -o json keeps stderr to failures and the count at the end; the table view shows every unload
        shedder = Shedder(engine, shed_every, tell if output != "json" else (lambda _line: None), spared, tell,
                          mover=cluster.move if cluster is not None else None)
        left = f"; left alone: {_spared_text(spared)}" if spared.topics or spared.coordinators else ""
        how = "have their bundles moved to another broker" if cluster is not None else "unloaded"
        typer.echo(f"fault shed: every {shed_every:g} s one topic and one coordinator {how} in turn{left}", err=True)
        shedder.start()
    try:
        if live:
            with live as view:
                stats = run_workload(engine, spec, stop, on_progress=view.update, on_commit=on_commit)
        else:
            stats = run_workload(engine, spec, stop, on_commit=on_commit)
    finally:
        if shedder is not None and not shedder.stop():
            typer.echo("shed: an unload was still running 30 s after the workload stopped; closing the engine "
                       "under it", err=True)
        if roller is not None:
            roller.stop()
        server.stop()
        engine.close()
        if journal_fh:
            journal_fh.close()
    if shedder is not None:
        shed = shedder.counts()
        typer.echo(f"shed: {shed['topicUnloads']} topic and {shed['coordinatorUnloads']} coordinator unloads, "
                   f"{shed['failures']} failed", err=True)
    if output == "json":
        print_json({**stats.to_json(), **({"shed": shedder.counts()} if shedder is not None else {})})
    else:
        s = stats.to_json()
        typer.echo(f"{s['started']} transactions in {s['elapsedSeconds']} s ({s['txnPerSecond']}/s): "
                   f"{s['committed']} committed, {s['aborted']} aborted, {s['leftOpen']} left to time out, "
                   f"{s['errors']} errors")
    if interrupted.is_set():
        typer.echo("interrupted", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)


def _served_cluster(path: Path) -> Any:
    """The brokers `engine run` serves when engine.conf asks for several (None for one); exit 3 on a bad engine.conf."""
    from ..engine.config import ConfigError
    from ..server.cluster import served_cluster

    try:
        return served_cluster(path)
    except ConfigError as exc:
        fail(f"{path}: {str(exc).strip()}", EXIT_UNREADABLE)


def _spared_text(spared) -> str:
    parts = [f"coordinator {i}" for i in sorted(spared.coordinators)] + sorted(spared.topics)
    return ", ".join(parts) + " (what the other faults broke)"


@app.command("dump")
def dump(
    directory: Optional[Path] = DirArg,
    dir_option: Optional[Path] = DirOpt,
    out: Path = typer.Option(..., "--out", help="New directory for the entry logs and ledgers.txt."),
) -> None:
    """Write the engine's entry logs and live ledger list (`listledgers -meta` form), ready for `txnadmin scan`.

    Prints the scan command that reads them with that list (stderr; the JSON on stdout carries it too)."""
    import shlex

    from ..engine.manage import EngineDirError, dump_engine

    try:
        summary = dump_engine(_dir(directory, dir_option), out)
    except EngineDirError as exc:
        fail(str(exc), EXIT_UNREADABLE)
    command = f"txnadmin scan {shlex.quote(str(out))}"  # the directory: scan takes the list written with the logs
    print_json({**summary, "scanCommand": command})
    typer.echo(f"next: {command}", err=True)


@app.command("set")
def set_(
    words: list[str] = typer.Argument(..., metavar="[DIR] SETTING", show_default=False,
                                      help="NAME=VALUE, repeatable, as `engine init --set` takes it (e.g. ./eng "
                                           "transactionLogBatchedWriteEnabled=true); or one NAME VALUE."),
    directory: Optional[Path] = typer.Option(None, "--dir", help="Engine directory (the same as DIR)."),
) -> None:
    """Change dynamic settings (like `pulsar-admin brokers update-dynamic-config`); a running engine sees them within
    1 s. Every setting is checked before any is stored; prints the engine's dynamic settings."""
    from ..engine.config import ConfigError, EngineConfig, did_you_mean
    from ..engine.manage import EngineDirError, set_dynamic_values

    given, changes = _set_words(words)
    try:
        print_json(set_dynamic_values(_dir(given, directory), changes))
    except ConfigError as exc:  # Pulsar's words, then the near names a typo was meant as
        wrong = next((n for n in changes if n not in EngineConfig.DYNAMIC_KEYS), None)
        fail(str(exc).strip() + (did_you_mean(wrong, dynamic_only=True) if wrong else ""), EXIT_USAGE)
    except EngineDirError as exc:
        fail(str(exc), EXIT_UNREADABLE)


def _set_words(words: list[str]) -> tuple[Optional[Path], dict[str, Optional[str]]]:
    """`engine set`'s forms: [DIR] NAME=VALUE... (as `engine init DIR --set NAME=VALUE`), NAME VALUE, DIR NAME VALUE."""
    import re

    pairs = [w for w in words if re.match(r"[A-Za-z][A-Za-z0-9_.]*=", w)]
    if not pairs:
        if len(words) in (2, 3):
            *lead, name, value = words
            return (Path(lead[0]) if lead else None), {name: value}
        fail(f"engine set {' '.join(words)}: give [DIR] NAME=VALUE..., or NAME VALUE (with --dir DIR)", EXIT_USAGE)
    lead = words[:len(words) - len(pairs)]
    if len(lead) > 1 or words[len(lead):] != pairs:
        fail(f"engine set {' '.join(words)}: the engine directory comes first, then NAME=VALUE settings", EXIT_USAGE)
    changes: dict[str, Optional[str]] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name in changes:
            fail(f"engine set: {name} given twice; give it once", EXIT_USAGE)
        changes[name] = value.strip()
    return (Path(lead[0]) if lead else None), changes


broker_app = typer.Typer(help="Stop, start or restart one broker of a running engine of several brokers "
                              "(engine init --brokers N).", no_args_is_help=True)
app.add_typer(broker_app, name="broker")
BrokerOpt = typer.Option(..., "--broker", help="The broker's id: its HOST:PORT, as the active brokers list and the "
                                             "engine's server.json name it.")


def _lifecycle(ctx: typer.Context, directory: Optional[Path], dir_option: Optional[Path], broker: str, action: str,
               version: Optional[str] = None) -> None:
    from ..server.cluster import LifecycleError, broker_lifecycle

    path, source = engine_dir_for(ctx, _given(directory, dir_option), f"engine broker {action}",
                                  "the directory argument" if directory else "--dir")
    typer.echo(f"engine broker {action}: {broker} of {path} ({source})", err=True)
    try:
        state = broker_lifecycle(path, broker, action, version)
    except LifecycleError as exc:
        fail(str(exc), exc.exit_code)
    print_json(state)


@broker_app.command("stop")
def broker_stop(ctx: typer.Context, directory: Optional[Path] = DirArg, dir_option: Optional[Path] = DirOpt,
                broker: str = BrokerOpt) -> None:
    """Stop one broker: its address refuses connections, and after engineBrokerFailoverDelayMillis its bundles move
    to the brokers still running (their coordinators and topics reopen there)."""
    _lifecycle(ctx, directory, dir_option, broker, "stop")


@broker_app.command("start")
def broker_start(ctx: typer.Context, directory: Optional[Path] = DirArg, dir_option: Optional[Path] = DirOpt,
                 broker: str = BrokerOpt,
                 version: Optional[str] = typer.Option(None, "--version", help="The version the broker claims from "
                                                       "now on (a rolling upgrade or downgrade), e.g. 4.0.13.")) -> None:
    """Start a stopped broker as a new process: a new process start time, counters from zero."""
    _lifecycle(ctx, directory, dir_option, broker, "start", version)


@broker_app.command("restart")
def broker_restart(ctx: typer.Context, directory: Optional[Path] = DirArg, dir_option: Optional[Path] = DirOpt,
                   broker: str = BrokerOpt,
                   version: Optional[str] = typer.Option(None, "--version", help="The version the broker claims "
                                                         "after the restart, e.g. 4.0.13.")) -> None:
    """Stop one broker and start it again (new process start time, counters from zero); what it owned moves to the
    others after engineBrokerFailoverDelayMillis."""
    _lifecycle(ctx, directory, dir_option, broker, "restart", version)


txn_app = typer.Typer(help="Act as a transactional client (begin, commit, abort) against an engine directory.",
                      no_args_is_help=True)
app.add_typer(txn_app, name="txn")


def _open(ctx: typer.Context, path: Path, **options: Any) -> "Engine":
    """The engine in ``path``, or a one-line exit 3 (an unexpected failure keeps its traceback under --debug)."""
    from ..admin.local import open_engine
    from ..admin.protocol import TargetUnreachableError
    from ..engine.manage import EngineDirError, require_engine

    try:
        return open_engine(require_engine(path), **options)
    except EngineDirError as exc:
        fail(str(exc), EXIT_UNREADABLE)
    except TargetUnreachableError as exc:
        fail(unopened(ctx, exc).reason, EXIT_UNREADABLE)


def _client_engine(ctx: typer.Context, directory: Optional[Path]) -> "Engine":
    return _open(ctx, _dir(directory), maintenance=False)


@txn_app.command("begin")
def txn_begin(
    ctx: typer.Context,
    directory: Optional[Path] = DirArg,
    dir_option: Optional[Path] = DirOpt,
    timeout_ms: int = typer.Option(60_000, "--timeout-ms"),
    owner: Optional[str] = typer.Option(None, "--owner"),
    produce: list[str] = typer.Option([], "--produce", help="TOPIC=TEXT: publish a message in the transaction."),
) -> None:
    """Open a transaction (and optionally produce in it); prints its id."""
    messages = []
    for item in produce:  # all checked before the transaction opens: a usage error must not leave one open
        topic, sep, text = item.partition("=")
        if not sep or not topic.strip():
            fail(f"--produce {item!r}: expected TOPIC=TEXT", EXIT_USAGE)
        messages.append((topic, text.encode()))
    engine = _client_engine(ctx, _given(directory, dir_option))
    try:
        txn = engine.begin(timeout_ms, owner)
        for topic, payload in messages:
            engine.produce(txn, topic, payload)
    finally:
        engine.close()
    print_json({"txnId": f"({txn[0]},{txn[1]})", "mostSigBits": txn[0], "leastSigBits": txn[1]})


def _end(ctx: typer.Context, directory, most: Optional[int], least: Optional[int], client_name: Optional[str],
         commit: bool, txn_id: Optional[str] = None) -> None:
    from ..engine.coordinator import CoordinatorError
    from ..engine.engine import NotFound
    from ._common import txn_id_from

    try:
        most, least = txn_id_from(most, least, txn_id)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)

    engine = _client_engine(ctx, directory)
    try:
        status = engine.end_transaction((most, least), commit, client_name)
    except (CoordinatorError, NotFound) as exc:  # no such transaction, or no such coordinator
        fail(str(exc), 1)
    finally:
        engine.close()
    print_json({"txnId": f"({most},{least})", "status": status})


@txn_app.command("commit")
def txn_commit(
    ctx: typer.Context,
    most: Optional[int] = typer.Option(None, "--most-sig-bits", "-m", help="Or use --txn-id."),
    least: Optional[int] = typer.Option(None, "--least-sig-bits", "-l", help="Or use --txn-id."),
    txn_id: Optional[str] = typer.Option(None, "--txn-id", help='The TxnID as printed, e.g. "(1,6)".'),
    client_name: Optional[str] = typer.Option(None, "--client-name", help="PIP-255: makes a retried commit idempotent."),
    directory: Optional[Path] = DirArg,
    dir_option: Optional[Path] = DirOpt,
) -> None:
    """Commit a transaction; with --client-name a retry after a lost answer succeeds (PIP-255)."""
    _end(ctx, _given(directory, dir_option), most, least, client_name, True, txn_id)


@txn_app.command("abort")
def txn_abort(
    ctx: typer.Context,
    most: Optional[int] = typer.Option(None, "--most-sig-bits", "-m", help="Or use --txn-id."),
    least: Optional[int] = typer.Option(None, "--least-sig-bits", "-l", help="Or use --txn-id."),
    txn_id: Optional[str] = typer.Option(None, "--txn-id", help='The TxnID as printed, e.g. "(1,6)".'),
    client_name: Optional[str] = typer.Option(None, "--client-name", help="PIP-255: makes a retried abort idempotent."),
    directory: Optional[Path] = DirArg,
    dir_option: Optional[Path] = DirOpt,
) -> None:
    """Abort a transaction; with --client-name a retry after a lost answer succeeds (PIP-255)."""
    _end(ctx, _given(directory, dir_option), most, least, client_name, False, txn_id)


@app.command("recover")
def recover(
    directory: Optional[Path] = typer.Argument(None, help="The engine directory whose metadata.db is damaged (stop it "
                                                "first); or --dir.", show_default=False),
    dir_option: Optional[Path] = DirOpt,
    force: bool = typer.Option(False, "--force", help="Rebuild even when metadata.db passes SQLite's quick_check."),
    output: str = output_option("table"),
) -> None:
    """Rebuild a damaged metadata.db: keep it aside, salvage what SQLite can read, re-index the entry logs.

    A metadata.db that passes SQLite's quick_check is left alone (exit 0) unless --force. Exit 0 when nothing was
    lost, 1 when the engine opens again but something could not be rebuilt (listed), 3 when the directory cannot
    be recovered.
    """
    from ..engine.storage import LedgerStorage, StorageError

    given = _given(directory, dir_option)
    if given is None:  # no default here: a rebuild acts on the directory the operator names, never a guess
        fail("engine recover: name the engine directory (DIR or --dir)", EXIT_USAGE)
    directory = given
    try:
        report = LedgerStorage.recover(directory, force)
    except StorageError as exc:
        fail(str(exc), EXIT_UNREADABLE)
    if output == "json":
        print_json(report)
    elif report.get("sound"):
        typer.echo(f"{directory / 'metadata.db'} passes SQLite's quick_check: nothing to recover, nothing changed "
                   "(--force rebuilds it anyway)")
    else:
        rebuilt = report["rebuiltFromEntryLogs"]
        typer.echo(f"kept the damaged file as {report['damagedCopy']}")
        typer.echo("salvaged: " + ", ".join(f"{n} {t} rows" for t, n in report["salvaged"].items()))
        typer.echo(f"re-indexed {rebuilt.get('entries', 0)} entries from {rebuilt.get('entryLogs', 0)} entry logs")
        for item in report["lost"]:
            typer.echo(f"lost: {item}")
        typer.echo("recovered: nothing lost" if not report["lost"] else
                   "recovered with losses (above); the entries are intact in the entry logs")
    raise typer.Exit(0 if not report.get("lost") else 1)
