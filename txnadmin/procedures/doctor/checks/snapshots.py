"""`snapshots`: Single snapshots that approach maxMessageSize; segment counts and snapshot ages."""

from __future__ import annotations

from ..knowledge import BYTES_PER_ABORT, DEFAULT_MAX_MESSAGE_SIZE, ref
from ..report import Finding
from ..survey import Survey
from .common import age_text

NAME = "snapshots"
SUMMARY = "Single snapshots that approach maxMessageSize; segment counts and snapshot ages"


def _max_message_size(s: Survey) -> tuple[int, bool]:
    try:
        return int((s.runtime or {})["maxMessageSize"]), False
    except (KeyError, TypeError, ValueError):
        return DEFAULT_MAX_MESSAGE_SIZE, True


def check(s: Survey, t: dict) -> list[Finding]:
    name = NAME
    out: list[Finding] = []
    limit, assumed = _max_message_size(s)
    segmented = []
    for topic, stats in sorted(s.buffers.items()):
        aborted = int(stats.get("totalAbortedTransactions") or 0)
        kind = stats.get("snapshotType")
        if kind == "Segment":
            segmented.append((topic, stats))
            continue
        if kind != "Single" or not aborted:
            continue
        estimate = aborted * BYTES_PER_ABORT
        if estimate < t["snapshot-share"] * limit:
            continue
        last = int(stats.get("lastSnapshotTimestamps") or 0)
        out.append(Finding(
            name, "critical" if estimate >= limit else "warning", topic,
            {"snapshotType": kind, "totalAbortedTransactions": aborted, "estimatedSnapshotBytes": estimate,
             "bytesPerAbortEstimate": BYTES_PER_ABORT, "maxMessageSize": limit, "maxMessageSizeAssumed": assumed,
             "lastSnapshotAge": age_text(s.now_ms - last) if (last and s.now_ms) else None,
             "lastSnapshotAgeMs": s.now_ms - last if (last and s.now_ms) else None},
            f"the whole aborted-transaction list is one snapshot message, estimated at {estimate:,} bytes "
            f"({estimate / limit:.0%} of maxMessageSize {limit:,}); past the limit the snapshot cannot be written, "
            "and recovery replays the topic from further back each time",
            "turn on segmented snapshots (PIP-196): transactionBufferSegmentedSnapshotEnabled=true in broker.conf "
            "on every broker, then a rolling restart; all brokers must run a release that reads them",
            [ref(16913), ref(20235)]))
    if segmented:
        segments = sum(int((st.get("segmentsStats") or {}).get("segmentsSize") or 0) for _, st in segmented)
        ages = [s.now_ms - int(st["lastSnapshotTimestamps"]) for _, st in segmented
                if s.now_ms and int(st.get("lastSnapshotTimestamps") or 0)]
        out.append(Finding(name, "info", "segmented snapshots",
                           {"topics": len(segmented), "segments": segments,
                            "oldestLastSnapshot": age_text(max(ages)) if ages else None,
                            "oldestLastSnapshotMs": max(ages) if ages else None},
                           "PIP-196 segments keep each snapshot message bounded", "nothing to do", [ref(16913)]))
    return out
