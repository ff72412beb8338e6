"""`leftovers`: pending-ack stores whose topic or subscription no longer exists; idle stores (proven from
/metrics)."""

from __future__ import annotations

from typing import Any, Optional

from ....metrics.exposition import ExpositionError, parse_exposition, process_start_time
from ..knowledge import ref
from ..report import Finding
from ..survey import Survey, missing_subscription
from .common import age_text, engine_dir, is_local

NAME = "leftovers"
SUMMARY = "pending-ack stores whose topic or subscription no longer exists; idle stores (from /metrics)"
TP_COUNTERS = ("pulsar_txn_tp_committed_count", "pulsar_txn_tp_aborted_count")


def check(s: Survey, t: dict) -> list[Finding]:
    name = NAME
    out: list[Finding] = []
    why = ("a pending-ack store outlives its subscription: its managed ledger keeps ledgers (and bookie space) and "
           "it shows up in every store listing, including a downgrade's")
    for store in s.stores:
        gone: Optional[dict[str, Any]] = None
        subscriptions = missing_subscription(s, store)
        if store.topic is None:
            gone = {"store": store.name, "missing": "topic"}
        elif subscriptions is not None:
            gone = {"store": store.name, "topic": store.topic, "missing": "subscription",
                    "subscriptions": subscriptions}
        # any other store that could not be read is reported by `coverage`, which runs with this check
        if gone:
            delete = f"`pulsar-admin topics delete {store.name}` (after checking the subscription is really gone)"
            if is_local(s):  # the engine takes it through its server: `engine run`'s, or `txnadmin serve`'s
                delete += (" through the engine's server (URL and token in server.json; with no engine running, "
                           f"start one with `txnadmin serve {engine_dir(s)}` first)")
            out.append(Finding(name, "warning", store.name, gone, why, delete,
                               [ref(11000), ref(11023)]))
    out += idle_stores(s, t)
    return out


def idle_stores(s: Survey, t: dict) -> list[Finding]:
    """Stores whose subscription ended no transaction since the broker started, when that start is old enough.

    Proof, not absence of evidence: only with /metrics exporting the per-subscription pending-ack counters
    (``pulsar_txn_tp_committed_count`` / ``_aborted_count``, topic-level metrics on) for at least one
    subscription, and the broker's ``process_start_time_seconds``; otherwise nothing is claimed."""
    live = [store for store in s.stores if store.stats is not None]
    text = (s.metrics or (None, ""))[0]
    if not live or s.now_ms is None or not text:
        return []
    try:
        samples = parse_exposition(text)
    except ExpositionError:
        return []  # not an exposition doctor can parse; the batched-log check reports the metrics
    active: dict[tuple[Optional[str], Optional[str]], float] = {}
    for sample in samples:
        if sample.name.startswith(TP_COUNTERS) and not sample.name.endswith("_created"):
            key = (sample.labels.get("topic", ""), sample.labels.get("subscription", ""))
            active[key] = active.get(key, 0.0) + sample.value
    start = process_start_time(samples)
    if start is None or not active or s.now_ms - start * 1000 < t["idle"]:
        return []
    started = start * 1000  # the exposition's seconds, on the broker's clock as now_ms is
    idle = sorted(f"{store.topic} {store.subscription}" for store in live
                  if active.get((store.topic, store.subscription), 0.0) == 0.0)
    if not idle:
        return []
    return [Finding("leftovers", "info", "idle pending-ack stores",
                    {"stores": len(idle), "examples": idle[:10], "brokerUp": age_text(s.now_ms - started),
                     "source": f"{TP_COUNTERS[0]} / {TP_COUNTERS[1]} on /metrics"},
                    f"{len(idle)} subscription(s) with a pending-ack store ended no transaction in the "
                    f"{age_text(s.now_ms - started)} since this broker started; each store still holds a managed ledger "
                    "and is reopened (replayed) whenever its topic loads",
                    "nothing while the subscription may use transactions again; a store only goes away with its "
                    "subscription (`pulsar-admin topics unsubscribe`), never delete it under a live subscription",
                    [ref(11000)])]
