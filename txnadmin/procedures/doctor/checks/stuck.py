"""`stuck-transactions`: OPEN past timeout + margin, COMMITTING/ABORTING too long, and the oldest open per
coordinator, judged on the target's clock."""

from __future__ import annotations

from ....admin.protocol import TxnId
from ....names import coordinator_assign_partition
from ..knowledge import ENDING_STATES, ref
from ..report import Finding, unknown
from ..survey import NO_CLOCK, Survey, problem
from .common import age_text, known_bug, reload_fix, tc_disabled_unknown, txn_times, upgrade_advice

NAME = "stuck-transactions"
SUMMARY = "OPEN past timeout + margin, COMMITTING/ABORTING too long, and the oldest open per coordinator"


def check(s: Survey, t: dict) -> list[Finding]:
    name = NAME
    if s.tc_disabled is not None:
        return tc_disabled_unknown(name, s)
    if s.coordinators is None:
        return [unknown(name, "cluster", f"coordinators: {s.errors.get('coordinators', 'not read')}",
                        "see the coordinators finding; no transaction was checked")]
    out: list[Finding] = []
    for tc_id, exc in sorted(s.txn_errors.items()):  # its transactions were not read: nothing proven about them
        out.append(unknown(name, f"coordinator {tc_id}", f"slowTransactions?coordinatorId={tc_id}: {problem(exc)}",
                           "see the coordinators finding; run doctor again; if it persists, read the owning "
                           "broker's log"))
    if s.now_ms is None:
        if s.transactions:
            out.append(unknown(name, "cluster", s.errors.get("clock", NO_CLOCK),
                               "put doctor behind no proxy that strips Date headers; `pulsar-admin transactions "
                               "slow-transactions -t 1h` lists long-timeout transactions without judging their age"))
        return out
    oldest: dict[int, tuple[int, dict]] = {}
    unreadable = []
    for txn_text, meta in sorted(s.transactions.items()):
        try:
            txn = TxnId.parse(txn_text)
        except ValueError:
            unreadable.append(txn_text)  # listed, so it exists: skipping it silently would pass for "not stuck"
            continue
        status = meta.get("status")
        opened, timeout, missing = txn_times(meta)
        if opened is None or timeout is None:
            if status == "OPEN" or status in ENDING_STATES:
                out.append(Finding(
                    name, "unknown", str(txn),
                    {"reason": f"the coordinator's answer has no usable {' or '.join(missing)} for this "
                               "transaction, so its age cannot be judged", "txnId": str(txn), "status": status,
                     "openTimestamp": meta.get("openTimestamp"), "timeoutAt": meta.get("timeoutAt")},
                    "this transaction could not be judged, so nothing is proven about it (and --fix leaves it alone)",
                    f"`txnadmin transactions transaction-metadata -m {txn.most_bits} -l {txn.least_bits}` to read it "
                    "again", []))
            continue
        age = s.now_ms - opened
        evidence = {"txnId": str(txn), "status": status, "openTimestamp": opened, "age": age_text(age), "ageMs": age,
                    "timeoutMs": timeout, "owner": meta.get("owner"), "targetNowMs": s.now_ms, "clock": s.clock,
                    "producedPartitions": sorted(meta.get("producedPartitions") or {}),
                    "ackedSubscriptions": sorted(f"{topic} {sub}" for topic, subs in (meta.get("ackedPartitions") or {}).items()
                                                 for sub in subs)}
        if status == "OPEN":
            if txn.most_bits not in oldest or opened < oldest[txn.most_bits][0]:
                oldest[txn.most_bits] = (opened, evidence)
            if age > timeout + t["stuck-margin"]:
                out.append(Finding(
                    name, "critical", str(txn), dict(evidence, overdueMs=age - timeout),
                    f"OPEN {age_text(age - timeout)} past its own timeout of {age_text(timeout)}: the broker should have "
                    "aborted it; until something does, every topic it produced to holds its max read position (consumers "
                    "see nothing newer) and the coordinator log cannot be trimmed past it",
                    f"`txnadmin doctor --fix` (aborts every such transaction after showing the plan), or "
                    f"`txnadmin transactions abort-transaction -m {txn.most_bits} -l {txn.least_bits}`",
                    [ref(19200), ref(19201), ref(19786)]))
        elif status in ENDING_STATES:
            # Ending starts no later than the timeout (at the timeout the broker aborts), so the time spent ending
            # is at least now - open - timeout: a lower bound, never an overestimate of a fresh commit.
            ending_for = age - timeout
            if ending_for >= t["ending"]:
                out.append(Finding(
                    name, "critical", str(txn), dict(evidence, endingForAtLeastMs=ending_for),
                    f"{status} for at least {age_text(ending_for)}: the coordinator cannot deliver the end to every "
                    "topic and subscription, which stay blocked (max read position held, acks pending)",
                    "; ".join(part for part in (
                        reload_fix(s, coordinator_assign_partition(txn.most_bits), "its coordinator") +
                        " (it recovers and drives the end again)", upgrade_advice(s, known_bug(23550))) if part),
                    [ref(23550), ref(23551)]))
    if unreadable:
        out.append(unknown(name, "transactions", f"{len(unreadable)} transaction(s) listed under an id that is not "
                           f"(mostBits,leastBits): {', '.join(repr(t) for t in unreadable[:5])}",
                           "`pulsar-admin transactions slow-transactions -t 0s` to read the listing by hand"))
    for tc_id, (_, evidence) in sorted(oldest.items()):
        if any(f.subject == evidence["txnId"] for f in out):
            continue
        pins = evidence["producedPartitions"]
        pinned = ("pins that coordinator's log (it cannot be trimmed past it)"
                  + (f" and the max read position of {len(pins)} topic(s)" if pins else ""))
        overdue = evidence["ageMs"] - evidence["timeoutMs"]
        head = f"the oldest open transaction on coordinator {tc_id} ({evidence['txnId']}, {evidence['age']} old"
        if overdue > 0:  # past its timeout, not yet past the margin (or the finding above would have taken it)
            stuck_in = evidence["timeoutMs"] + t["stuck-margin"] - evidence["ageMs"]
            out.append(Finding(
                name, "info", f"coordinator {tc_id}", dict(evidence, overdueMs=overdue, stuckInMs=stuck_in),
                f"{head}) is {age_text(overdue)} past its own timeout of {age_text(evidence['timeoutMs'])}: the broker "
                f"aborts at the timeout, so it should end any moment; until then it {pinned}. Doctor calls it stuck "
                f"once it is {age_text(t['stuck-margin'])} past its timeout (stuck-margin), in {age_text(stuck_in)}",
                f"run doctor again in {age_text(stuck_in)}; if it is still OPEN then, `txnadmin doctor --fix` aborts "
                "it", [ref(19200)]))
            continue
        out.append(Finding(
            name, "info", f"coordinator {tc_id}", dict(evidence, timesOutInMs=-overdue),
            f"{head}, timeout {age_text(evidence['timeoutMs'])}) {pinned}",
            f"nothing while it is within its timeout (it times out in {age_text(-overdue)}); its owner should commit "
            "or abort it", []))
    return out
