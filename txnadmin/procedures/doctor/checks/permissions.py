"""`transaction-permissions`: the transaction owners seen, and whether their grants cover what their transactions
touch once brokers check participants (apache/pulsar#26644, from 4.0.14, 4.2.5 and 5.0.0); the lookup every
transactional client needs on the coordinators' topic (apache/pulsar#18716)."""

from __future__ import annotations

from ....names import TC_ASSIGN_TOPIC
from ...preflight import Owner, Preflight
from ..knowledge import PARTICIPANT_CHECKS, fixed_text, is_fixed, ref, release
from ..report import Finding, unknown
from ..survey import Survey, problem
from .common import tc_disabled_unknown

NAME = "transaction-permissions"
SUMMARY = "transaction owners whose grants miss what their transactions touch (checked from 4.0.14/4.2.5/5.0)"
REFS = [ref(26644), ref(18716)]


def check(s: Survey, t: dict) -> list[Finding]:
    if s.tc_disabled is not None:
        return tc_disabled_unknown(NAME, s)
    if s.coordinators is None:
        return [unknown(NAME, "transaction owners", f"coordinators: {s.errors.get('coordinators', 'not read')}",
                        "see the coordinators finding; no owner was seen")]
    p: Preflight | None = s.preflight
    if p is None:
        return [unknown(NAME, "transaction owners", s.errors.get("grants", "not read (the target stopped answering)"),
                        "check the broker and the network, then run doctor again")]
    out: list[Finding] = []
    for tc_id, exc in sorted(s.txn_errors.items()):  # owners of its transactions were not seen
        out.append(unknown(NAME, f"coordinator {tc_id}", f"slowTransactions?coordinatorId={tc_id}: {problem(exc)}; "
                           "the owners of its transactions were not seen", "see the coordinators finding"))
    base = {"coverage": p.coverage, "transactionsWithoutOwner": len(p.ownerless)}
    if p.status == "authorization off":
        return out + [Finding(NAME, "info", "transaction owners", dict(base, reason=p.reason,
                                                                       owners=[o.role for o in p.owners]),
                              f"{p.reason}. If authorization is switched on later, the owners must hold produce on "
                              "what they produce to and consume on what they acknowledge (PR #26644)",
                              "nothing to do", REFS)]
    if p.status == "cannot tell":
        return out + [Finding(NAME, "unknown", "transaction owners",
                              dict(base, reason=p.reason, owners=[o.role for o in p.owners]),
                              "this check could not judge the owners' grants, so it proves nothing", p.reason, REFS)]
    if p.status == "no owners":
        return out + [Finding(NAME, "info", "transaction owners", dict(base, reason=p.reason),
                              f"{p.reason}, so no role was judged ({p.coverage})", "nothing to do", REFS)]
    checking = _brokers_check(s)
    for owner in p.failing:
        out.append(_failing(s, owner, checking, base))
    for owner in p.undecided:
        out.append(Finding(NAME, "unknown", f"role {owner.role}",
                           dict(base, role=owner.role, transactions=owner.transactions[:10], unknown=owner.unknown),
                           "this owner's grants could not all be read, so whether its transactions are (or will be) "
                           "refused is not known", "grant doctor's role read access to those namespaces and "
                           "tenants (tenant admin or super-user), then run again", REFS))
    passing = [o for o in p.owners if o.passes]
    if passing:
        out.append(Finding(NAME, "info", "transaction owners",
                           dict(base, passing={o.role: o.passes for o in passing}),
                           f"{len(passing)} owner(s) hold what their transactions touch: "
                           f"{', '.join(f'{o.role} ({o.passes})' for o in passing[:10])}; {p.coverage}",
                           "nothing to do", REFS))
    return out


def _brokers_check(s: Survey) -> str:
    """Whether the brokers already check participants: "yes", "no" or "unknown"."""
    if not s.versions:
        return "unknown"
    found = {is_fixed(v, PARTICIPANT_CHECKS["fixed"]) if (v := release(text)) else None
             for text in s.versions.values()}
    return "yes" if found == {True} else "no" if found == {False} else "unknown"


def _failing(s: Survey, owner: Owner, checking: str, base: dict) -> Finding:
    releases = " / ".join(fixed_text(PARTICIPANT_CHECKS["fixed"]))
    missing = "; ".join(owner.missing)
    when = {"yes": "these brokers already check a transaction's participants (PR #26644), so its transactions are "
                   "refused now (AuthorizationError) when they add",
            "no": f"brokers from {releases} check a transaction's participants (PR #26644): after an upgrade to one "
                  "of them its transactions are refused (AuthorizationError) when they add",
            "unknown": f"brokers from {releases} check a transaction's participants (PR #26644): on such a broker "
                       "its transactions are refused (AuthorizationError) when they add"}[checking]
    grants = []
    for text in owner.missing:
        action, _, rest = text.partition(" on ")
        topic = rest.split(" (subscription ")[0]
        if action == "lookup":
            grants.append(f"`pulsar-admin topics grant-permission {TC_ASSIGN_TOPIC} --role {owner.role} --actions "
                          "consume` (every transactional client looks the coordinators up there, apache/pulsar#18716)")
        elif " (subscription " in rest:
            grants.append(f"`pulsar-admin topics grant-permission {topic} --role {owner.role} --actions consume` "
                          "(and the role on the subscription's list, `pulsar-admin namespaces "
                          "grant-subscription-permission`, where it has one)")
        else:
            grants.append(f"`pulsar-admin topics grant-permission {topic} --role {owner.role} --actions {action}`")
    return Finding(
        NAME, "warning", f"role {owner.role}",
        dict(base, role=owner.role, transactions=owner.transactions[:10], missing=owner.missing,
             unknown=owner.unknown,
             brokersCheckParticipants=checking, checkedFrom=fixed_text(PARTICIPANT_CHECKS["fixed"]),
             source=PARTICIPANT_CHECKS["source"]),
        f"role {owner.role} owns {len(owner.transactions)} open transaction(s) and is not granted: {missing}; "
        f"{when} those. {s.preflight.coverage if s.preflight else ''}",
        ("grant before upgrading: " if checking != "yes" else "grant: ") + "; ".join(dict.fromkeys(grants)),
        REFS)
