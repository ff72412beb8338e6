"""Guided enable of PIP-160 batching after a rolling upgrade, and the transaction-permissions pre-flight before one.

1. Check every broker reports a version that reads batched entries (PIP-160's reader and writer
   shipped in Pulsar 2.11.0); 2. enable both flags (dynamic config); 3. reload coordinators and
   topics with pending-ack stores so they reopen batching; 4. confirm every store reports enabled, and every
   broker's runtime configuration shows the thresholds asked (those are broker.conf settings, never set here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..admin.batchlog import (
    THRESHOLDS_NOT_DYNAMIC, broker_conf_lines, pending_ack_batch_log_stat, set_batch_log, tc_batch_log_stat,
    thresholds_not_in_effect,
)
from ..admin.cluster import (
    BATCH_READER_VERSION, RECORD, BrokerVersionError, ClusterView, VersionCheck, parse_version,
)
from ..admin.protocol import AdminError, TargetUnreachableError, TransactionsAdmin
from ..engine.config import BATCHED_WRITE_MINIMUMS, BATCHED_WRITE_PREFIXES
from .doctor.knowledge import PARTICIPANT_CHECKS, fixed_text, is_fixed, release
from .preflight import Preflight, judge

MIN_VERSION = BATCH_READER_VERSION
WATCH = [
    "pulsar_txn_tc_bufferedwriter_batch_records (records per entry; PIP-160 pays off when this is well above 1)",
    "pulsar_txn_tc_bufferedwriter_flush_trigger_max_delay_total vs _max_records_total (who decides the flushes)",
    "pulsar_txn_pending_ack_store_bufferedwriter_* (the same for pending-ack stores)",
    "txnadmin metrics <broker>/metrics for shares and a tuning recommendation",
]


class UpgradeError(Exception):
    """The upgrade cannot go on; ``exit_code`` 1 (brokers too old) or 3 (the target or a broker cannot be read).

    Its own type, not the downgrade's: a script catching one procedure's failure must not catch the other's."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class UpgradeResult:
    versions: dict[str, str]
    checked: str
    enabled: bool = False
    thresholds: dict = field(default_factory=dict)  # asked: they belong in broker.conf, never set by txnadmin
    not_in_effect: dict = field(default_factory=dict)  # broker → asked thresholds its runtime config does not show
    warnings: list[str] = field(default_factory=list)
    coordinators: list = field(default_factory=list)
    subscriptions: list = field(default_factory=list)

    @property
    def confirmed(self) -> bool:
        tc_ok = all(list(c.values())[0] for c in self.coordinators)
        sub_ok = all(s["batchLogEnabled"] for s in self.subscriptions)
        return self.enabled and tc_ok and sub_ok and not self.not_in_effect

    def to_json(self) -> dict:
        return {"versions": self.versions, "checked": self.checked, "enabled": self.enabled,
                "thresholds": {"asked": self.thresholds, "brokerConf": broker_conf_lines(self.thresholds),
                               "notInEffect": self.not_in_effect, "note": THRESHOLDS_NOT_DYNAMIC}
                if self.thresholds else {},
                "warnings": self.warnings, "confirmed": self.confirmed,
                "coodinatorArray": self.coordinators, "subscriptionArray": self.subscriptions, "watch": WATCH}


def threshold_settings(max_records: Optional[int], max_size: Optional[int],
                       max_delay_ms: Optional[int]) -> dict[str, str]:
    """The broker.conf settings the upgrade's --max-records/--max-size/--max-delay-ms ask, for both logs; ValueError
    naming the flag when a value is below what Pulsar's broker accepts at start with batching on."""
    flags = {"MaxRecords": "--max-records", "MaxSize": "--max-size", "MaxDelayInMillis": "--max-delay-ms"}
    out: dict[str, str] = {}
    for (suffix, minimum), value in zip(BATCHED_WRITE_MINIMUMS, (max_records, max_size, max_delay_ms), strict=True):
        if value is None:
            continue
        if value < minimum:
            raise ValueError(f"{flags[suffix]} {value}: must be at least {minimum} (a broker with batching on "
                             "refuses to start below it)")
        for prefix in BATCHED_WRITE_PREFIXES:
            out[f"{prefix}{suffix}"] = str(value)
    return out


def check_versions(admin: TransactionsAdmin, min_version: str = MIN_VERSION,
                   assume_ok: Optional[list[str]] = None) -> tuple[dict[str, str], str]:
    """Ask every active broker of the cluster its version (ClusterView's rule); refuse (exit 1) when any is older
    than ``min_version``, exit 3 when one cannot be asked and the operator did not vouch for it by name
    (``assume_ok``). Runs before anything is asked or changed."""
    check = _check(admin, min_version, assume_ok)
    return check.versions, check.checked


def _check(admin: TransactionsAdmin, min_version: str, assume_ok: Optional[list[str]]) -> VersionCheck:
    try:
        return ClusterView(admin).check_batch_readers(min_version, assume_ok)
    except BrokerVersionError as exc:
        raise UpgradeError(str(exc), 3 if exc.cannot_tell else 1) from None


def upgrade(admin: TransactionsAdmin, target: str, min_version: str = MIN_VERSION, reload: bool = True,
            thresholds: Optional[dict[str, str]] = None, assume_ok: Optional[list[str]] = None) -> UpgradeResult:
    check = _check(admin, min_version, assume_ok)
    result = UpgradeResult(check.versions, check.checked)
    set_batch_log(admin, target, "tc", True, reload, checked=check)
    set_batch_log(admin, target, "pending-ack", True, reload, checked=check)
    result.enabled = True
    result.coordinators = tc_batch_log_stat(admin, target)["coodinatorArray"]
    result.subscriptions = pending_ack_batch_log_stat(admin, target)["subscriptionArray"]
    if thresholds:  # never set through the admin API (Pulsar refuses them there): only read back from each broker
        result.thresholds = dict(thresholds)
        result.not_in_effect = thresholds_in_effect(admin, thresholds)
    return result


def thresholds_in_effect(admin: TransactionsAdmin, thresholds: dict[str, str]) -> dict[str, dict[str, str]]:
    """Broker → the thresholds asked that its runtime configuration does not show yet ({} when every broker shows
    them all); a broker whose configuration cannot be read shows none of them."""
    view = ClusterView(admin)
    out: dict[str, dict[str, str]] = {}
    for broker in view.active_brokers() or ["the admin URL's broker"]:
        try:
            runtime = view.broker_runtime_config(broker, fresh=True)
        except AdminError as exc:
            out[broker] = {name: f"unknown ({exc.reason})" for name in thresholds}
            continue
        missing = thresholds_not_in_effect(runtime, thresholds)
        if missing:
            out[broker] = missing
    return out


@dataclass
class TransactionPreflight:
    """Before upgrading the brokers to ``to``: the owners seen and their grants (``preflight.py``)."""

    to: str
    checks_participants: bool
    preflight: Optional[Preflight] = None
    unread: list[str] = field(default_factory=list)  # coordinators whose transactions could not be listed

    @property
    def exit_code(self) -> int:
        """1 when an owner would be refused; 3 when it cannot be told; 0 otherwise."""
        p = self.preflight
        if p is None:
            return 0
        if p.failing:
            return 1
        return 3 if p.status == "cannot tell" or p.undecided or self.unread else 0

    def to_json(self) -> dict:
        return {"to": self.to, "checksParticipants": self.checks_participants,
                "checkedFrom": fixed_text(PARTICIPANT_CHECKS["fixed"]), "unreadCoordinators": self.unread,
                "preflight": self.preflight.to_json() if self.preflight else None}


def transaction_preflight(admin: TransactionsAdmin, to: str) -> TransactionPreflight:
    """Would the transactions' owners seen now be refused by brokers of release ``to`` (apache/pulsar#26644)?

    Reads the coordinators' transactions, the runtime configuration and the grants the owners need; unreadable
    parts are "cannot tell", never a pass. Raises UpgradeError (3) when the target cannot be reached."""
    parse_version(to)  # ValueError names a text that is no version
    version = release(to)
    checks = version is not None and is_fixed(version, PARTICIPANT_CHECKS["fixed"])
    result = TransactionPreflight(to, checks)
    if not checks:
        return result
    view = ClusterView(admin, on_error=RECORD)
    try:
        coordinators, error = view.attempt("coordinators", admin.list_coordinators)
        transactions: dict[str, dict] = {}
        if error is not None and error.status != 503:  # 503: transactions off, so no owner to judge
            raise UpgradeError(f"cannot read the target: its transaction coordinators cannot be listed: "
                               f"{error.reason}", 3)
        for c in coordinators or []:
            listed, failed = view.attempt(f"slowTransactions {c['id']}", admin.slow_transactions, 0, int(c["id"]))
            if failed is not None:
                result.unread.append(f"coordinator {c['id']}: {failed.reason}")
            elif isinstance(listed, dict):
                transactions.update(listed)
        runtime = view.ask("runtime-config", admin.runtime_config)
        result.preflight = judge(view, runtime, transactions)
    except TargetUnreachableError as exc:
        raise UpgradeError(f"cannot read the target: {exc.reason}", 3) from None
    except (KeyError, TypeError, ValueError) as exc:  # an answer not shaped as Pulsar's
        raise UpgradeError(f"an answer the pre-flight cannot read: {type(exc).__name__}: {exc}", 3) from None
    return result
