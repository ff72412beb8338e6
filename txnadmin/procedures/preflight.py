"""The transaction-permissions pre-flight (apache/pulsar#26644), shared by `doctor` and `upgrade`.

From 4.0.14, 4.2.5 and 5.0.0 a broker checks a transaction's participants against its owner's grants: adding a
partition needs produce on it, adding a subscription needs consume on its topic (PR #26644). Before that, only
ownership of the transaction was checked, so a role may own transactions on topics it was never granted. This
module lists the owners seen (TransactionMetadata ``owner``), what their transactions touched, and judges each
need against the grants the target lists:

- authorization off (``authorizationEnabled`` false): nothing is checked, and the report says so;
- a provider other than Pulsar's own: its rules are unknown here, so every owner is "cannot tell";
- a super-user, or an admin of the topic's tenant, passes;
- otherwise the grant on the namespace or on the (partitioned) topic must hold the action; a subscription whose
  namespace lists roles for it (``grant-subscription-permission``) also needs the owner in that list, and in a
  namespace whose subscription auth mode is ``Prefix`` the subscription's name must start with the owner's role;
- the coordinators' topic ``pulsar/system/transaction_coordinator_assign`` needs a lookup, which Pulsar's provider
  grants with produce or consume there (apache/pulsar#18716): every owner needs it, from any release.

It covers only the roles seen owning a transaction while it was read, and says so: a role whose transactions all
ended before the read is not in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..admin.cluster import ClusterView
from ..names import TC_ASSIGN_TOPIC, namespace_of, partitioned_topic

DEFAULT_PROVIDER = "org.apache.pulsar.broker.authorization.PulsarAuthorizationProvider"
COVERAGE = ("only the roles seen owning a transaction when the coordinators were read are judged; a role whose "
            "transactions all ended before then is not in this report")


@dataclass
class Need:
    """One thing an owner's transactions need: ``action`` on ``topic`` (and ``subscription`` for consume)."""

    action: str  # "produce", "consume" or "lookup"
    topic: str
    subscription: Optional[str] = None

    def text(self) -> str:
        on = f"{self.topic} (subscription {self.subscription})" if self.subscription else self.topic
        return f"{self.action} on {on}"


@dataclass
class Owner:
    role: str
    transactions: list[str] = field(default_factory=list)
    needs: list[Need] = field(default_factory=list)
    passes: str = ""  # why every need holds ("super-user", "grants", …) once judged
    missing: list[str] = field(default_factory=list)  # needs the grants do not cover
    unknown: list[str] = field(default_factory=list)  # needs that could not be judged, with why


@dataclass
class Preflight:
    status: str  # "judged", "authorization off", "cannot tell", "no owners"
    reason: str = ""
    owners: list[Owner] = field(default_factory=list)
    ownerless: list[str] = field(default_factory=list)  # transactions listed without an owner
    coverage: str = COVERAGE

    @property
    def failing(self) -> list[Owner]:
        return [o for o in self.owners if o.missing]

    @property
    def undecided(self) -> list[Owner]:
        return [o for o in self.owners if o.unknown and not o.missing]

    def to_json(self) -> dict:
        return {"status": self.status, "reason": self.reason, "coverage": self.coverage,
                "ownerless": self.ownerless[:20],
                "owners": [{"role": o.role, "transactions": o.transactions[:20], "needs": [n.text() for n in o.needs],
                            "passes": o.passes, "missing": o.missing, "unknown": o.unknown} for o in self.owners]}


def owners_of(transactions: dict[str, dict]) -> tuple[list[Owner], list[str]]:
    """Each owner seen and what its transactions touched; the transactions listed without an owner."""
    found: dict[str, Owner] = {}
    ownerless = []
    for txn, meta in sorted(transactions.items()):
        role = meta.get("owner") if isinstance(meta, dict) else None
        if not isinstance(role, str) or not role:
            ownerless.append(txn)
            continue
        owner = found.setdefault(role, Owner(role, needs=[Need("lookup", TC_ASSIGN_TOPIC)]))
        owner.transactions.append(txn)
        for topic in meta.get("producedPartitions") or {}:
            need = Need("produce", str(topic))
            if need not in owner.needs:
                owner.needs.append(need)
        for topic, subs in (meta.get("ackedPartitions") or {}).items():
            for sub in subs or {}:
                need = Need("consume", str(topic), str(sub))
                if need not in owner.needs:
                    owner.needs.append(need)
    return sorted(found.values(), key=lambda o: o.role), ownerless


def roles_of(text: object) -> set[str]:
    """A role list as a runtime configuration prints it: ``a,b`` or ``[a, b]``."""
    return {r.strip() for r in str(text or "").strip().strip("[]").split(",") if r.strip()}


def _actions(grants: Optional[dict], role: str) -> Optional[set[str]]:
    if grants is None:
        return None
    return {str(a).lower() for a in (grants.get(role) or [])}


def judge(view: ClusterView, runtime: Optional[dict], transactions: dict[str, dict]) -> Preflight:
    """Read the grants the owners seen need (through ``view``) and judge them (module docstring)."""
    owners, ownerless = owners_of(transactions)
    if runtime is None:
        return Preflight("cannot tell", "the broker configuration (GET /admin/v2/brokers/configuration/runtime) "
                         "could not be read, so whether authorization is on is unknown", owners, ownerless)
    enabled = str(runtime.get("authorizationEnabled", "false")).strip().lower() == "true"
    said = "authorizationEnabled" in runtime
    if not enabled:
        return Preflight("authorization off", "authorizationEnabled is " + ("false" if said else
                         "not listed (Pulsar's default: false)") + ": brokers check no grants, so no transaction "
                         "can be refused for them; nothing to check", owners, ownerless)
    provider = str(runtime.get("authorizationProvider") or DEFAULT_PROVIDER).strip()
    if provider != DEFAULT_PROVIDER:
        for owner in owners:
            owner.unknown = [f"{need.text()}: decided by {provider}" for need in owner.needs]
        return Preflight("cannot tell", f"authorizationProvider is {provider}, whose rules doctor does not know: ask "
                         "it (or its authors) whether each owner below holds produce/consume on what it touches",
                         owners, ownerless)
    if str(runtime.get("authorizationAllowWildcardsMatching", "false")).strip().lower() == "true":
        doubt = "authorizationAllowWildcardsMatching is on: a grant to a role pattern may cover this owner"
    else:
        doubt = ""
    supers = roles_of(runtime.get("superUserRoles"))
    if "superUserRoles" not in runtime:  # who is a super-user is unknown: a role without grants may still be one
        doubt = doubt or ("superUserRoles is not in the runtime configuration, so this role may be a "
                                "super-user")
    if not owners:
        return Preflight("no owners", "no transaction with an owner was listed", owners, ownerless)
    for owner in owners:
        if owner.role in supers:
            owner.passes = "super-user (superUserRoles)"
            continue
        admin_of: set[str] = set()
        for need in owner.needs:
            verdict = _one(view, owner.role, need, doubt)
            if verdict == "tenant admin":
                admin_of.add(namespace_of(need.topic).split("/")[0])
            elif verdict.startswith("missing"):
                owner.missing.append(need.text())
            elif verdict.startswith("unknown"):
                owner.unknown.append(f"{need.text()}: {verdict[len('unknown: '):]}")
        if not owner.missing and not owner.unknown:
            owner.passes = "grants" + (f" (tenant admin of {', '.join(sorted(admin_of))})" if admin_of else "")
    return Preflight("judged", "", owners, ownerless)


def _one(view: ClusterView, role: str, need: Need, doubt: str) -> str:
    """"granted", "tenant admin", "missing", or "unknown: why" for one need of one role."""
    namespace = namespace_of(need.topic)
    tenant = namespace.split("/")[0]
    info = view.tenant_admins(tenant)
    if info is not None and role in {str(r) for r in info.get("adminRoles") or []}:
        return "tenant admin"
    wanted = {"produce", "consume"} if need.action == "lookup" else {need.action}
    on_namespace = _actions(view.namespace_grants(namespace), role)
    on_topic = _actions(view.topic_grants(need.topic), role)
    granted = bool(wanted & ((on_namespace or set()) | (on_topic or set())))
    if granted and need.subscription is not None:
        listed = view.subscription_roles(namespace)
        if listed is None:
            return f"unknown: {_why(view, f'subscription permissions of {namespace}')}"
        roles = {str(r) for r in listed.get(need.subscription) or []}
        if roles and role not in roles:  # a subscription with a role list admits only those roles
            return "missing"
        mode = view.subscription_auth_mode(namespace)
        if mode is None:
            return f"unknown: {_why(view, f'subscription auth mode of {namespace}')}"
        if str(mode) == "Prefix" and not need.subscription.startswith(role):  # Prefix: names start with the role
            return "missing"
    if granted:
        return "granted"
    unread = [area for area, got in ((f"permissions of {namespace}", on_namespace),
                                     (f"permissions of {partitioned_topic(need.topic)}", on_topic),
                                     (f"tenant {tenant}", info)) if got is None]
    if unread:
        return "unknown: " + "; ".join(_why(view, area) for area in unread)
    if doubt:
        return f"unknown: {doubt}"
    return "missing"


def _why(view: ClusterView, area: str) -> str:
    error = view.errors.get(area)
    return f"{area}: {error.reason if error is not None else 'not read'}"

