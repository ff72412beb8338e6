"""`recovery`: transaction buffers, pending-ack stores and coordinators whose recovery started and never ended."""

from __future__ import annotations

from typing import Optional

from ....names import coordinator_assign_partition
from ..knowledge import READY_STATES, ref
from ..report import Finding, unknown
from ..survey import NO_CLOCK, Survey
from .common import age_text, known_bug, reload_fix, upgrade_advice

NAME = "recovery"
SUMMARY = "buffers, pending-ack stores and coordinators whose recovery started and never ended"


def recovering(stats: dict, now: Optional[int], threshold: float) -> Optional[dict]:
    state = stats.get("state")
    if not isinstance(state, str):
        raise ValueError(f"stats without a state: {str(stats)[:100]}")
    if state in READY_STATES:
        return None
    start = int(stats.get("recoverStartTime") or 0)
    end = int(stats.get("recoverEndTime") or 0)
    evidence = {"state": state, "recoverStartTime": start, "recoverEndTime": end}
    if state in ("Close", "Closing", "Closed"):
        return None  # being unloaded; not a recovery
    if start and end < start and now is not None:
        evidence.update(recoveringForMs=now - start, recoveringFor=age_text(now - start))
        return evidence if now - start >= threshold else None
    if not start:
        return dict(evidence, note="not Ready and no recovery started")
    return None


def recovery_severity(evidence: dict) -> str:
    """Critical when the clock proves the recovery overran; a component not Ready that never started recovering may
    be loading right now (nothing says for how long), so that one is unknown: run again."""
    return "unknown" if "note" in evidence else "critical"


def check(s: Survey, t: dict) -> list[Finding]:
    name = NAME
    out: list[Finding] = []
    if s.now_ms is None:
        out.append(unknown(name, "cluster", s.errors.get("clock", NO_CLOCK), "recovery durations need the target's clock"))
    for tc_id, stats in sorted(s.coordinator_stats.items()):
        ev = recovering(stats, s.now_ms, t["recovery"])
        if ev:
            out.append(Finding(name, recovery_severity(ev), f"coordinator {tc_id}", ev,
                               "the coordinator's log replay has not finished: every transaction on it fails until it does",
                               "read the owning broker's log for the replay error; then "
                               + reload_fix(s, coordinator_assign_partition(tc_id), "the coordinator") + " to retry",
                               [ref(18923)]))
    for topic, stats in sorted(s.buffers.items()):
        ev = recovering(stats, s.now_ms, t["recovery"])
        if ev:
            out.append(Finding(name, recovery_severity(ev), topic, ev,
                               "the transaction buffer never finished recovering: producers and consumers of this topic hang",
                               reload_fix(s, topic, "the topic") + " to retry; if it repeats, read the broker log "
                               "around the snapshot reader" + _then(upgrade_advice(s, known_bug(17040))),
                               [ref(17040), ref(17051), ref(18833)]))
    for store in s.stores:
        if store.stats is None:
            continue
        ev = recovering(store.stats, s.now_ms, t["recovery"])
        if ev:
            out.append(Finding(name, recovery_severity(ev), f"{store.topic} {store.subscription}", dict(ev, store=store.name),
                               "the pending-ack store's replay never finished: consumers of this subscription time out "
                               "on subscribe and transactional acks fail",
                               reload_fix(s, store.topic or store.name, "the topic") + " to retry; a replay that spins after "
                               "trimming is apache/pulsar#26368" + _then(upgrade_advice(s, known_bug(26368))),
                               [ref(26368), ref(26369), ref(11772)]))
    return out


def _then(advice: str) -> str:
    return f"; {advice}" if advice else ""
