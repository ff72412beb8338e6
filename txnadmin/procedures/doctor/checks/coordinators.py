"""`coordinators`: every coordinator answers and is Ready; the assign topic has one partition per coordinator."""

from __future__ import annotations

import math

from ....names import SYSTEM_NAMESPACE, TC_ASSIGN_TOPIC, coordinator_assign_partition
from ..knowledge import ref
from ..report import Finding, unknown
from ..survey import Survey, problem
from .common import reload_fix

NAME = "coordinators"
SUMMARY = "every coordinator answers and is Ready; the assign topic has one partition per coordinator"


def check(s: Survey, t: dict) -> list[Finding]:
    if s.tc_disabled is not None:
        return [Finding(NAME, "warning", "cluster", {"status": 503, "reason": s.tc_disabled},
                        "transactions are switched off on this broker (transactionCoordinatorEnabled=false): a client "
                        "that begins a transaction fails",
                        "if this cluster should run transactions: set transactionCoordinatorEnabled=true in broker.conf "
                        "on every broker, run `bin/pulsar initialize-transaction-coordinator-metadata` once, restart; "
                        "if it should not, nothing to do",
                        [])]
    if s.coordinators is None:
        return [unknown(NAME, "cluster", s.errors.get("coordinators", "not read"),
                        "check the admin URL and credentials (super-user needed), then run doctor again")]
    out: list[Finding] = []
    ids = sorted(int(c["id"]) for c in s.coordinators)
    if not ids:
        out.append(Finding(NAME, "critical", "cluster", {"coordinators": 0},
                           "no transaction coordinator exists, so no transaction can begin",
                           "run `bin/pulsar initialize-transaction-coordinator-metadata -cs <zk> -c <cluster> "
                           "--initial-num-transaction-coordinators 16` once", [ref(17513)]))
    for tc_id in ids:
        subject = f"coordinator {tc_id}"
        if tc_id in s.coordinator_errors and tc_id not in s.coordinator_stats:
            exc = s.coordinator_errors[tc_id]
            if exc.status in (401, 403):  # doctor's role may not read it: says nothing about the coordinator
                out.append(unknown(NAME, subject, f"coordinatorStats?coordinatorId={tc_id}: {problem(exc)}",
                                   "run doctor as a super-user (transaction admin calls need one)"))
                continue
            out.append(Finding(NAME, "critical", subject, {"call": f"coordinatorStats?coordinatorId={tc_id}",
                                                           "status": exc.status, "reason": exc.reason},
                               "the coordinator does not answer: transactions assigned to it cannot begin or end",
                               reload_fix(s, coordinator_assign_partition(tc_id), "its coordinator") +
                               "; check the owning broker's log for the coordinator's recovery",
                               [ref(18923)]))
            continue
        stats = s.coordinator_stats.get(tc_id, {})
        state = stats.get("state")
        if state != "Ready" and state != "Initializing":  # Initializing is judged by the recovery check
            out.append(Finding(NAME, "critical", subject, {"state": state, "stats": stats},
                               f"the coordinator is {state}, not Ready: transactions assigned to it fail",
                               reload_fix(s, coordinator_assign_partition(tc_id), "its coordinator") +
                               "; if it stays so, read the owning broker's log", [ref(18923)]))
    system = s.topics.get(SYSTEM_NAMESPACE)
    if system is None and "coordinators" not in s.errors and ids:
        reason = s.errors.get(f"topics of {SYSTEM_NAMESPACE}", "not read (the target stopped answering)")
        out.append(unknown(NAME, "transaction_coordinator_assign", f"listing {SYSTEM_NAMESPACE}: {reason}",
                           "grant the doctor's role access to pulsar/system, or run it as a super-user"))
    if system is not None and ids:
        prefix = coordinator_assign_partition("")
        partitions = sorted(int(x[len(prefix):]) for x in system if x.startswith(prefix) and x[len(prefix):].isdigit())
        if partitions != list(range(len(ids))) or partitions != ids:
            out.append(Finding(NAME, "warning", "transaction_coordinator_assign",
                               {"partitions": partitions, "coordinators": ids},
                               "each partition of transaction_coordinator_assign hosts the coordinator of the same id; "
                               "a partition without a coordinator (or the reverse) means transactions routed there fail",
                               "compare `pulsar-admin topics get-partitioned-topic-metadata "
                               f"{TC_ASSIGN_TOPIC}` with `pulsar-admin "
                               "transactions coordinators-list`; grow with `pulsar-admin transactions "
                               "scale-transactionCoordinators -r N`", [ref(17513)]))
    return out + skew(s)


def skew(s: Survey) -> list[Finding]:
    """Coordinators grouped by the broker that serves them: one broker holding more than its share (ceil(N/brokers)
    + 1) takes them all down at once when it restarts (apache/pulsar#22953)."""
    by_broker: dict[str, list[int]] = {}
    for c in s.coordinators or []:
        url = c.get("brokerServiceUrl")
        if isinstance(url, str) and url:  # a partition no broker has loaded lists no URL: it is on no broker
            by_broker.setdefault(url, []).append(int(c["id"]))
    total = sum(len(ids) for ids in by_broker.values())
    listed = len(s.brokers or [])
    # Fewer brokers than the coordinators name (the listing failed or lags) would raise the share: never below them.
    brokers = max(listed, len(by_broker))
    if not total or brokers <= 1:
        return []
    limit = math.ceil(total / brokers) + 1
    counted = ("the active brokers listed" if listed >= len(by_broker) else
               "the brokers the coordinator list names (the active brokers could not be listed: the share is an "
               "upper bound)")
    out = []
    for broker, ids in sorted(by_broker.items()):
        if len(ids) > limit:
            out.append(Finding(
                NAME, "warning", broker,
                {"coordinators": sorted(ids), "count": len(ids), "total": total, "brokers": brokers,
                 "brokersCountedFrom": counted, "limit": limit},
                f"{len(ids)} of the {total} coordinators are served by this broker, more than its share of "
                f"{limit} (ceil({total}/{brokers}) + 1): a restart of this broker takes them all down at once, and "
                "every transaction assigned to them fails until they load elsewhere",
                "spread them before the next rolling restart: " + reload_fix(
                    s, coordinator_assign_partition(sorted(ids)[-1]), "some of its coordinators one at a time") +
                " (and the same for other partitions it serves), so the load manager places them on other brokers; "
                "Pulsar 3.0.6 / 3.2.4 and later place the system namespace's bundles evenly (PR #22953)",
                [ref(22953)]))
    return out
