"""`txnadmin transactions` (alias `txn`): pulsar-admin's 14 subcommands, PIP-160's batch-log commands, and more.

Default output is pulsar-admin's (Jackson pretty JSON, map lines); `-o json` is always JSON, `-o table`
a rich view. Exit codes are pulsar-admin's: 0 success, 1 any failure.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

import typer

app = typer.Typer(help="Operations on transactions (pulsar-admin transactions).", no_args_is_help=True)

Output = typer.Option(None, "--output", "-o", help="json (always JSON) or table (for people); default: pulsar-admin's.")
Topic = typer.Option(..., "--topic", "-t", help="Topic name (persistent://t/ns/x, t/ns/x or x).")
SubName = typer.Option(..., "--sub-name", "--subscription-name", "-s", help="Subscription name.")
SubscriptionName = typer.Option(..., "--subscription-name", "--sub-name", "-s", help="Subscription name.")
Most = typer.Option(..., "--most-sig-bits", "-m", help="Most significant bits of the TxnID (the coordinator id).")
Least = typer.Option(..., "--least-sig-bits", "-l", help="Least significant bits of the TxnID.")
Metadata = typer.Option(False, "--metadata", "-m", help="Include ledger metadata.")
LowWaterMark = typer.Option(False, "--low-water-mark", "-l", help="Include each coordinator's low water mark.")


def _fail(message: str) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(1)


def _run(ctx: typer.Context, call: Callable[[Any], Any]) -> Any:
    """Resolve the target from the root options, make the call, turn every failure into pulsar-admin's form."""
    from ..admin.protocol import AdminError, TargetUnreachableError
    from ..admin.target import open_admin, resolve_target

    opts = (ctx.find_root().obj or {})
    try:
        target = resolve_target(opts.get("admin_url"), opts.get("conf"), opts.get("auth_plugin"),
                                opts.get("auth_params"), opts.get("tls"))
        admin = open_admin(target)
    except TargetUnreachableError as exc:
        _fail(f"{exc.reason}\n\nError connecting to Pulsar")
    ctx.obj = {"target": target}
    try:
        return call(admin)
    except TargetUnreachableError as exc:
        _fail(f"{exc.reason}\n\nError connecting to Pulsar")
    except AdminError as exc:
        _fail(f"{exc.reason}\n\nReason: {exc.reason}")
    finally:
        getattr(admin, "close", lambda: None)()


def _print(value: Any, output: Optional[str], default: Callable[[Any], str] | None = None,
           table: Callable[[Any], None] | None = None) -> None:
    import json

    from ..admin.jackson import pretty

    if output not in (None, "json", "table"):
        _fail(f"--output {output!r}: use json or table")
    if value is None and output != "json":
        return
    if output == "json":
        typer.echo(json.dumps(value, indent=2))
    elif output == "table":
        (table or _generic_table)(value)
    else:
        text = default(value) if default else pretty(value)
        if text:  # an empty map prints nothing, as pulsar-admin does
            typer.echo(text)


def _generic_table(value: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True)
    table.add_column("field")
    table.add_column("value")

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict) and v:
            for k, sub in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), sub)
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, sub in enumerate(v):
                walk(f"{prefix}[{i}]", sub)
        else:
            table.add_row(prefix, str(v))

    walk("", value)
    Console().print(table)


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
    _print(_run(ctx, lambda a: a.coordinator_internal_stats(coordinator_id, metadata)), output)


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
                      output: Optional[str] = Output) -> None:
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
def transaction_in_buffer_stats(ctx: typer.Context, most: int = Most, least: int = Least, topic: str = Topic,
                                output: Optional[str] = Output) -> None:
    """Get transaction stats in transaction buffer."""
    from ..admin.protocol import TxnId

    _print(_run(ctx, lambda a: a.transaction_in_buffer_stats(TxnId(most, least), topic)), output)


@app.command("transaction-in-pending-ack-stats")
def transaction_in_pending_ack_stats(ctx: typer.Context, most: int = Most, least: int = Least, topic: str = Topic,
                                     sub_name: str = SubName, output: Optional[str] = Output) -> None:
    """Get transaction stats in pending ack."""
    from ..admin.protocol import TxnId

    _print(_run(ctx, lambda a: a.transaction_in_pending_ack_stats(TxnId(most, least), topic, sub_name)), output)


@app.command("transaction-metadata")
def transaction_metadata(ctx: typer.Context, most: int = Most, least: int = Least,
                         output: Optional[str] = Output) -> None:
    """Get transaction metadata."""
    from ..admin.protocol import TxnId

    _print(_run(ctx, lambda a: a.transaction_metadata(TxnId(most, least))), output)


@app.command("slow-transactions")
def slow_transactions(ctx: typer.Context, coordinator_id: Optional[int] = typer.Option(None, "--coordinator-id", "-c"),
                      time_: str = typer.Option(..., "--time", "-t", help="Timeout, e.g. 1s, 5m, 2h (none = seconds)."),
                      output: Optional[str] = Output) -> None:
    """Get slow transactions (Pulsar's rule: configured timeout greater than --time)."""
    from ..admin.jackson import map_lines

    try:
        timeout_ms = parse_relative_time(time_)
    except ValueError as exc:
        _fail(str(exc))
    result = _run(ctx, lambda a: a.slow_transactions(timeout_ms, coordinator_id))
    _print(result, output, lambda v: map_lines(v, "TransactionMetadata"))


@app.command("scale-transactionCoordinators")
def scale_coordinators(ctx: typer.Context, replicas: int = typer.Option(0, "--replicas", "-r"),
                       output: Optional[str] = Output) -> None:
    """Update the transaction coordinator number (grow only)."""
    _run(ctx, lambda a: a.scale_coordinators(replicas))
    if output == "json":
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
def coordinators_list(ctx: typer.Context, output: Optional[str] = Output) -> None:
    """List transaction coordinators (`<id>    <brokerServiceUrl>` lines)."""
    result = _run(ctx, lambda a: a.list_coordinators())
    _print(result, output, lambda v: "\n".join(f"{c['id']}    {c['brokerServiceUrl']}" for c in v))


@app.command("abort-transaction")
def abort_transaction(ctx: typer.Context, most: int = Most, least: int = Least, output: Optional[str] = Output) -> None:
    """Abort a transaction."""
    from ..admin.protocol import TxnId

    _run(ctx, lambda a: a.abort_transaction(TxnId(most, least)))
    if output == "json":
        _print({"txnId": f"({most},{least})", "status": "ABORTED"}, output)


# -- PIP-160's proposed batch-log commands -----------------------------------------------------

from .confirm import DryRunOpt, YesOpt  # noqa: E402  (option objects only; the helper is imported lazily)

def _target_url(ctx: typer.Context) -> str:
    return (ctx.obj or {}).get("target").url


def _set_batch(ctx, component: str, enable: Optional[bool], reload: bool, output: Optional[str],
               yes: bool = False, dry_run: bool = False) -> None:
    from ..admin.batchlog import reload_units, set_batch_log
    from ..admin.protocol import TargetUnreachableError
    from ..admin.target import require_named, resolve_target
    from .confirm import Plan, confirm

    if enable is None:
        _fail("give --enable or --disable")
    opts = ctx.find_root().obj or {}
    name = "set-txn-tc-batch-log" if component == "tc" else "set-txn-pending-ack-batch-log"
    try:  # a cluster-wide change: never on a target the operator did not name
        target = require_named(resolve_target(opts.get("admin_url"), opts.get("conf"), opts.get("auth_plugin"),
                                              opts.get("auth_params"), opts.get("tls")), name)
    except TargetUnreachableError as exc:
        _fail(f"{exc.reason}\n\nError connecting to Pulsar")
    if reload or dry_run:
        units = _run(ctx, lambda a: reload_units(a, component)) if reload else []
        flag = "transactionLogBatchedWriteEnabled" if component == "tc" else "transactionPendingAckBatchedWriteEnabled"
        steps = [f"set {flag}={str(enable).lower()} (dynamic config)"]
        if reload:
            steps.append(f"unload {len(units)} {'coordinators' if component == 'tc' else 'topics'} so their stores "
                         "reopen with the new setting")
        if not confirm(Plan(f"{'enable' if enable else 'disable'} PIP-160 batching ({component})", target.label,
                            steps, {"unloads": len(units)}), yes=yes, dry_run=dry_run,
                       output="json" if output == "json" else "table"):
            return
    result = _run(ctx, lambda a: set_batch_log(a, _target_url(ctx), component, enable, reload))
    if output == "json":
        _print(result, output)
        return
    typer.echo(f"{result['config']} = {str(enable).lower()} (was {str(result['previous']).lower()})")
    if reload:
        typer.echo(f"reloaded {len(result['reloaded'])} {'coordinators' if component == 'tc' else 'topics'}: "
                   "their stores reopened with the new setting")
    else:
        typer.echo("note: Pulsar reads this flag only when a store opens; stores already open keep batching as "
                   "they were until reloaded (use --reload, or restart brokers)")


@app.command("set-txn-tc-batch-log")
def set_tc_batch_log(ctx: typer.Context,
                     enable: Optional[bool] = typer.Option(None, "--enable/--disable", help="Switch batching."),
                     reload: bool = typer.Option(False, "--reload", help="Unload every coordinator so it reopens "
                                                 "(shows the plan and asks; --yes to skip)."),
                     yes: bool = YesOpt, dry_run: bool = DryRunOpt,
                     output: Optional[str] = Output) -> None:
    """Enable or disable batched writes of the transaction coordinator log (PIP-160)."""
    _set_batch(ctx, "tc", enable, reload, output, yes, dry_run)


@app.command("set-txn-pending-ack-batch-log")
def set_pending_ack_batch_log(ctx: typer.Context,
                              enable: Optional[bool] = typer.Option(None, "--enable/--disable", help="Switch batching."),
                              reload: bool = typer.Option(False, "--reload",
                                                          help="Unload every topic with a pending-ack store (shows "
                                                               "the plan and asks; --yes to skip)."),
                              yes: bool = YesOpt, dry_run: bool = DryRunOpt,
                              output: Optional[str] = Output) -> None:
    """Enable or disable batched writes of the pending-ack stores (PIP-160)."""
    _set_batch(ctx, "pending-ack", enable, reload, output, yes, dry_run)


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

def _txn_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rows)} open transactions")
    for col in ("txnId", "status", "age", "owner", "timeout", "notes"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["txnId"], r["status"] or "", f"{r['ageMs'] / 1000:.1f}s", r.get("owner") or "",
                      f"{(r['timeoutMs'] or 0) / 1000:g}s", "; ".join(r.get("reasons", [])))
    Console().print(table)


@app.command("list")
def list_transactions(ctx: typer.Context, coordinator_id: Optional[int] = typer.Option(None, "--coordinator-id", "-c"),
                      output: Optional[str] = Output) -> None:
    """Open transactions per coordinator, oldest first, with age and owner."""
    from ..admin.hanging import open_transactions

    rows = _run(ctx, lambda a: open_transactions(a, coordinator_id))
    _print(rows, output or "table", table=_txn_table)


@app.command("find-hanging")
def find_hanging(ctx: typer.Context,
                 max_transaction_timeout: float = typer.Option(15.0, "--max-transaction-timeout",
                                                               help="Minutes; older open transactions hang."),
                 coordinator_id: Optional[int] = typer.Option(None, "--coordinator-id", "-c"),
                 output: Optional[str] = Output) -> None:
    """Open longer than the max timeout, or touching partitions that no longer exist (exit 1 if any)."""
    from ..admin.hanging import find_hanging as find

    rows = _run(ctx, lambda a: find(a, max_transaction_timeout, coordinator_id))
    _print(rows, output or "table", table=_txn_table)
    raise typer.Exit(1 if rows else 0)
