"""`txnadmin upgrade`: enable PIP-160 batching after a rolling upgrade, and confirm it took."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .render import output_option
from ._common import EXIT_FAILURE, EXIT_OK, fail, print_json, waiting_notice
from ._target import AdminUrl, Conf, hint, open_target
from .confirm import DryRunOpt, Plan, YesOpt, confirm


def upgrade(
    ctx: typer.Context,
    min_version: str = typer.Option("2.11.0", "--min-version", help="Oldest broker version that reads batched entries."),
    no_reload: bool = typer.Option(False, "--no-reload", help="Do not unload stores; confirm after your own restart."),
    max_records: Optional[int] = typer.Option(None, "--max-records", help="…BatchedWriteMaxRecords for both logs: "
                                              "not dynamic in Pulsar, so the plan prints the broker.conf lines and "
                                              "the run checks every broker shows them."),
    max_size: Optional[int] = typer.Option(None, "--max-size", help="…BatchedWriteMaxSize (bytes) for both logs "
                                           "(broker.conf, as --max-records)."),
    max_delay_ms: Optional[int] = typer.Option(None, "--max-delay-ms", help="…BatchedWriteMaxDelayInMillis "
                                               "(broker.conf, as --max-records)."),
    assume_version_ok: Optional[str] = typer.Option(
        None, "--assume-version-ok", help="BROKER,...: brokers that cannot be asked directly (behind a proxy) and "
                                          "that you checked yourself."),
    preflight: bool = typer.Option(
        False, "--preflight", help="Only the transaction-permissions pre-flight for upgrading the brokers to --to: "
                                   "the transaction owners seen and whether their grants cover what their "
                                   "transactions touch (checked from 4.0.14, 4.2.5 and 5.0.0, apache/pulsar#26644). "
                                   "Changes nothing; exit 0 all pass, 1 an owner would be refused, 3 cannot tell."),
    to: Optional[str] = typer.Option(None, "--to", help="With --preflight: the Pulsar release the brokers are being "
                                                        "upgraded to."),
    yes: bool = YesOpt,
    dry_run: bool = DryRunOpt,
    admin_url: Optional[str] = AdminUrl,
    conf: Optional[Path] = Conf,
    output: str = output_option("table"),
) -> None:
    """Check broker versions, enable batching for coordinators and pending-ack stores, confirm every store batches.

    Shows its plan and asks first (--yes to skip, --dry-run to only print it). Exit 0 when every store reports
    enabled (and every broker shows the thresholds asked), 1 when not (or brokers are too old), 2 without
    confirmation, 3 when the target is unreadable.
    """
    from ..procedures.upgrade import UpgradeError, check_versions, parse_version, upgrade as run
    from ._common import EXIT_USAGE

    try:
        parse_version(min_version)
    except ValueError:
        fail(f"--min-version {min_version!r}: not a version such as 2.11.0", EXIT_USAGE)
    if preflight or to is not None:
        _preflight(ctx, preflight, to, admin_url, conf, output)
    from ..admin.batchlog import THRESHOLDS_NOT_DYNAMIC, broker_conf_lines
    from ..procedures.upgrade import threshold_settings

    try:
        thresholds = threshold_settings(max_records, max_size, max_delay_ms)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    target, admin = open_target(ctx, admin_url, conf, require_named="upgrade")  # closed when the command ends
    try:
        if output != "json" and not dry_run:
            typer.echo(f"target: {target.label}")
        assume = [b.strip() for b in (assume_version_ok or "").split(",") if b.strip()]
        with waiting_notice(admin, target.url):
            versions, _ = check_versions(admin, min_version, assume)
        steps = [f"brokers checked: {', '.join(f'{b} runs {v}' for b, v in sorted(versions.items()))} "
                 f"(all >= {min_version})",
                 "set transactionLogBatchedWriteEnabled=true and transactionPendingAckBatchedWriteEnabled=true"]
        steps.append("unload nothing (--no-reload)" if no_reload else
                     "unload every coordinator and every topic with a pending-ack store so they reopen batching")
        if thresholds:  # said before anything changes: txnadmin cannot set them, the operator must
            steps.append(f"the thresholds asked are {THRESHOLDS_NOT_DYNAMIC} (txnadmin sets none of them, and the "
                         "upgrade is complete only once every broker's runtime configuration shows them):")
            steps += [f"broker.conf: {line}" for line in broker_conf_lines(thresholds)]
        if not confirm(Plan("PIP-160 upgrade: enable batching", target.label, steps, {"reload": not no_reload}),
                       yes=yes, dry_run=dry_run, output=output):
            return
        with waiting_notice(admin, target.url):
            result = run(admin, target.url, min_version, not no_reload, thresholds, assume)
    except UpgradeError as exc:
        fail(hint(ctx, str(exc)), exc.exit_code)
    if output == "json":
        print_json(dict(result.to_json(), target={"url": target.url, "source": target.source}))
    else:
        typer.echo(f"checked: {result.checked}")
        for w in result.warnings:
            typer.echo(f"warning: {w}")
        on_tc = sum(1 for c in result.coordinators if list(c.values())[0])
        on_sub = sum(1 for s in result.subscriptions if s["batchLogEnabled"])
        typer.echo(f"batching enabled: {on_tc}/{len(result.coordinators)} coordinators, "
                   f"{on_sub}/{len(result.subscriptions)} pending-ack stores")
        for broker, missing in sorted(result.not_in_effect.items()):
            typer.echo(f"thresholds not in effect on {broker}: "
                       + ", ".join(f"{k} is {v}" for k, v in missing.items()))
        if result.not_in_effect:
            typer.echo(f"the thresholds are {THRESHOLDS_NOT_DYNAMIC}; the lines:")
            for line in broker_conf_lines(result.thresholds):
                typer.echo(f"  {line}")
            again = " ".join(f"{flag} {value}" for flag, value in (("--max-records", max_records),
                                                                    ("--max-size", max_size),
                                                                    ("--max-delay-ms", max_delay_ms)) if value)
            typer.echo(hint(ctx, f"then run `txnadmin upgrade {again}` again to confirm them"))
        typer.echo("watch next:")
        for item in result.to_json()["watch"]:
            typer.echo(hint(ctx, f"  - {item}"))
        typer.echo("verdict: " + ("enabled everywhere" if result.confirmed else
                                  "not complete: the thresholds asked are not in effect yet"
                                  if result.not_in_effect and result.enabled else "not confirmed everywhere yet"))
    raise typer.Exit(EXIT_OK if result.confirmed else EXIT_FAILURE)


def _preflight(ctx: typer.Context, preflight: bool, to: Optional[str], admin_url: Optional[str],
               conf: Optional[Path], output: str) -> None:
    from ..procedures.upgrade import UpgradeError, parse_version, transaction_preflight
    from ._common import EXIT_USAGE

    if not preflight or to is None:
        fail("--preflight and --to VERSION go together: `txnadmin upgrade --preflight --to 4.2.5`", EXIT_USAGE)
    try:
        parse_version(to)
    except ValueError:
        fail(f"--to {to!r}: not a version such as 4.2.5", EXIT_USAGE)
    target, admin = open_target(ctx, admin_url, conf, require_named="upgrade")
    try:
        with waiting_notice(admin, target.url):
            result = transaction_preflight(admin, to)
    except UpgradeError as exc:
        fail(str(exc), exc.exit_code)
    if output == "json":
        print_json(dict(result.to_json(), target={"url": target.url, "source": target.source}))
        raise typer.Exit(result.exit_code)
    typer.echo(f"target: {target.label}")
    p = result.preflight
    if p is None:
        typer.echo(f"{to} does not check a transaction's participants against its owner's grants (that starts in "
                   f"{' / '.join(result.to_json()['checkedFrom'])}, apache/pulsar#26644): nothing changes for "
                   "transaction owners")
        raise typer.Exit(result.exit_code)
    typer.echo(f"upgrade to {to}: brokers check that a transaction's owner may produce to each partition and consume "
               "each subscription it adds (apache/pulsar#26644)")
    if p.reason:
        typer.echo(f"{p.status}: {p.reason}")
    for unread in result.unread:
        typer.echo(f"cannot tell: transactions of {unread}")
    for owner in p.owners:
        if owner.missing:
            typer.echo(f"{owner.role}: would be refused: missing {'; '.join(owner.missing)}")
        elif owner.unknown:
            typer.echo(f"{owner.role}: cannot tell: {'; '.join(owner.unknown)}")
        elif owner.passes:
            typer.echo(f"{owner.role}: passes ({owner.passes})")
    if p.ownerless:
        typer.echo(f"{len(p.ownerless)} transaction(s) without an owner: not judged")
    typer.echo(f"coverage: {p.coverage}")
    raise typer.Exit(result.exit_code)
