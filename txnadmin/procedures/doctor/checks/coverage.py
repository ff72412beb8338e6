"""`coverage`: what the survey could not read: namespaces, topics, buffers and stores (unknown), topics not
loaded (info). It runs with every check that judges buffers or stores, so what was not read is never passed over."""

from __future__ import annotations

from ....admin.protocol import NotFoundError
from ..report import Finding, unknown
from ..survey import Store, Survey, missing_subscription, problem

NAME = "coverage"
SUMMARY = "what the survey could not read: namespaces, topics, buffers (unknown), topics not loaded (info)"


def check(s: Survey, t: dict) -> list[Finding]:
    """A check that could not read part of the target proves nothing about that part: say which part, and why."""
    name = NAME
    out: list[Finding] = []
    if s.lost:
        out.append(unknown(name, "target", f"the target stopped answering mid-run: {s.lost}",
                           "check the broker and the network, then run doctor again; only what was read before "
                           "was judged"))
    for area, reason in sorted(s.errors.items()):
        if area == "namespaces" or area.startswith(("namespaces of ", "topics of ")):
            out.append(unknown(name, area, reason, "grant doctor's role access there (tenant admin or super-user), "
                               "then run again; nothing in it was checked"))
    by_status: dict[int, list[str]] = {}
    for topic, exc in s.buffer_errors.items():
        by_status.setdefault(exc.status, []).append(topic)
    unread: dict[int, list[Store]] = {}
    for store in s.stores:
        if store.error is not None and store.stats is None and not isinstance(store.error, NotFoundError) \
                and missing_subscription(s, store) is None:  # a leftover (the stats' 500) is `leftovers`' finding
            unread.setdefault(store.error.status, []).append(store)
    for status, stores in sorted(unread.items()):
        names = sorted(store.name for store in stores)
        out.append(Finding(name, "unknown", "pending-ack stores",
                           {"status": status, "stores": len(names), "examples": names[:5],
                            "reason": problem(stores[0].error) if stores[0].error else ""},
                           "these pending-ack stores could not be read, so the recovery and leftovers checks say "
                           "nothing about them", "run again; for 401/403 grant doctor's role access to those topics",
                           []))
    for status, topics in sorted(by_status.items()):
        topics.sort()
        evidence = {"status": status, "topics": len(topics), "examples": topics[:5],
                    "reason": s.buffer_errors[topics[0]].reason}
        if status == 404:
            out.append(Finding(name, "info", "topics not loaded", evidence,
                               "a topic no broker has loaded holds no transaction buffer in memory, so nothing on it "
                               "can be stalled or recovering; its buffer was not read", "nothing to do", []))
        else:
            out.append(Finding(name, "unknown", "transaction buffers", evidence,
                               "these topics' transaction buffers could not be read, so the buffer checks say nothing "
                               "about them", "run again; for 401/403 grant doctor's role access to those namespaces",
                               []))
    return out
