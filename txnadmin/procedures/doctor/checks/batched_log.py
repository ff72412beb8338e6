"""`batched-log`: PIP-160's flags against what the coordinators and pending-ack stores do; the batched writers'
metrics and their tuning advice.

A store reads the flags only when it opens, so the flags alone do not say how it writes: judged as `downgrade`
judges it, from txnadmin's record of its last flag change and each store's newest ledger."""

from __future__ import annotations

from ....admin.batchlog import pending_ack_batch_log_from, tc_batch_log_from
from ....admin.cluster import BATCH_FLAGS, PendingAckStore, flag_is_on
from ....admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG, NotFoundError
from ....metrics import MetricsError, analyze_text
from ....metrics.analyze import COMPONENTS
from ..report import Finding, unknown
from ..survey import Survey, problem
from .common import metrics_source, threshold_fix

NAME = "batched-log"
SUMMARY = "PIP-160 flags against what the coordinators do; writer metrics and their tuning advice"


def check(s: Survey, t: dict) -> list[Finding]:
    if s.runtime is None:
        return [unknown(NAME, "broker configuration", s.errors.get("runtime-config", "not read"),
                        "doctor needs GET /admin/v2/brokers/configuration/runtime (super-user)")]
    flags = {flag: flag_is_on(s.runtime, flag) for flag in BATCH_FLAGS}
    out: list[Finding] = []
    if s.tc_disabled is None and s.coordinators:
        out += _coordinators(s, flags)
    out += _pending_ack_stores(s, flags)
    return out + _writer_metrics(s, flags)


def _coordinators(s: Survey, flags: dict[str, bool]) -> list[Finding]:
    out: list[Finding] = []
    ids = sorted(int(c["id"]) for c in s.coordinators or [])
    unread = [tc_id for tc_id in ids if tc_id not in s.coordinator_internals]
    if unread:
        reasons = "; ".join(f"{tc_id}: {problem(s.coordinator_internal_errors[tc_id])}"
                            if tc_id in s.coordinator_internal_errors else f"{tc_id}: not read" for tc_id in unread)
        out.append(unknown(NAME, "coordinators", f"coordinator internal stats: {reasons}",
                           "run `txnadmin transactions get-txn-tc-batch-log-stat` to see the reason"))
    try:
        stat = tc_batch_log_from(flags[TC_BATCH_FLAG], s.batch_changes.get(TC_BATCH_FLAG), s.coordinator_internals)
    except (KeyError, TypeError) as exc:
        return out + [unknown(NAME, "coordinators", f"coordinator internal stats: {exc}",
                              "run `txnadmin transactions get-txn-tc-batch-log-stat` to see the reason")]
    lagging = sorted(tc for tc, reopened in stat["reopenedSinceChange"].items() if not reopened)
    if lagging:
        out.append(Finding(
            NAME, "warning", "coordinators",
            {TC_BATCH_FLAG: flags[TC_BATCH_FLAG], "notReopenedSinceChange": lagging, "lastChange": stat["lastChange"],
             "derived": stat["derived"]},
            "these coordinators opened before the flag last changed, so they still write as the old value said; "
            "a downgrade plan that trusts the flag would be wrong",
            f"reopen them with the flag as it is: `txnadmin transactions set-txn-tc-batch-log "
            f"{_switch(flags[TC_BATCH_FLAG])} --reload` (it shows the plan and asks), or unload each "
            "transaction_coordinator_assign partition", []))
    return out


def _pending_ack_stores(s: Survey, flags: dict[str, bool]) -> list[Finding]:
    if PENDING_ACK_BATCH_FLAG not in s.batch_changes:
        return [unknown(NAME, "pending-ack stores", "not read (the target stopped answering)",
                        "check the broker and the network, then run doctor again")]
    change = s.batch_changes[PENDING_ACK_BATCH_FLAG]
    if change is None:
        return [Finding(NAME, "info", "pending-ack stores", {PENDING_ACK_BATCH_FLAG: flags[PENDING_ACK_BATCH_FLAG],
                                                             "recordedChange": None},
                        "txnadmin recorded no change of the flag on this target, so every store is taken to follow "
                        "it since its last open; a change made with pulsar-admin is invisible here",
                        "set the flag as it is with txnadmin, reopening every store, so doctor and downgrade can tell "
                        "which stores reopened since: `txnadmin transactions set-txn-pending-ack-batch-log "
                        f"{_switch(flags[PENDING_ACK_BATCH_FLAG])} --reload` (it shows the plan and asks)", [])]
    out: list[Finding] = []
    judged: list[tuple[PendingAckStore, dict | None]] = []
    unread = []
    for store in s.stores:
        if store.topic is None or store.subscription is None:
            continue  # no listed topic matches it: nothing to reopen (it reopens with its topic, if that returns)
        if store.internal is not None or isinstance(store.internal_error, NotFoundError):  # 404: not loaded
            judged.append((PendingAckStore(store.name, store.topic, store.subscription, True), store.internal))
        else:
            unread.append(store)
    if unread:
        names = sorted(store.name for store in unread)
        first = next((store.internal_error for store in unread if store.internal_error is not None), None)
        out.append(Finding(NAME, "unknown", "pending-ack stores",
                           {"reason": problem(first) if first is not None else "not read", "stores": len(names),
                            "examples": names[:5]},
                           "these stores' internal stats could not be read, so whether they reopened since the flag "
                           "last changed is not known: this check proves nothing about them",
                           "run again; for 401/403 grant doctor's role access to those topics", []))
    stat = pending_ack_batch_log_from(flags[PENDING_ACK_BATCH_FLAG], change, judged)
    lagging = [f"{r['topic']} {r['subscription']}" for r in stat["subscriptionArray"] if not r["reopenedSinceChange"]]
    if lagging:
        out.append(Finding(NAME, "warning", "pending-ack stores",
                           {PENDING_ACK_BATCH_FLAG: flags[PENDING_ACK_BATCH_FLAG],
                            "notReopenedSinceChange": lagging[:50], "count": len(lagging),
                            "lastChange": stat["lastChange"], "derived": stat["derived"]},
                           "these stores opened before the flag last changed and still write as the old value said",
                           "reopen them with the flag as it is: `txnadmin transactions set-txn-pending-ack-batch-log "
                           f"{_switch(flags[PENDING_ACK_BATCH_FLAG])} --reload` (it shows the plan and asks), or "
                           "unload their topics", []))
    return out


def _writer_metrics(s: Survey, flags: dict[str, bool]) -> list[Finding]:
    text, reason = s.metrics or (None, "not read (the target stopped answering)")
    if text is None:
        return [unknown(NAME, "writer metrics", f"/metrics: {reason}", "expose /metrics to doctor's host, or run "
                        f"`txnadmin metrics {metrics_source(s)}` where it is reachable")]
    try:
        reports = analyze_text(text, _thresholds(s.runtime or {}))
    except MetricsError as exc:
        if exc.unreadable:  # a login page or garbage where /metrics should be: it says nothing about the writers
            return [unknown(NAME, "writer metrics", f"/metrics: {exc}", "point doctor at the broker itself (not a "
                            f"proxy or login page), or run `txnadmin metrics {metrics_source(s)}` where it is "
                            "reachable")]
        return [Finding(NAME, "info", "writer metrics", {"flags": flags, "metrics": str(exc)},
                        "no batched writer has flushed since the broker started (batching off, or no traffic)",
                        "nothing to do", [])]
    out = []
    for report in reports:
        evidence = {"flushes": report.flushes, "triggerShares": report.trigger_shares(),
                    "recordsPerEntry": round(report.records.mean, 2), "flags": flags}
        flag = COMPONENTS[report.component]["config"] + "Enabled"
        if not flags.get(flag, False):  # counters count since the broker started: batching may have been on then
            out.append(Finding(NAME, "info", report.component, evidence,
                               f"{flag} is false now, so these flushes are from before it was switched off: there is "
                               "nothing to tune while batching is off", "nothing to do", []))
            continue
        rec = report.recommendation
        out.append(Finding(NAME, "info", report.component, evidence, rec.get("reason", ""),
                           threshold_fix(s, rec["set"]) if rec.get("set") else "nothing to do", []))
    return out


def _switch(on: bool) -> str:
    return "--enable" if on else "--disable"


def _thresholds(runtime: dict) -> dict[str, float]:
    """The batched writers' thresholds as the broker runs with them (the tuning advice starts from these)."""
    out = {}
    for name, value in runtime.items():
        if "BatchedWriteMax" in name:
            try:
                out[name] = float(value)
            except (TypeError, ValueError):
                continue  # a value no number reads: the advice assumes Pulsar's default for it
    return out
