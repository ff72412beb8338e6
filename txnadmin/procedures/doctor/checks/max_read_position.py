"""`max-read-position`: a transaction buffer's max read position behind the topic's last entry while an old
transaction is ongoing (consumers see nothing newer)."""

from __future__ import annotations

from ....admin.protocol import TxnId
from ....names import coordinator_assign_partition
from ..knowledge import ENDING_STATES, ref
from ..report import Finding, unknown
from ..survey import NO_CLOCK, Survey, position
from .common import age_text, reload_fix, txn_times

NAME = "max-read-position"
SUMMARY = "a transaction buffer's maxReadPosition behind the last entry while an old transaction is ongoing"


def check(s: Survey, t: dict) -> list[Finding]:
    name = NAME
    out: list[Finding] = []
    by_topic: dict[str, list[tuple[int, str, dict]]] = {}
    unproven: dict[str, list[str]] = {}  # topic → ongoing transactions whose age the answer does not give
    for txn_text, meta in s.transactions.items():
        if meta.get("status") in ("OPEN",) + ENDING_STATES:
            opened, timeout, _ = txn_times(meta)
            for topic in meta.get("producedPartitions") or {}:
                if opened is None or timeout is None:
                    unproven.setdefault(topic, []).append(txn_text)
                else:
                    by_topic.setdefault(topic, []).append((opened, txn_text, meta))
    for topic, stats in sorted(s.buffers.items()):
        ongoing = int(stats.get("ongoingTxnSize") or 0)
        mrp = position(stats.get("maxReadPosition"))
        if not ongoing or mrp is None:
            continue
        internal = s.internal.get(topic)
        if internal is None:
            out.append(unknown(name, topic, s.errors.get(f"internal stats of {topic}", "internal stats not read"),
                               "grant the doctor's role topic access (internalStats), then run again"))
            continue
        lac = position(internal.get("lastConfirmedEntry"))
        if lac is None or mrp >= lac:
            continue
        evidence = {"maxReadPosition": stats.get("maxReadPosition"), "lastConfirmedEntry": internal.get("lastConfirmedEntry"),
                    "ongoingTxnSize": ongoing, "clock": s.clock}
        if lac[0] == mrp[0]:
            evidence["entriesBehind"] = lac[1] - mrp[1]
        known = sorted(by_topic.get(topic, []))
        if topic in unproven:
            out.append(unknown(name, topic, f"the max read position {stats.get('maxReadPosition')} is behind "
                               f"{internal.get('lastConfirmedEntry')} and the age of {', '.join(sorted(unproven[topic]))} "
                               "is not in the coordinator's answer (no openTimestamp or timeoutAt)",
                               "see the stuck-transactions finding for that transaction, then run again"))
            continue
        if not known:
            if s.txn_errors or s.coordinators is None:
                out.append(unknown(name, topic, f"{ongoing} ongoing transaction(s) hold the max read position "
                                   f"{stats.get('maxReadPosition')} behind {internal.get('lastConfirmedEntry')}, and "
                                   "not every coordinator could be read to tell how old they are",
                                   "see the coordinators finding, then run again"))
                continue
            out.append(Finding(
                name, "warning", topic, evidence,
                f"{ongoing} transaction(s) hold this topic's max read position, and no coordinator lists one of them "
                "as ongoing: either they began while doctor ran, or their coordinator lost them and the buffer waits "
                "for an end that will never come",
                "run doctor again; if this stays, " + reload_fix(s, topic, "the topic") + " (its buffer recovers)",
                [ref(19200), ref(26234)]))
            continue
        opened, txn_text, meta = known[0]
        if s.now_ms is None:
            out.append(unknown(name, topic, s.errors.get("clock", NO_CLOCK), "ages need the target's clock; see the stuck-transactions check"))
            continue
        age = s.now_ms - opened
        if age < t["stalled"]:
            continue
        txn = TxnId.parse(txn_text)
        overdue = age > int(meta.get("timeoutAt") or 0) + t["stuck-margin"]
        out.append(Finding(
            name, "critical" if overdue else "warning", topic,
            dict(evidence, oldestTxn=txn_text, oldestTxnStatus=meta.get("status"), oldestTxnAge=age_text(age),
                 oldestTxnAgeMs=age, oldestTxnTimeoutMs=meta.get("timeoutAt"), owner=meta.get("owner")),
            f"consumers see nothing past {stats.get('maxReadPosition')} while {txn_text} ({meta.get('status')}, "
            f"{age_text(age)} old) is ongoing; every message after it, transactional or not, waits",
            (f"abort it: `txnadmin transactions abort-transaction -m {txn.most_bits} -l {txn.least_bits}` "
             "(or `txnadmin doctor --fix` once it is past its timeout)" if meta.get("status") == "OPEN" else
             reload_fix(s, coordinator_assign_partition(txn.most_bits), "its coordinator") + " (it drives the end again)")
            + "; lower the client's transaction timeout if long transactions are not intended",
            [ref(19200), ref(22943), ref(26234)]))
    return out
