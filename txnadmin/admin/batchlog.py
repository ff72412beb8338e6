"""PIP-160's proposed batch-log commands, built on the dynamic-config API Pulsar actually has.

Pulsar reads `transactionLogBatchedWriteEnabled` / `transactionPendingAckBatchedWriteEnabled` only
when a coordinator or pending-ack store opens, so a change reaches open stores only after they
reopen. txnadmin records when it made a change (in ``~/.txnadmin/batchlog-changes.json``) and
derives, per store, whether it has reopened since: its current (newest) ledger was created after
the change. Key names follow the PIP, typo included: ``coodinatorArray``.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Mapping, Optional

from .._fs import atomic_write_text
from ..names import coordinator_assign_partition
from .cluster import ClusterView, PendingAckStore, VersionCheck, flag_is_on
from .endpoints import coordinator_ids, log_stats
from .protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, NotFoundError, TransactionsAdmin

DERIVATION = ("derived: a store batches when the flag was on at its last open; it counts as reopened since "
              "txnadmin's last change when its newest ledger was created after that change")


# Pulsar's ServiceConfiguration marks only the two ...Enabled switches dynamic: the batched writers' thresholds
# (…MaxRecords, …MaxSize, …MaxDelayInMillis) are read from broker.conf when the broker starts.
THRESHOLDS_NOT_DYNAMIC = ("not dynamic in Pulsar (only transactionLogBatchedWriteEnabled and "
                          "transactionPendingAckBatchedWriteEnabled are): add to broker.conf on every broker and "
                          "restart it")


def broker_conf_lines(values: Mapping[str, object]) -> list[str]:
    """The broker.conf lines that set ``values`` (name → value), as an operator pastes them."""
    return [f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}" for name, value in values.items()]


def thresholds_not_in_effect(runtime: dict[str, object], asked: dict[str, str]) -> dict[str, str]:
    """Of the thresholds ``asked`` (name → value), those a broker's runtime configuration shows otherwise (its value,
    or "unset")."""
    return {name: str(runtime.get(name, "unset")) for name, value in asked.items()
            if str(runtime.get(name, "")).strip() != str(value)}


def changes_file() -> Path:
    return Path(os.environ.get("TXNADMIN_HOME", Path.home() / ".txnadmin")) / "batchlog-changes.json"


def _load_changes() -> dict:
    try:
        return json.loads(changes_file().read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def recorded_change(target: str, flag: str) -> Optional[dict]:
    """The last change of ``flag`` txnadmin made on ``target`` ({enabled, previous, at}), or None if it made none."""
    return _load_changes().get(target, {}).get(flag)


def _save_change(target: str, flag: str, enabled: bool, previous: bool) -> None:
    changes = _load_changes()
    changes.setdefault(target, {})[flag] = {"enabled": enabled, "previous": previous, "at": int(time.time() * 1000)}
    atomic_write_text(changes_file(), json.dumps(changes, indent=2))


def _flag_value(admin: TransactionsAdmin, flag: str) -> bool:
    return flag_is_on(admin.runtime_config(), flag)


def reload_units(admin: TransactionsAdmin, component: str, concurrency: int = 16) -> list[str]:
    """What `--reload` unloads: every coordinator's assign partition, or every topic with a pending-ack store.

    A store whose topic is no longer listed has nothing to unload (it reopens with its topic, if that comes back).
    """
    if component == "tc":
        return [coordinator_assign_partition(i) for i in coordinator_ids(admin.list_coordinators())]
    stores = ClusterView(admin).pending_ack_stores(concurrency).values()
    return sorted({s.topic for s in stores if s.origin_listed})


def set_batch_log(admin: TransactionsAdmin, target: str, component: str, enable: bool, reload: bool = False,
                  concurrency: int = 16, assume_version_ok: Optional[list[str]] = None,
                  checked: Optional[VersionCheck] = None) -> dict:
    """Switch ``component``'s batching flag (and reopen its stores with ``reload``).

    Switching it on first asks every active broker its version (ClusterView.check_batch_readers: BrokerVersionError
    when one is too old or cannot say and is not in ``assume_version_ok``), unless ``checked`` is that check,
    made by the caller before its plan. Switching it off is never held back."""
    flag = TC_BATCH_FLAG if component == "tc" else PENDING_ACK_BATCH_FLAG
    if enable and checked is None:
        checked = ClusterView(admin).check_batch_readers(assume_ok=assume_version_ok)
    previous = _flag_value(admin, flag)
    admin.update_dynamic_config(flag, "true" if enable else "false")
    _save_change(target, flag, enable, previous)
    reloaded: list[str] = []
    if reload:
        units = reload_units(admin, component, concurrency)
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(admin.unload_topic, units))
        reloaded = units
    return {"config": flag, "value": enable, "previous": previous, "reloaded": reloaded,
            **({"versionsChecked": checked.versions} if enable and checked is not None else {})}


def _created_ms(internal_ml: dict) -> Optional[int]:
    text = internal_ml.get("lastLedgerCreatedTimestamp")
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        return None


def _store_batching(ml: dict, change: Optional[dict], flag_now: bool) -> tuple[bool, bool]:
    """(batching, reopened since the change) for one store from its managed-ledger internal stats."""
    if change is None:
        return flag_now, True
    created = _created_ms(ml)
    reopened = created is not None and created >= change["at"]
    return (change["enabled"] if reopened else change["previous"]), reopened


def tc_batch_log_stat(admin: TransactionsAdmin, target: str, concurrency: int = 16) -> dict:
    flag_now = _flag_value(admin, TC_BATCH_FLAG)
    ids = coordinator_ids(admin.list_coordinators())
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        internals = dict(zip(ids, pool.map(admin.coordinator_internal_stats, ids), strict=True))
    return tc_batch_log_from(flag_now, recorded_change(target, TC_BATCH_FLAG), internals)


def tc_batch_log_from(flag_now: bool, change: Optional[dict], internals: dict[int, dict]) -> dict:
    """The coordinators' batch-log stat from their internal stats (coordinator id → coordinatorInternalStats)."""
    rows = [(str(tc_id), *_store_batching(log_stats(internals[tc_id], "transactionLogStats", f"coordinator {tc_id}'s "
                                                    "internal stats")["managedLedgerInternalStats"], change, flag_now))
            for tc_id in sorted(internals)]
    return {"txnTcBatchLogEnabled": flag_now, "coodinatorArray": [{tc: batching} for tc, batching, _ in rows],
            "reopenedSinceChange": {tc: reopened for tc, _, reopened in rows},
            "lastChange": change, "derived": DERIVATION}


def pending_ack_batch_log_stat(admin: TransactionsAdmin, target: str, concurrency: int = 16) -> dict:
    flag_now = _flag_value(admin, PENDING_ACK_BATCH_FLAG)
    stores = list(ClusterView(admin).pending_ack_stores(concurrency).values())

    def one(store: PendingAckStore) -> Optional[dict]:
        try:
            return admin.pending_ack_internal_stats(store.topic, store.subscription)
        except NotFoundError:
            return None  # not loaded (or gone since the listing): no store to judge

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        internals = list(zip(stores, pool.map(one, stores), strict=True))
    return pending_ack_batch_log_from(flag_now, recorded_change(target, PENDING_ACK_BATCH_FLAG), internals)


def pending_ack_batch_log_from(flag_now: bool, change: Optional[dict],
                               internals: list[tuple[PendingAckStore, Optional[dict]]]) -> dict:
    """The stores' batch-log stat from their pending-ack internal stats (None: the store answered 404, left out)."""
    rows = []
    for store, stats in sorted(internals, key=lambda pair: pair[0].name):
        if stats is None:
            continue
        ml = log_stats(stats, "pendingAckLogStats", f"{store.name}'s internal stats")["managedLedgerInternalStats"]
        batching, reopened = _store_batching(ml, change, flag_now)
        rows.append({"topic": store.topic, "subscription": store.subscription, "batchLogEnabled": batching,
                     "reopenedSinceChange": reopened})
    return {"txnPendingAckBatchLogEnabled": flag_now, "subscriptionArray": rows, "lastChange": change,
            "derived": DERIVATION}
