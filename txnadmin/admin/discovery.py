"""Finding every pending-ack store of a target and the subscription it belongs to.

A store is only a topic name, ``<topic>-<sub>__transaction_pending_ack``, listed among its namespace's system
topics. Turning it back into (topic, subscription) is the step every procedure needs (the downgrade records
stores, batch-log stats read them, ``--reload`` unloads their topics), so it is done here, once. The split itself
is :func:`txnadmin.names.pending_ack_readings`; when it leaves more than one reading, the target is asked.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..names import PENDING_ACK_SUFFIX, is_pending_ack_store, pending_ack_readings
from .protocol import NotFoundError, TransactionsAdmin


@dataclass(frozen=True)
class PendingAckStoreName:
    name: str  # the store's topic, as listed
    topic: str  # the origin topic (the partition, for partitioned topics)
    subscription: str
    origin_listed: bool  # False: no listed topic matches the name (its topic was deleted), so the split is a guess


def resolve_pending_ack_store(admin: TransactionsAdmin, store: str, topics: set[str]) -> PendingAckStoreName:
    """(topic, subscription) of one store, given the topics that exist in its namespace.

    With one reading, that is the answer (asking could not change it). With several, the first the target answers
    pending-ack-internal-stats for wins (a 404 means "not this one"); if none answers, the likeliest. Errors other
    than 404 are the caller's to judge.
    """
    readings = pending_ack_readings(store, topics)
    if len(readings) > 1:
        for topic, sub in readings:
            try:
                admin.pending_ack_internal_stats(topic, sub)
            except NotFoundError:
                continue
            return PendingAckStoreName(store, topic, sub, True)
    if readings:
        return PendingAckStoreName(store, *readings[0], True)
    base = store[: -len(PENDING_ACK_SUFFIX)]
    cut = base.rfind("-")
    return PendingAckStoreName(store, base[:cut], base[cut + 1:], False)


def discover_pending_ack_stores(admin: TransactionsAdmin, concurrency: int = 16) -> dict[str, PendingAckStoreName]:
    """Every pending-ack store in every namespace of the target, by store name: one listing per namespace."""
    namespaces = [ns for tenant in admin.list_tenants() for ns in admin.list_namespaces(tenant)]

    def scan(ns: str) -> list[PendingAckStoreName]:
        listed = admin.list_topics(ns, True)
        topics = {t for t in listed if not is_pending_ack_store(t)}
        return [resolve_pending_ack_store(admin, t, topics) for t in listed if is_pending_ack_store(t)]

    stores: dict[str, PendingAckStoreName] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for found in pool.map(scan, namespaces):
            stores.update((s.name, s) for s in found)
    return stores

