"""Facts about the target that every step reads first: which cluster it is, its active brokers, the batching
flags and flush counters on each, its pending-ack stores and topics; and how an admin failure is worded."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Optional

from ...admin.cluster import ClusterView
from ...admin.protocol import AdminError, NotFoundError, TransactionsAdmin, is_transient
from .report import DowngradeError
from .watch import baseline_of

Progress = Optional[Callable[[int, int], None]]
FLAG_PROPAGATION_S = 10.0  # dynamic config reaches brokers through a metadata watch: allow it this long


def now_ms() -> int:
    return int(time.time() * 1000)


_PERMANENT_503 = "transactionCoordinatorEnabled"


def admin_failure(exc: AdminError, what: str = "cannot read the target") -> DowngradeError:
    """An admin failure as the downgrade words it: 3 when the target cannot say (transient ones marked for `wait`),
    1 when it answered no."""
    if exc.status in (401, 403):
        return DowngradeError(f"{what}: {exc.reason}", 3)
    if is_transient(exc) and not (exc.status == 503 and _PERMANENT_503 in exc.reason):
        return DowngradeError(f"{what}: {exc.reason}", 3, transient=True)
    if exc.status == 0 or exc.status >= 500:
        return DowngradeError(f"{what}: {exc.reason}", 3)
    return DowngradeError(exc.reason, 1)


def admin_call(fn, *args, **kwargs):
    """Admin calls with target failures turned into exit code 3 (transient ones marked for `wait`)."""
    try:
        return fn(*args, **kwargs)
    except NotFoundError:
        raise
    except AdminError as exc:
        raise admin_failure(exc) from None


# -- target identity and brokers (one rule each, in ClusterView) --------------------------------

def target_identity(admin: TransactionsAdmin, admin_url: str, view: Optional[ClusterView] = None) -> dict[str, Any]:
    """What a checklist is about: the admin URL, the cluster's own name and its metadata/BookKeeper URIs."""
    view = view or ClusterView(admin, admin_url)
    return dict(admin_call(view.identity), adminUrl=admin_url)


def check_identity(state: dict, ident: dict, state_path: Path) -> None:
    """Refuse a checklist recorded on another target (exit 3), saying how to proceed."""
    recorded = state.get("identity")
    if not recorded:
        raise DowngradeError(f"{state_path}: this checklist does not say which target it belongs to (written by an "
                             "older txnadmin); start over with `txnadmin downgrade reset` or use --state another file", 3)
    diffs = [f"{k} {recorded.get(k)!r} here vs {ident.get(k)!r} on the target"
             for k in ("adminUrl", "clusterName", "clusters", "metadataStoreUrl", "bookkeeperMetadataServiceUri")
             if recorded.get(k) != ident.get(k)]
    if diffs:
        raise DowngradeError(f"{state_path} was recorded on another target ({'; '.join(diffs)}): use --state "
                             "another file for this target, or `txnadmin downgrade reset` to discard it", 3)


def ledger_history_fits(state: dict, tc_id: str, ids: list[int], state_path: Path) -> None:
    rec = state["coordinators"].get(tc_id)
    if rec and ids and rec.get("confirmedLedger") is not None and max(ids) < rec["confirmedLedger"]:
        raise DowngradeError(f"{state_path}: coordinator {tc_id}'s newest ledger is {max(ids)}, older than the "
                             f"{rec['confirmedLedger']} recorded here: this is not the target the checklist was "
                             "recorded on; use --state another file or `txnadmin downgrade reset`", 3)


def not_this_cluster(key: str) -> DowngradeError:
    """A recorded coordinator the target does not list at all (a listed one answering 404 is only not loaded)."""
    return DowngradeError(f"coordinator {key} is not among the target's coordinators: coordinators are never "
                          "deleted, so this is not the cluster the checklist was recorded on", 3)


def active_brokers(admin: TransactionsAdmin, ident: dict, view: Optional[ClusterView] = None) -> list[str]:
    view = view or ClusterView(admin, ident.get("adminUrl", ""))
    brokers = admin_call(view.active_brokers)
    if not brokers:
        raise DowngradeError("the target lists no active brokers (GET /admin/v2/brokers/{cluster}); cannot confirm "
                             "the batching flags are off everywhere", 3)
    return brokers


def flags_on_brokers(view: ClusterView, brokers: list[str]) -> dict[str, list[str]]:
    """Broker → batching flags still on in its runtime config ({} when off everywhere). Exit 3 if one can't say."""
    try:
        return view.flags_on_brokers(brokers)
    except AdminError as exc:
        what = ("cannot confirm the batching flags on every active broker (each must be reachable from here to "
                "prove batching is off)")
        if isinstance(exc, NotFoundError):
            raise DowngradeError(f"{what}: {exc.reason}", 3) from None
        raise admin_failure(exc, what) from None


def flush_baselines(view: ClusterView, brokers: list[str]) -> dict[str, dict]:
    """Each broker's process and batched-writer flush count now (the baselines every later poll compares to);
    brokers whose counters are no evidence are left out (a later reading of theirs then counts from zero)."""
    out = {}
    for broker, reading in view.read_brokers(brokers).items():
        base = baseline_of(reading)
        if base is not None:
            out[broker] = base
    return out


def describe_on(on: dict[str, list[str]]) -> str:
    return "; ".join(f"{b}: {', '.join(f + '=true' for f in flags)}" for b, flags in sorted(on.items()))


def confirm_flags_off(view: ClusterView, brokers: list[str], wait_s: float = FLAG_PROPAGATION_S) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        on = flags_on_brokers(view, brokers)
        if not on:
            return
        if time.monotonic() >= deadline:
            raise DowngradeError(f"batching is still on after {wait_s:.0f} s: {describe_on(on)}; check the "
                                 "brokers' dynamic config (or broker.conf) and run `txnadmin downgrade start` again", 1)
        time.sleep(0.2)


# -- discovery ----------------------------------------------------------------------------------

def pending_ack_stores(admin: TransactionsAdmin, concurrency: int) -> dict[str, dict]:
    """Every pending-ack store of the target, as the checklist records it: store name → origin topic, subscription."""
    found = admin_call(ClusterView(admin).pending_ack_stores, concurrency)
    return {name: {"topic": s.topic, "subscription": s.subscription} for name, s in found.items()}


def topic_listing(admin: TransactionsAdmin, concurrency: int) -> set[str]:
    """Every topic the target lists, system topics included: one listing per namespace (ClusterView's walk)."""
    return {t for topics in admin_call(ClusterView(admin).topic_listing, concurrency).values() for t in topics}


# -- plan ---------------------------------------------------------------------------------------

def plan(admin: TransactionsAdmin, concurrency: int = 16) -> dict[str, Any]:
    """What `start` would touch: counts for the confirmation (nothing is changed)."""
    coordinators = admin_call(admin.list_coordinators)
    stores = pending_ack_stores(admin, concurrency)
    return {"coordinators": len(coordinators), "pendingAckStores": len(stores),
            "topics": len({info["topic"] for info in stores.values()})}
