"""Pulsar-shaped stats of the engine's components (field names as Pulsar's admin JSON has them)."""

from __future__ import annotations

from typing import Optional

from ..names import (
    SNAPSHOT_SYSTEM_TOPICS, SYSTEM_NAMESPACE, coordinator_assign_partition, namespace_of, topic_in,
    transaction_log_topic,
)
from .coordinator import TxnMeta
from .engine import Engine, EngineError, NotFound
from .position import Position


class NotReady(EngineError):
    """Pulsar's ServiceUnitNotReadyException: asked before the component finished loading."""


class SubscriptionGone(EngineError):
    """A subscription missing from its loaded topic (deleted since, or never there), asked for its pending-ack
    stats or a transaction's state in it: Pulsar's topic dereferences it unchecked (a NullPointerException, HTTP
    500), which fails a transaction's metadata and slow-transactions too. Its internal stats answer 404."""


def coordinators_list(engine: Engine) -> list[dict]:
    url = engine.config.engineBrokerServiceUrl
    return [{"id": tc_id, "brokerServiceUrl": url} for tc_id in sorted(engine.coordinators)]


def coordinator_stats(engine: Engine, tc_id: Optional[int] = None) -> dict:
    if tc_id is not None:
        return engine.loaded_coordinator(tc_id).stats()
    # A coordinator whose recovery failed never enters a broker's store map, so the listing leaves it out
    loaded = [i for i in sorted(engine.coordinators) if f"tc/{i}" not in engine.recovery_failures]
    if not loaded:
        raise NotFound("Transaction coordinator not found")
    return {str(i): engine.coordinators[i].stats() for i in loaded}


def transaction_metadata(engine: Engine, meta: TxnMeta) -> dict:
    out = {
        "txnId": str(meta),
        "status": meta.status_name,
        "openTimestamp": meta.open_timestamp,
        "timeoutAt": meta.timeout_ms,  # a duration in ms, despite Pulsar's name
    }
    if meta.owner:
        out["owner"] = meta.owner
    out["producedPartitions"] = {
        topic: transaction_in_buffer_stats(engine, meta.txn_id, topic) for topic in meta.produced_partitions
    }
    acked: dict[str, dict] = {}
    for topic, sub in meta.acked_partitions:
        acked.setdefault(topic, {})[sub] = transaction_in_pending_ack_stats(engine, meta.txn_id, topic, sub)
    out["ackedPartitions"] = acked
    return out


def preserved_metadata(engine: Engine, txn: tuple[int, int]) -> Optional[dict]:
    """A terminated transaction the PIP-255 preserver remembers, marked as such (Pulsar would answer 404)."""
    preserver = engine.preservers.get(txn[0])
    found = preserver.lookup(txn) if preserver else None
    if found is None:
        return None
    return {"txnId": f"({txn[0]},{txn[1]})", "status": found.status, "preserved": True,
            "clientName": found.client_name, "endTimestamp": found.end_time}


def transaction_in_buffer_stats(engine: Engine, txn: tuple[int, int], topic: str) -> dict:
    start, aborted = engine.topic(topic, create=False).transaction_in_buffer(txn)
    out: dict = {}
    if start is not None:
        out["startPosition"] = str(start)
    out["aborted"] = aborted
    return out


def _store_or_none(engine: Engine, topic: str, sub: str):
    """The subscription's pending-ack store; None while the subscription exists but has never acked in a
    transaction (Pulsar's handle in state None); NotFound for an unknown topic or subscription."""
    t = engine.topic(topic, create=False)
    store = engine.stores.get((t.name, sub))
    if (t.name, sub) in engine.unopened_stores:
        raise NotFound(f"Pending ack store of {t.name} / {sub} is not loaded (its log could not be opened)")
    if store is None and sub not in t.ledger.cursors():
        raise NotFound(f"Subscription not found {sub} on {t.name}")
    return store


def _require_subscription(engine: Engine, topic: str, sub: str, what: str) -> None:
    """Pulsar's loaded topic looks the subscription up unchecked for these calls: a missing one is a
    NullPointerException, HTTP 500 (an unknown topic is still 404, from the topic lookup first)."""
    t = engine.topic(topic, create=False)
    key = (t.name, sub)
    if key not in engine.stores and key not in engine.unopened_stores and sub not in t.ledger.cursors():
        raise SubscriptionGone(f"Subscription {sub} of {t.name} does not exist: cannot read {what} (Pulsar answers "
                               "this with a NullPointerException, HTTP 500)")


def transaction_in_pending_ack_stats(engine: Engine, txn: tuple[int, int], topic: str, sub: str) -> dict:
    _require_subscription(engine, topic, sub, f"the pending-ack state of transaction ({txn[0]},{txn[1]})")
    store = _store_or_none(engine, topic, sub)
    pos = store.txn_cumulative_position(txn) if store is not None else None
    return {"cumulativeAckPosition": pos} if pos is not None else {}


def slow_transactions(engine: Engine, timeout_ms: int, tc_id: Optional[int] = None) -> dict:
    """Pulsar's rule: every in-memory transaction whose configured timeout is greater than ``timeout_ms``."""
    tcs = [engine.loaded_coordinator(tc_id)] if tc_id is not None else [engine.coordinators[i] for i in sorted(engine.coordinators)]
    out = {}
    for tc in tcs:
        for meta in sorted(tc.snapshot(), key=lambda m: m.seq):
            if meta.timeout_ms > timeout_ms:
                out[str(meta)] = transaction_metadata(engine, meta)
    return out


def low_water_marks(engine: Engine) -> dict[int, int]:
    return {tc_id: tc.low_water_mark() for tc_id, tc in sorted(engine.coordinators.items())}


def transaction_buffer_stats(engine: Engine, topic: str, lwm: bool = False, segment_stats: bool = False) -> dict:
    return engine.topic(topic, create=False).buffer_stats(low_water_marks(engine) if lwm else None, segment_stats)


def buffer_snapshot_internal_stats(engine: Engine, topic: str, metadata: bool = False) -> dict:
    processor = engine.topic(topic, create=False).buffer.processor
    if not processor.has_snapshot():
        raise NotFound("Transaction buffer Snapshot for the topic does not exist")
    return processor.internal_stats(metadata)


def pending_ack_stats(engine: Engine, topic: str, sub: str, lwm: bool = False) -> dict:
    _require_subscription(engine, topic, sub, "its pending-ack stats")
    store = _store_or_none(engine, topic, sub)
    lwms = low_water_marks(engine) if lwm else None
    if store is None:
        out: dict = {"state": "None"}
        if lwms is not None:
            out["lowWaterMarks"] = {str(k): v for k, v in lwms.items()}
        out.update({"ongoingTxnSize": 0, "recoverStartTime": 0, "recoverEndTime": 0})
        return out
    return store.stats(lwms)


def pending_ack_internal_stats(engine: Engine, topic: str, sub: str, metadata: bool = False) -> dict:
    store = _store_or_none(engine, topic, sub)
    if store is None:
        raise NotReady("Pending ack have not init success!")  # Pulsar's ServiceUnitNotReadyException → 503
    return store.internal_stats(metadata)


def position_stats_in_pending_ack(engine: Engine, topic: str, sub: str, ledger_id: int, entry_id: int,
                                  batch_index: Optional[int] = None) -> dict:
    t = engine.topic(topic, create=False)
    store = _store_or_none(engine, t.name, sub)
    pos = Position(ledger_id, entry_id)
    if ledger_id < 0 or entry_id < 0 or pos > t.ledger.last_confirmed_entry:
        return {"state": "InvalidPosition"}
    if store is None:
        return {"state": "PendingAckNotReady"}
    return {"state": store.position_state(pos, batch_index, t.subscription(sub))}


def topic_names(engine: Engine, namespace: str, include_system: bool) -> list[str]:
    """Topics of a namespace as `namespaces topics` lists them (system topics only when asked)."""
    names = [t for t in [*engine.topics, *engine.unloaded_topics] if namespace_of(t) == namespace]
    if include_system:
        stores = [s.store_topic for s in engine.stores.values()]
        stores += [engine.store_topic(topic, sub) for topic, subs in engine.unloaded_topics.items() for sub in subs]
        stores += [engine.store_topic(topic, sub) for topic, sub in engine.unopened_stores]
        names += [s for s in stores if namespace_of(s) == namespace]
        names += [topic_in(namespace, local) for local in SNAPSHOT_SYSTEM_TOPICS
                  if engine.snapshots.exists(namespace, local)]
        if namespace == SYSTEM_NAMESPACE:
            names += [transaction_log_topic(i) for i in sorted(engine.coordinators)]
            names += [coordinator_assign_partition(i) for i in sorted(engine.coordinators)]
    return sorted(names)


def namespaces(engine: Engine) -> list[str]:
    found = {namespace_of(t) for t in [*engine.topics, *engine.unloaded_topics]}
    found |= {namespace_of(s.store_topic) for s in engine.stores.values()}
    found |= {namespace_of(topic) for topic, _ in engine.unopened_stores}
    found.add(SYSTEM_NAMESPACE)
    return sorted(found)



def namespace_exists(engine: Engine, namespace: str) -> None:
    if namespace not in namespaces(engine):
        raise NotFound("Namespace does not exist")


def topic_stats(engine: Engine, topic: str) -> dict:
    """The part of Pulsar's TopicStats the engine has: its connected producers (``publishers``, each with the
    ``clientVersion`` it reported) and its subscriptions (the engine dispatches to no long-lived consumers). Like
    Pulsar's (getTopicIfExists on the owner), it loads a topic left unloaded: its pending-ack stores reopen."""
    engine.load_topic(topic)
    t = engine.topic(topic, create=False)
    return {"publishers": t.publisher_stats(), "subscriptions": {sub: {"consumers": []} for sub in t.subscriptions()}}
