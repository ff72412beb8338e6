"""`txnadmin transactions` (alias `txn`): pulsar-admin's 14 subcommands, PIP-160's batch-log commands, and more.

Default output is pulsar-admin's (Jackson pretty JSON, map lines); `-o json` is always JSON, `-o yaml` YAML (as
pulsarctl), `-o table` a rich view. Exit codes are pulsar-admin's: 0 success, 1 any failure.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

import typer

from .confirm import DryRunOpt, YesOpt
from ._common import waiting_notice as waiting_notice  # re-exported: the spinner of every call
from .render import FORMATS, counted, no_headers_option, output_option

if TYPE_CHECKING:
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import Target

app = typer.Typer(help="Operations on transactions (pulsar-admin transactions).", no_args_is_help=True)

Output = output_option(None, FORMATS, "json (always JSON), yaml, table or wide (for people; wide: more columns); "
                       "default: pulsar-admin's.", with_wide=True)
NoHeaders = no_headers_option()
Topic = typer.Option(..., "--topic", "-t", help="Topic name (persistent://t/ns/x, t/ns/x or x).")
SubName = typer.Option(..., "--sub-name", "--subscription-name", "-s", help="Subscription name.")
SubscriptionName = typer.Option(..., "--subscription-name", "--sub-name", "-s", help="Subscription name.")
Most = typer.Option(None, "--most-sig-bits", "-m",
                    help="Most significant bits of the TxnID (the coordinator id); or use --txn-id.")
Least = typer.Option(None, "--least-sig-bits", "-l", help="Least significant bits of the TxnID; or use --txn-id.")
TxnIdOpt = typer.Option(None, "--txn-id", help="The TxnID as Pulsar prints it, (1,6), or as logs do: 1,6, 1:6, TxnID(1,6) (instead of -m/-l).")
Metadata = typer.Option(False, "--metadata", "-m", help="Include ledger metadata.")
LowWaterMark = typer.Option(False, "--low-water-mark", "-l", help="Include each coordinator's low water mark.")


def _fail(message: str) -> NoReturn:
    from ..admin.auth import mask

    typer.echo(mask(message), err=True)
    raise typer.Exit(1)


def _unreachable(exc: "TargetUnreachableError") -> NoReturn:
    """pulsar-admin's answer when the target cannot be resolved or reached (exit 1, as every failure here); its
    "Error connecting to Pulsar" only after a connection that failed, never after a target that was not named right."""
    _fail(f"{exc.reason}\n\nError connecting to Pulsar" if exc.connection_failed else exc.reason)


def _run(ctx: typer.Context, call: Callable[[Any], Any]) -> Any:
    """Make the call on the target of the root options, turn every failure into pulsar-admin's form.

    The target is opened once per command (a command may make several calls) and closed when the command ends."""
    from ..admin.protocol import AdminError, TargetUnreachableError
    from ._target import open_target

    opened = (ctx.obj or {}).get("admin")
    if opened is None:
        target, opened = open_target(ctx, on_error=_unreachable, name_it=True)
        ctx.obj = {"target": target, "admin": opened}
    target, admin = ctx.obj["target"], opened
    try:
        with waiting_notice(admin, target.url):
            return call(admin)
    except TargetUnreachableError as exc:
        _unreachable(exc)
    except AdminError as exc:
        _fail(f"{exc.reason}\n\nReason: {exc.reason}")


def _txn_id(most: Optional[int], least: Optional[int], txn_id: Optional[str]):
    """-m/-l, or --txn-id "(1,6)" (also "1,6"); exactly one way, or a usage error naming what is missing."""
    from ..admin.protocol import TxnId
    from ._common import txn_id_from

    try:
        return TxnId(*txn_id_from(most, least, txn_id))
    except ValueError as exc:
        _fail(str(exc))


def _print(value: Any, output: Optional[str], default: Callable[[Any], str] | None = None,
           table: Callable[[Any], None] | None = None, title: Optional[str] = None) -> None:
    from ..admin.auth import mask_value
    from ..admin.jackson import pretty
    from .render import render_table, to_json, to_yaml

    if value is None and output not in ("json", "yaml"):
        return
    value = mask_value(value)  # a reply that echoes our credentials is printed without them, in every format
    if output == "json":
        typer.echo(to_json(value))
    elif output == "yaml":
        typer.echo(to_yaml(value))
    elif output == "table":
        if table:
            table(value)
        else:
            render_table(value, title)
    else:
        text = default(value) if default else pretty(value)
        if text:  # an empty map prints nothing, as pulsar-admin does
            typer.echo(text)


def parse_relative_time(text: str) -> int:
    """pulsar's RelativeTimeUtil: integer + optional s/m/h/d/w/y (case-insensitive), none = seconds → ms."""
    m = re.fullmatch(r"(\d+)([A-Za-z]?)", text.strip())
    if not m:
        raise ValueError(f"Invalid time '{text}'")
    value, unit = int(m.group(1)), m.group(2).lower()
    factors = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
    if unit not in factors:
        raise ValueError(f"Invalid time unit '{m.group(2)}'")
    return value * factors[unit] * 1000


# -- the 14 pulsar-admin subcommands ----------------------------------------------------------------

@app.command("coordinator-internal-stats")
def coordinator_internal_stats(ctx: typer.Context, coordinator_id: int = typer.Option(..., "--coordinator-id", "-c"),
                               metadata: bool = Metadata, output: Optional[str] = Output) -> None:
    """Get transaction coordinator internal stats."""
    _print(_run(ctx, lambda a: a.coordinator_internal_stats(coordinator_id, metadata)), output,
           title=f"coordinator {coordinator_id} internal stats")


@app.command("pending-ack-internal-stats")
def pending_ack_internal_stats(ctx: typer.Context, topic: str = Topic, subscription: str = SubscriptionName,
                               metadata: bool = Metadata, output: Optional[str] = Output) -> None:
    """Get transaction pending ack internal stats."""
    _print(_run(ctx, lambda a: a.pending_ack_internal_stats(topic, subscription, metadata)), output)


@app.command("buffer-snapshot-internal-stats")
def buffer_snapshot_internal_stats(ctx: typer.Context, topic: str = Topic, metadata: bool = Metadata,
                                   output: Optional[str] = Output) -> None:
    """Get transaction buffer snapshot internal stats."""
    _print(_run(ctx, lambda a: a.buffer_snapshot_internal_stats(topic, metadata)), output)


@app.command("coordinator-stats")
def coordinator_stats(ctx: typer.Context,
                      coordinator_id: Optional[int] = typer.Option(None, "--coordinator-id", "-c"),
                      output: Optional[str] = Output,
                      no_headers: bool = NoHeaders) -> None:
    """Get transaction coordinator stats (all coordinators as map lines without -c)."""
    from ..admin.jackson import map_lines

    result = _run(ctx, lambda a: a.coordinator_stats(coordinator_id))
    default = None if coordinator_id is not None else (lambda v: map_lines(v, "TransactionCoordinatorStats"))
    _print(result, output, default)


@app.command("transaction-buffer-stats")
def transaction_buffer_stats(ctx: typer.Context, topic: str = Topic,
                             low_water_mark: bool = LowWaterMark,
                             segment_stats: bool = typer.Option(
                                 False, "--segment-stats", "-s",
                                 help="With segmented snapshots, list every sealed segment (segmentStats)."),
                             output: Optional[str] = Output) -> None:
    """Get transaction buffer stats."""
    _print(_run(ctx, lambda a: a.transaction_buffer_stats(topic, low_water_mark, segment_stats)), output)


@app.command("pending-ack-stats")
def pending_ack_stats(ctx: typer.Context, topic: str = Topic, sub_name: str = SubName,
                      low_water_mark: bool = LowWaterMark,
                      output: Optional[str] = Output) -> None:
    """Get transaction pending ack stats."""
    _print(_run(ctx, lambda a: a.pending_ack_stats(topic, sub_name, low_water_mark)), output)


@app.command("transaction-in-buffer-stats")
def transaction_in_buffer_stats(ctx: typer.Context, most: Optional[int] = Most, least: Optional[int] = Least,
                                topic: str = Topic, txn_id: Optional[str] = TxnIdOpt,
                                output: Optional[str] = Output) -> None:
    """Get transaction stats in transaction buffer."""
    txn = _txn_id(most, least, txn_id)
    _print(_run(ctx, lambda a: a.transaction_in_buffer_stats(txn, topic)), output, title=f"transaction {txn} in buffer")


@app.command("transaction-in-pending-ack-stats")
def transaction_in_pending_ack_stats(ctx: typer.Context, most: Optional[int] = Most, least: Optional[int] = Least,
                                     topic: str = Topic, sub_name: str = SubName, txn_id: Optional[str] = TxnIdOpt,
                                     output: Optional[str] = Output) -> None:
    """Get transaction stats in pending ack."""
    txn = _txn_id(most, least, txn_id)
    _print(_run(ctx, lambda a: a.transaction_in_pending_ack_stats(txn, topic, sub_name)), output,
           title=f"transaction {txn} in pending ack")


@app.command("transaction-metadata")
def transaction_metadata(ctx: typer.Context, most: Optional[int] = Most, least: Optional[int] = Least,
                         txn_id: Optional[str] = TxnIdOpt, output: Optional[str] = Output) -> None:
    """Get transaction metadata."""
    txn = _txn_id(most, least, txn_id)
    _print(_run(ctx, lambda a: a.transaction_metadata(txn)), output, title=f"transaction {txn}")


@app.command("slow-transactions")
def slow_transactions(ctx: typer.Context, coordinator_id: Optional[int] = typer.Option(None, "--coordinator-id", "-c"),
                      time_: str = typer.Option(..., "--time", "-t", help="Timeout, e.g. 1s, 5m, 2h (none = seconds)."),
                      output: Optional[str] = Output,
                      no_headers: bool = NoHeaders) -> None:
    """Get slow transactions (Pulsar's rule: configured timeout greater than --time)."""
    from ..admin.jackson import map_lines

    try:
        timeout_ms = parse_relative_time(time_)
    except ValueError as exc:
        _fail(str(exc))
    result = _run(ctx, lambda a: a.slow_transactions(timeout_ms, coordinator_id))
    title = f"{counted(len(result), 'slow transaction')} (timeout over {time_}) on {_target_url(ctx)}"
    _print(result, output, lambda v: map_lines(v, "TransactionMetadata"), table=lambda v: _slow_table(v, title))


def _slow_table(txns: dict, title: str) -> None:
    """One line per transaction, id, coordinator, state, age, timeout and owner (pulsar-admin's map stays the default
    output and -o json); ages on this machine's clock. -o wide adds when it opened and its partitions."""
    from ..admin.hanging import transaction_rows
    from .render import age, human_value

    def timeout(r: dict) -> str:
        return "-" if r.get("timeoutMs") is None else age(r["timeoutMs"])

    columns: list[_Column] = [
        ("TXN ID", lambda r: r["txnId"]),
        ("COORDINATOR", lambda r: "-" if r["coordinatorId"] is None else str(r["coordinatorId"])),
        ("STATE", lambda r: r["status"] or "-"),
        ("AGE", lambda r: age(r["ageMs"])),
        ("TIMEOUT", timeout),
        ("OWNER", lambda r: r.get("owner") or "-"),
        ("OPENED (UTC)", lambda r: human_value("openTimestamp", r.get("openTimestamp"), compact=True)),
        ("PRODUCED", lambda r: str(len(r["producedPartitions"]))),
        ("ACKED", lambda r: str(len(r["ackedPartitions"]))),
    ]
    _txn_table(transaction_rows(txns), title, columns, wide=3,
               notes=lambda r: [f"note: {r['note']}"] if r.get("note") else [])


@app.command("scale-transactionCoordinators")
def scale_coordinators(ctx: typer.Context, replicas: int = typer.Option(0, "--replicas", "-r"),
                       output: Optional[str] = Output) -> None:
    """Update the transaction coordinator number (grow only)."""
    _run(ctx, lambda a: a.scale_coordinators(replicas))
    if output in ("json", "yaml"):
        _print({"replicas": replicas}, output)


@app.command("position-stats-in-pending-ack")
def position_stats_in_pending_ack(ctx: typer.Context, topic: str = Topic, subscription: str = SubscriptionName,
                                  ledger_id: int = typer.Option(..., "--ledger-id", "-l"),
                                  entry_id: int = typer.Option(..., "--entry-id", "-e"),
                                  batch_index: Optional[int] = typer.Option(None, "--batch-index", "-b"),
                                  output: Optional[str] = Output) -> None:
    """Get position stats in pending ack (printed, unlike pulsar-admin which drops the result)."""
    _print(_run(ctx, lambda a: a.position_stats_in_pending_ack(topic, subscription, ledger_id, entry_id, batch_index)),
           output)


@app.command("coordinators-list")
def coordinators_list(ctx: typer.Context, output: Optional[str] = Output,
                      no_headers: bool = NoHeaders) -> None:
    """List transaction coordinators (`<id>    <brokerServiceUrl>` lines)."""
    result = _run(ctx, lambda a: a.list_coordinators())
    _print(result, output, lambda v: "\n".join(f"{c.get('id', '-')}    {c.get('brokerServiceUrl', '-')}" for c in v),
           title=f"{len(result)} transaction coordinators")


@app.command("abort-transaction")
def abort_transaction(ctx: typer.Context, most: Optional[int] = Most, least: Optional[int] = Least,
                      txn_id: Optional[str] = TxnIdOpt, output: Optional[str] = Output) -> None:
    """Abort a transaction (and say so: pulsar-admin prints nothing).

    It changes a cluster, so the target must be named (-u, --conf, --context or the environment), never the
    current context or the embedded default."""
    from ._target import resolve_for

    txn = _txn_id(most, least, txn_id)
    resolve_for(ctx, require_named="abort-transaction", on_error=_unreachable)
    _run(ctx, lambda a: a.abort_transaction(txn))
    result = {"txnId": str(txn), "status": "ABORTED"}
    if output in ("json", "yaml"):
        _print(result, output)
    else:  # on stderr: stdout stays exactly pulsar-admin's (empty) for scripts
        typer.echo(f"aborted transaction {txn} on {_target_url(ctx)}", err=True)


# -- PIP-160's proposed batch-log commands -----------------------------------------------------


def _target(ctx: typer.Context) -> Target:
    """The target `_run` resolved and acted on: commands name it when they report what they did."""
    return ctx.obj["target"]


def _target_url(ctx: typer.Context) -> str:
    return _target(ctx).url


def _set_batch(ctx, component: str, enable: Optional[bool], reload: bool, output: Optional[str],
               yes: bool = False, dry_run: bool = False, assume_version_ok: Optional[str] = None) -> None:
    from ..admin.batchlog import reload_units, set_batch_log
    from ..admin.cluster import BrokerVersionError, ClusterView
    from ._target import resolve_for
    from .confirm import Plan, confirm

    if enable is None:
        _fail("give --enable or --disable")
    if assume_version_ok is not None and not enable:
        _fail("--assume-version-ok goes with --enable (switching batching off checks no version)")
    name = "set-txn-tc-batch-log" if component == "tc" else "set-txn-pending-ack-batch-log"
    # a cluster-wide change: never on a target the operator did not name
    target = resolve_for(ctx, require_named=name, on_error=_unreachable)
    checked = None
    if enable:  # PIP-160: never switched on while a broker cannot read batched entries (disabling is never held)
        assume = [b.strip() for b in (assume_version_ok or "").split(",") if b.strip()]
        try:
            checked = _run(ctx, lambda a: ClusterView(a).check_batch_readers(assume_ok=assume))
        except BrokerVersionError as exc:
            _fail(f"{name} --enable refused: {exc}")
    if reload or dry_run:
        units = _run(ctx, lambda a: reload_units(a, component)) if reload else []
        flag = "transactionLogBatchedWriteEnabled" if component == "tc" else "transactionPendingAckBatchedWriteEnabled"
        steps = [f"brokers checked: {', '.join(f'{b} runs {v}' for b, v in sorted(checked.versions.items()))} "
                 f"(all >= {checked.min_version})"] if checked is not None else []
        steps.append(f"set {flag}={str(enable).lower()} (dynamic config)")
        if reload:
            steps.append(f"unload {len(units)} {'coordinators' if component == 'tc' else 'topics'} so their stores "
                         "reopen with the new setting")
        if not confirm(Plan(f"{'enable' if enable else 'disable'} PIP-160 batching ({component})", target.label,
                            steps, {"unloads": len(units)}), yes=yes, dry_run=dry_run,
                       output="json" if output == "json" else "table"):
            return
    result = _run(ctx, lambda a: set_batch_log(a, _target_url(ctx), component, enable, reload, checked=checked))
    if output in ("json", "yaml"):
        _print(result, output)
        return
    if checked is not None:
        typer.echo(f"checked: {checked.checked}")
    typer.echo(f"{result['config']} = {str(enable).lower()} (was {str(result['previous']).lower()})")
    if reload:
        typer.echo(f"reloaded {len(result['reloaded'])} {'coordinators' if component == 'tc' else 'topics'}: "
                   "their stores reopened with the new setting")
    else:
        typer.echo("note: Pulsar reads this flag only when a store opens; stores already open keep batching as "
                   "they were until reloaded (use --reload, or restart brokers)")


AssumeVersionOk = typer.Option(None, "--assume-version-ok", help="With --enable, BROKER,...: brokers that cannot be "
                                "asked their version directly (behind a proxy) and that you checked yourself.")


@app.command("set-txn-tc-batch-log")
def set_tc_batch_log(ctx: typer.Context,
                     enable: Optional[bool] = typer.Option(None, "--enable/--disable", help="Switch batching."),
                     reload: bool = typer.Option(False, "--reload", help="Unload every coordinator so it reopens "
                                                 "(shows the plan and asks; --yes to skip)."),
                     yes: bool = YesOpt, dry_run: bool = DryRunOpt, assume_version_ok: Optional[str] = AssumeVersionOk,
                     output: Optional[str] = Output) -> None:
    """Enable or disable batched writes of the transaction coordinator log (PIP-160).

    --enable first asks every active broker its version and refuses while one is older than 2.11.0 or cannot say.
    """
    _set_batch(ctx, "tc", enable, reload, output, yes, dry_run, assume_version_ok)


@app.command("set-txn-pending-ack-batch-log")
def set_pending_ack_batch_log(ctx: typer.Context,
                              enable: Optional[bool] = typer.Option(None, "--enable/--disable", help="Switch batching."),
                              reload: bool = typer.Option(False, "--reload",
                                                          help="Unload every topic with a pending-ack store (shows "
                                                               "the plan and asks; --yes to skip)."),
                              yes: bool = YesOpt, dry_run: bool = DryRunOpt,
                              assume_version_ok: Optional[str] = AssumeVersionOk,
                              output: Optional[str] = Output) -> None:
    """Enable or disable batched writes of the pending-ack stores (PIP-160).

    --enable first asks every active broker its version and refuses while one is older than 2.11.0 or cannot say.
    """
    _set_batch(ctx, "pending-ack", enable, reload, output, yes, dry_run, assume_version_ok)


@app.command("get-txn-tc-batch-log-stat")
def get_tc_batch_log_stat(ctx: typer.Context, output: Optional[str] = Output) -> None:
    """Batching flag and, per coordinator, whether it batches (derived; see `derived` in the output)."""
    from ..admin.batchlog import tc_batch_log_stat

    _print(_run(ctx, lambda a: tc_batch_log_stat(a, _target_url(ctx))), output)


@app.command("get-txn-pending-ack-batch-log-stat")
def get_pending_ack_batch_log_stat(ctx: typer.Context, output: Optional[str] = Output) -> None:
    """Batching flag and, per subscription, whether its store batches (derived; see `derived`)."""
    from ..admin.batchlog import pending_ack_batch_log_stat

    _print(_run(ctx, lambda a: pending_ack_batch_log_stat(a, _target_url(ctx))), output)


# -- beyond pulsar-admin -----------------------------------------------------------------------

# A column of a transaction table: its header, and what a row shows in it.
_Column = tuple[str, Callable[[dict], str]]


def _txn_table(rows: list[dict], title: str, columns: list[_Column], wide: int,
               notes: Callable[[dict], list[str]]) -> None:
    """The one transaction table: a line per transaction, its id whole, and ``notes`` on lines under it; the last
    ``wide`` columns only with -o wide. Just the title when there is none."""
    from .render import print_rows

    if not rows:
        typer.echo(title)
        return
    print_rows([header for header, _ in columns], [[cell(r) for _, cell in columns] for r in rows],
               [notes(r) for r in rows], title, extra=wide)


def _hanging_table(rows: list[dict], title: str) -> None:
    """find-hanging's: why each hangs and the command that aborts it on lines under it; -o wide adds open time and
    partitions."""
    from .render import age, human_value

    def timeout(r: dict) -> str:
        at = r.get("timeoutMs")
        return "-" if not at else human_value("timeoutAt", at) if at > 10**12 else age(at)

    columns: list[_Column] = [
        ("TXN ID", lambda r: r["txnId"]),
        ("STATUS", lambda r: r["status"] or "-"),
        ("AGE", lambda r: age(r["ageMs"])),
        ("TIMEOUT", timeout),
        ("OWNER", lambda r: r.get("owner") or "-"),
        ("OPENED (UTC)", lambda r: human_value("openTimestamp", r.get("openTimestamp"), compact=True)),
        ("PARTITIONS", lambda r: str(len(r.get("producedPartitions", [])) + len(r.get("ackedPartitions", [])))),
    ]

    def notes(r: dict) -> list[str]:
        why = [f"why: {reason}" for reason in r.get("reasons", [])]
        note = [f"note: {r['note']}"] if r.get("note") else []
        return why + note + ([r["abortCommand"]] if r.get("abortCommand") else [])

    _txn_table(rows, title, columns, wide=2, notes=notes)


class _TopicFilter:
    """--topic: a transaction touches a topic when it produced to it or acked on it (any partition of it)."""

    def __init__(self, topic: str):
        self.topic = topic

    def __call__(self, row: dict) -> bool:
        from ..procedures.bulk_abort import touches_topic

        return touches_topic(row, self.topic)

    def require_known(self, admin: Any, matched: int) -> None:
        """No transaction touches it and the target has no such topic: Pulsar's 404 "Topic not found", not "0 open".
        (A topic deleted under open transactions is still matched by them: find-hanging looks for exactly those.)"""
        from ..procedures.bulk_abort import require_topic_known

        if not matched:
            require_topic_known(admin, self.topic)


def _topic_filter(topic: Optional[str]) -> Optional[_TopicFilter]:
    """The --topic filter, its name checked as Pulsar's TopicName checks it (pulsar-admin's answer, exit 1)."""
    if topic is None:
        return None
    from ..names import normalize_topic

    try:
        return _TopicFilter(normalize_topic(topic))
    except ValueError as exc:
        _fail(str(exc))

# the filters `list` and `abort` share
StateOpt = typer.Option(None, "--state", help="Only this state (repeatable): OPEN, COMMITTING, COMMITTED, ABORTING, "
                                              "ABORTED.")
OwnerOpt = typer.Option(None, "--owner", help="Only transactions of this owner (the client's role, exactly).")
OlderThanOpt = typer.Option(None, "--older-than", help="Only transactions open longer than this, e.g. 90s, 5m, 2h, "
                                                       "1h30m (on the target's clock; a bare number is seconds).")
IdPatternOpt = typer.Option(None, "--id-pattern", help="Only ids matching this glob over the id as printed, e.g. "
                                                       "'(1,*)' or '1,4?' (parentheses added when missing).")
CoordinatorOpt = typer.Option(None, "--coordinator-id", "-c", help="Only this coordinator's transactions.")
TopicOpt = typer.Option(None, "--topic", "-t", help="Only transactions that produced to or acked on it.")


def _filter(states, owner, older_than, coordinator_id, topic, id_pattern):
    from ..procedures.bulk_abort import TxnFilter

    try:
        return TxnFilter.from_options(states, owner, older_than, coordinator_id, topic, id_pattern)
    except ValueError as exc:
        _fail(str(exc))


def _select(ctx: typer.Context, flt, clock: str):
    from ..procedures.bulk_abort import NoTargetClockError, select

    try:
        return _run(ctx, lambda a: select(a, flt, clock))
    except NoTargetClockError as exc:
        _fail(f"{exc}; --older-than needs the target's clock (this machine's may differ)")


def _list_table(rows: list[dict], now_ms: int, title: str) -> None:
    """Oldest first, one line per transaction with its id whole; -o wide adds when it opened and times out."""
    from ..procedures.bulk_abort import time_left_ms
    from .render import age, human_value, print_rows

    if not rows:
        typer.echo(title)
        return
    cells = []
    for r in sorted(rows, key=lambda r: (-r["ageMs"], r["txnId"])):
        left = time_left_ms(r, now_ms)
        cells.append([r["txnId"], r["status"] or "-", r.get("owner") or "-", age(r["ageMs"]),
                      "-" if left is None else age(left) if left >= 0 else f"past by {age(-left)}",
                      str(len(r.get("producedPartitions", []))), str(len(r.get("ackedPartitions", []))),
                      human_value("openTimestamp", r.get("openTimestamp"), compact=True),
                      "-" if left is None else human_value("openTimestamp", now_ms + left, compact=True)])
    print_rows(["TXN ID", "STATE", "OWNER", "AGE", "TIMEOUT LEFT", "PRODUCED", "ACKED", "OPENED (UTC)",
                "TIMES OUT (UTC)"], cells, title=title, extra=2)


@app.command("list")
def list_transactions(ctx: typer.Context, coordinator_id: Optional[int] = CoordinatorOpt,
                      topic: Optional[str] = TopicOpt, state: Optional[list[str]] = StateOpt,
                      owner: Optional[str] = OwnerOpt, older_than: Optional[str] = OlderThanOpt,
                      id_pattern: Optional[str] = IdPatternOpt, output: Optional[str] = Output,
                      no_headers: bool = NoHeaders) -> None:
    """Open transactions per coordinator, oldest first, with state, owner, age and timeout left.

    Exit 1 when a coordinator could not be listed (the others are shown, and why that one was not on stderr).
    """
    from ..admin.auth import mask

    flt = _filter(state, owner, older_than, coordinator_id, topic, id_pattern)
    # ages on this machine's clock unless one decides the selection (no extra call when nothing needs it)
    found = _select(ctx, flt, "auto" if older_than is not None else "local")
    touches = _topic_filter(topic)
    if touches is not None and not found.rows:
        _run(ctx, lambda a: touches.require_known(a, 0))  # pulsar-admin's "Topic not found", not "0 open"
    where = _target_url(ctx)
    title = f"{counted(len(found.rows), 'open transaction')} on {where}" + ("" if flt.is_empty() else f" ({flt.describe()})")
    _print(found.rows, output or "table", table=lambda v: _list_table(v, found.now_ms, title))
    for tc_id, reason in sorted(found.unreadable.items()):
        typer.echo(mask(f"coordinator {tc_id}: its transactions could not be listed: {reason}"), err=True)
    if found.unreadable:
        raise typer.Exit(1)


@app.command("abort")
def abort_matching(ctx: typer.Context, coordinator_id: Optional[int] = CoordinatorOpt,
                   topic: Optional[str] = TopicOpt, state: Optional[list[str]] = StateOpt,
                   owner: Optional[str] = OwnerOpt, older_than: Optional[str] = OlderThanOpt,
                   id_pattern: Optional[str] = IdPatternOpt,
                   all_: bool = typer.Option(False, "--all", help="Abort every open transaction (no filter)."),
                   yes: bool = YesOpt, dry_run: bool = DryRunOpt, output: Optional[str] = Output) -> None:
    """Abort every transaction the filters select, after showing the plan (pulsar-admin aborts one by id).

    Exit 0 when every planned transaction was aborted or ended by itself meanwhile (and on --dry-run or when
    nothing matches); 1 when any was not (each one's outcome is printed), a coordinator could not be listed,
    the plan was declined or could not be asked about (no terminal and no --yes), or on a usage error.
    """
    from ..admin.auth import mask
    from ..procedures.bulk_abort import all_done
    from ._target import resolve_for
    from .confirm import Plan, confirm
    from .render import age

    flt = _filter(state, owner, older_than, coordinator_id, topic, id_pattern)
    if flt.is_empty() and not all_:
        _fail("transactions abort needs a filter (--state, --owner, --older-than, --coordinator-id, --topic, "
              "--id-pattern), or --all to abort every open transaction")
    if all_ and not flt.is_empty():
        _fail("--all aborts every open transaction: give either --all or filters, not both")
    # many aborts at once: never on a target the operator did not name
    target = resolve_for(ctx, require_named="transactions abort", on_error=_unreachable)
    found = _select(ctx, flt, "auto")
    for tc_id, reason in sorted(found.unreadable.items()):
        typer.echo(mask(f"coordinator {tc_id}: its transactions could not be listed, so none of them is in the "
                        f"plan: {reason}"), err=True)
    rows = found.rows
    report = {"target": target.url, "filter": flt.to_json(), "clock": found.clock,
              "unlistedCoordinators": {str(k): v for k, v in sorted(found.unreadable.items())}}
    if not rows:
        if output in ("json", "yaml"):
            _print({**report, "planned": 0, "results": []}, output)
        else:
            typer.echo(f"no open transaction matches ({flt.describe()}) on {target.url}: nothing to abort")
        raise typer.Exit(1 if found.unreadable else 0)
    clock = "" if found.clock == "target" else " (ages by this machine's clock: the target sent none)"
    steps = [mask(f"abort {r['txnId']} on coordinator {r['coordinatorId']}, owner {r.get('owner') or '-'}, "
                  f"{r['status']}, open {age(r['ageMs'])}") for r in rows]
    steps += [f"skip coordinator {k}: it could not be listed" for k in sorted(found.unreadable)]
    plan = Plan(f"abort {counted(len(rows), 'transaction')} ({flt.describe()}){clock}", target.label, steps,
                {"transactions": [{k: r.get(k) for k in ("txnId", "coordinatorId", "owner", "status", "ageMs")}
                                  for r in rows],
                 "coordinators": sorted({r["coordinatorId"] for r in rows}, key=_coordinator_order), **report},
                summary=_plan_summary(rows, found.unreadable))
    try:
        # -o json/yaml: the plan goes to stderr, stdout stays one document
        proceed = confirm(plan, yes=yes, dry_run=dry_run, output="json" if output in ("json", "yaml") else "table")
    except typer.Exit as exc:
        raise typer.Exit(1 if exc.exit_code else 0) from None  # pulsar-admin's codes: any failure is 1
    if not proceed:
        raise typer.Exit(0)
    from .aborting import abort_rows, account

    results = abort_rows(lambda call: _run(ctx, call), rows, None if output in ("json", "yaml") else typer.echo)
    if output in ("json", "yaml"):
        from ..procedures.bulk_abort import summary

        _print({**report, "plan": plan.to_json(), "planned": len(rows), "results": results,
                "summary": summary(results)}, output)
    else:
        for line in account(results, target.url):
            typer.echo(line)
    raise typer.Exit(0 if all_done(results) and not found.unreadable else 1)


def _coordinator_order(tc: Optional[int]) -> tuple[bool, int]:
    return tc is None, tc if tc is not None else 0


def _plan_summary(rows: list[dict], unlisted: dict) -> list[str]:
    """A long plan in a few lines: how many on each coordinator, by state, and the first ids in the plan's order."""
    from collections import Counter

    from .aborting import first_ids

    by: dict[Optional[int], Counter] = {}
    for r in rows:
        by.setdefault(r["coordinatorId"], Counter())[r["status"] or "-"] += 1
    lines = [f"{counted(len(rows), 'transaction')} on {counted(len(by), 'coordinator')}:"]
    for tc in sorted(by, key=_coordinator_order):
        lines.append(f"  coordinator {'-' if tc is None else tc}: "
                     + ", ".join(f"{n} {state}" for state, n in sorted(by[tc].items())))
    lines.append(f"first: {first_ids([r['txnId'] for r in rows])}")
    lines += [f"skip coordinator {k}: it could not be listed" for k in sorted(unlisted)]
    return lines


@app.command("find-hanging")
def find_hanging(ctx: typer.Context,
                 max_transaction_timeout: str = typer.Option(
                     "15", "--max-transaction-timeout", show_default=False,
                     help="Older open transactions hang: e.g. 15m, 90s, 2h (a bare number is minutes) [default: 15m]."),
                 coordinator_id: Optional[int] = typer.Option(None, "--coordinator-id", "-c"),
                 topic: Optional[str] = typer.Option(None, "--topic", "-t",
                                                     help="Only transactions that produced to or acked on it."),
                 abort: bool = typer.Option(False, "--abort", help="Abort what was found, after showing the plan."),
                 yes: bool = YesOpt,
                 dry_run: bool = DryRunOpt,
                 output: Optional[str] = Output,
                 no_headers: bool = NoHeaders) -> None:
    """Open longer than the max timeout, or touching partitions that no longer exist.

    Exit 1 when any hang (0 when none, or when --abort aborted every one of them).
    """
    from ..admin.hanging import find_hanging as find
    from ..admin.hanging import open_transactions
    from ..durations import parse_duration_ms
    from .confirm import Plan, confirm

    if (yes or dry_run) and not abort:
        _fail("--yes and --dry-run go with --abort")
    try:
        hang_minutes = parse_duration_ms(max_transaction_timeout, "--max-transaction-timeout", "m") / 60_000
    except ValueError as exc:
        _fail(str(exc))
    if abort:  # aborting changes a cluster: never on a target the operator did not name
        from ._target import resolve_for

        resolve_for(ctx, require_named="find-hanging --abort", on_error=_unreachable)
    touches = _topic_filter(topic)

    def look(admin):
        every = open_transactions(admin, coordinator_id)
        found = find(admin, hang_minutes, coordinator_id)
        if touches is not None:
            every = [r for r in every if touches(r)]
            found = [r for r in found if touches(r)]
            touches.require_known(admin, len(every))
        return len(every), found

    open_count, rows = _run(ctx, look)
    for row in rows:  # pasted, each acts on this target (Target.command: the one way to name it again)
        if row["coordinatorId"] is not None:  # an odd key (see its note) names nothing abort-transaction takes
            row["abortCommand"] = _target(ctx).command("transactions abort-transaction", "--txn-id", row["txnId"])
    where = _target_url(ctx)
    title = f"{len(rows)} hanging of {counted(open_count, 'open transaction')} on {where}"
    if not abort:
        def table(v: list[dict]) -> None:
            _hanging_table(v, title)
            _abort_hints(v)

        _print(rows, output or "table", table=table)
        raise typer.Exit(1 if rows else 0)
    if not rows:
        _print([], output or "table", table=lambda v: typer.echo(f"{title}: nothing to abort"))
        raise typer.Exit(0)
    target = _target(ctx)
    plan = Plan(f"abort {counted(len(rows), 'hanging transaction')}", f"{target.url} (from {target.source})",
                [f"abort {r['txnId']}: {'; '.join(r['reasons'])}" for r in rows],
                {"transactions": [{k: r.get(k) for k in ("txnId", "coordinatorId", "owner", "status", "ageMs")}
                                  for r in rows]}, summary=_plan_summary(rows, {}))
    try:
        proceed = confirm(plan, yes=yes, dry_run=dry_run, output=output or "table")
    except typer.Exit as exc:
        raise typer.Exit(1 if exc.exit_code else 0) from None  # pulsar-admin's codes: any failure is 1
    if not proceed:
        raise typer.Exit(0)
    from ..procedures.bulk_abort import all_done, summary
    from .aborting import abort_rows, account

    # the one abort procedure and its outcomes, as `transactions abort` reports them
    as_document = output in ("json", "yaml")
    results = abort_rows(lambda call: _run(ctx, call), rows, None if as_document else typer.echo)
    if as_document:
        _print({"target": target.url, "plan": plan.to_json(), "planned": len(rows), "results": results,
                "summary": summary(results)}, output)
    else:
        for line in account(results, where, "hanging transaction"):
            typer.echo(line)
    raise typer.Exit(0 if all_done(results) else 1)


def _abort_hints(rows: list[dict]) -> None:
    if rows:
        typer.echo("to abort them all: add --abort (it shows the plan first); one by one: the command under each")
