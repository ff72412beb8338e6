"""Pulsar's names for what txnadmin touches: topics, managed ledgers and the transaction system topics.

This is the role Pulsar's ``TopicName`` and ``SystemTopicNames`` play, and it sits below every other layer:
it imports nothing from txnadmin (only the standard library), so the engine, the scan, the admin backends and
the procedures all spell a name the same way and disagree on none. Names here are strings, as Pulsar's
admin API and BookKeeper's metadata carry them.
"""

from __future__ import annotations

import re
import zlib
from typing import Iterable, Optional
from urllib.parse import quote, quote_plus, unquote_plus

SYSTEM_NAMESPACE = "pulsar/system"
PENDING_ACK_SUFFIX = "__transaction_pending_ack"
TC_ASSIGN_TOPIC = f"persistent://{SYSTEM_NAMESPACE}/transaction_coordinator_assign"
_TC_ASSIGN_PARTITION = f"{TC_ASSIGN_TOPIC}-partition-"
_TC_LOG_LOCAL = "__transaction_log_"
TC_LOG_CURSOR = "transaction.subscription"  # the cursor a coordinator keeps on its log (MLTransactionLogImpl)
PENDING_ACK_CURSOR = "__pending_ack_state"  # the cursor a pending-ack store keeps on its log (MLPendingAckStore)
# Transaction-buffer snapshot topics, one each per namespace (PIP-196): the single processor's, then the segmented
# processor's segments and indexes.
SNAPSHOT_TOPIC = "__transaction_buffer_snapshot"
SEGMENTS_TOPIC = "__transaction_buffer_snapshot_segments"
INDEXES_TOPIC = "__transaction_buffer_snapshot_indexes"
SNAPSHOT_SYSTEM_TOPICS = (SNAPSHOT_TOPIC, SEGMENTS_TOPIC, INDEXES_TOPIC)
_TC_LOG_LEDGER = re.compile(rf"^{SYSTEM_NAMESPACE}/persistent/{_TC_LOG_LOCAL}\d+$")


# -- topics -------------------------------------------------------------------------------------

TOPIC_DOMAINS = ("persistent", "non-persistent")


def normalize_topic(name: str) -> str:
    """``x`` → persistent://public/default/x; ``t/ns/x`` → persistent://t/ns/x (pulsar-admin's rules).

    A full name is checked as Pulsar's TopicName checks it: a known domain, then tenant/namespace/local (or the old
    tenant/cluster/namespace/local), none of them empty. ``persistent://public`` is refused, not completed.
    """
    if "://" not in name:
        parts = name.split("/")
        if len(parts) == 1:
            full = f"persistent://public/default/{name}"
        elif len(parts) == 3:
            full = f"persistent://{name}"
        else:
            raise ValueError(f"Invalid short topic name '{name}', it should be in the format of "
                             "<tenant>/<namespace>/<topic> or <topic>")
    else:
        full = name
    domain, _, rest = full.partition("://")
    if domain not in TOPIC_DOMAINS:
        raise ValueError(f"Invalid topic domain: '{domain}'")
    parts = rest.split("/", 3)  # a local name may hold '/' past the fourth part, as in Pulsar
    if len(parts) < 3 or not all(p.strip() for p in parts):
        raise ValueError(f"Invalid topic name: {name}")
    return full


FULL_UPPER = 0xFFFFFFFF  # the top of a namespace's 32-bit bundle hash space


def topic_hash(topic: str) -> int:
    """Where a topic falls in its namespace's bundle hash space: the CRC32 of its full name, as Pulsar's
    NamespaceBundleFactory hashes ``topicName.toString()`` (Guava's ``Hashing.crc32()``). The engine places topics in
    bundles with it, and HttpAdmin predicts a topic's owner from the brokers' owned bundles with it."""
    return zlib.crc32(normalize_topic(topic).encode("utf-8")) & FULL_UPPER


def bundle_namespace(full: str) -> str:
    """The namespace (``t/ns``) whose bundles hold the full topic name ``full``: its first two path segments, however
    many ``/`` its local name holds."""
    return "/".join(full.split("://", 1)[1].split("/", 2)[:2])


def namespace_of(topic: str) -> str:
    """persistent://t/ns/x → t/ns. A name without a domain is not a full topic name (ValueError)."""
    domain, sep, rest = topic.partition("://")
    if not sep:
        raise ValueError(f"'{topic}' is not a full topic name (expected persistent://tenant/namespace/topic)")
    return rest.rsplit("/", 1)[0]


def topic_in(namespace: str, local: str) -> str:
    """The persistent topic ``local`` of ``namespace`` (t/ns)."""
    return f"persistent://{namespace}/{local}"


def managed_ledger_name(topic: str) -> str:
    """persistent://t/ns/x → t/ns/persistent/<x URL-encoded> (Pulsar's persistence naming)."""
    rest = topic.split("://", 1)[1]
    tenant, namespace, local = rest.split("/", 2)
    return f"{tenant}/{namespace}/persistent/{quote(local, safe='')}"


# -- transaction coordinators -------------------------------------------------------------------

def partitioned_topic(topic: str) -> str:
    """``…/orders-partition-3`` → ``…/orders`` (a topic that is no partition is itself)."""
    return re.sub(r"-partition-\d+$", "", topic)


def coordinator_assign_partition(tc_id: int | str) -> str:
    """The partition of transaction_coordinator_assign whose owner hosts coordinator ``tc_id`` (unload = reload)."""
    return f"{_TC_ASSIGN_PARTITION}{tc_id}"


def coordinator_of_assign_partition(topic: str) -> Optional[int]:
    """The coordinator id a transaction_coordinator_assign partition stands for; None for any other topic."""
    if not topic.startswith(_TC_ASSIGN_PARTITION):
        return None
    return int(topic[len(_TC_ASSIGN_PARTITION):])


def transaction_log_topic(tc_id: int | str) -> str:
    return topic_in(SYSTEM_NAMESPACE, f"{_TC_LOG_LOCAL}{tc_id}")


def transaction_log_local_name(tc_id: int | str) -> str:
    """``__transaction_log_<id>``: how status lines name a coordinator's log."""
    return f"{_TC_LOG_LOCAL}{tc_id}"


def transaction_log_name(tc_id: int | str) -> str:
    """The managed ledger of coordinator ``tc_id``'s transaction log."""
    return managed_ledger_name(transaction_log_topic(tc_id))


def preserver_log_name(tc_id: int | str) -> str:
    """The managed ledger of coordinator ``tc_id``'s terminated-transaction preserver (PIP-255)."""
    return f"{SYSTEM_NAMESPACE}/persistent/__terminated_txn_state_{tc_id}"


# -- pending-ack stores -------------------------------------------------------------------------

def encode_subscription(subscription: str) -> str:
    """Pulsar's ``Codec.encode`` (Java's URLEncoder): space → ``+``; only letters, digits and ``.-*_`` kept."""
    return quote_plus(subscription, safe="*").replace("~", "%7E")


def decode_subscription(text: str) -> str:
    """Pulsar's ``Codec.decode`` (Java's URLDecoder): ``%XX`` and ``+`` → the characters they stand for."""
    return unquote_plus(text)


def pending_ack_topic(topic: str, subscription: str, encoded: bool = False) -> str:
    """``<topic>-<sub>__transaction_pending_ack``, the store of a transactional subscription.

    ``topic`` is the partition for partitioned topics. Pulsar before the fix appends the subscription as it is; with
    it (:func:`encodes_pending_ack_subscription`) the subscription is URL-encoded first (``encoded``), so a
    subscription holding ``/`` names a valid topic.
    """
    return f"{topic}-{encode_subscription(subscription) if encoded else subscription}{PENDING_ACK_SUFFIX}"


def encodes_pending_ack_subscription(version: str) -> bool:
    """Does a broker of ``version`` URL-encode the subscription in its pending-ack store names?

    PR #25727 is in 5.0.0 and its cherry-pick #25728 in 4.2.2 (the release notes of 4.2.2 list it; those of 4.0.x and
    4.1.x do not). An unreadable version reads as unencoded, as every release before the fix.
    """
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not found:
        return False
    major, minor, patch = (int(part or 0) for part in found.groups())
    return major >= 5 or (major, minor) == (4, 2) and patch >= 2 or (major == 4 and minor > 2)


def reads_batched_entries(version: str) -> bool:
    """Does a broker of ``version`` have PIP-160's reader (and its writer)? Both shipped in Pulsar 2.11.0. An
    unreadable version reads as a current release: the engine's default claim is a current one."""
    found = re.match(r"\s*v?(\d+)\.(\d+)", version)
    return not found or (int(found.group(1)), int(found.group(2))) >= (2, 11)


def subscription_fits_store_name(subscription: str, encoded: bool) -> bool:
    """Before the fix a ``/`` in the subscription adds path segments to the store's topic name, which Pulsar's
    ``TopicName`` then refuses: that subscription cannot open its pending-ack store."""
    return encoded or "/" not in subscription


def is_pending_ack_store(name: str) -> bool:
    """A pending-ack store's topic or managed-ledger name (both end in the suffix, encoded or not)."""
    return name.endswith(PENDING_ACK_SUFFIX)


def pending_ack_readings(store: str, topics: Iterable[str]) -> list[tuple[str, str]]:
    """Every (origin topic, subscription) the store name can stand for, given the topics that exist.

    The name does not say where the topic ends: both may hold ``-``. Each ``-`` whose prefix is an existing topic is a
    reading, longest topic first (the likeliest). A subscription that reads differently once decoded (Pulsar 5.0
    encodes it) is read both ways, as written first. Only the target can tell which reading is its store.
    """
    existing = topics if isinstance(topics, (set, frozenset, dict)) else set(topics)
    base = store[: -len(PENDING_ACK_SUFFIX)] if is_pending_ack_store(store) else store
    out: list[tuple[str, str]] = []
    for i in range(len(base) - 1, 0, -1):
        if base[i] == "-" and base[:i] in existing:
            topic, sub = base[:i], base[i + 1:]
            out.append((topic, sub))
            if decode_subscription(sub) != sub:
                out.append((topic, decode_subscription(sub)))
    return out


def pending_ack_guess(store: str) -> tuple[str, str]:
    """(topic, subscription) of a store no listed topic matches (its topic was deleted): cut at the last ``-``, as a
    subscription holds no ``-`` more often than a topic does. A guess, and callers mark it so."""
    base = store[: -len(PENDING_ACK_SUFFIX)] if is_pending_ack_store(store) else store
    cut = base.rfind("-")
    return base[:cut], base[cut + 1:]


# -- ledgers ------------------------------------------------------------------------------------

def is_transaction_ledger(managed_ledger: str) -> bool:
    """Does this managed ledger hold transaction records (batched entries may live here)?

    A coordinator's transaction log (``pulsar/system/persistent/__transaction_log_<id>``, exactly) or any pending-ack
    store (the URL-encoded local name keeps the suffix as it is, in both naming schemes). Cursor ledgers of these hold
    cursor positions, not records: callers tell them apart by the ledger's own cursor metadata.
    """
    return bool(_TC_LOG_LEDGER.match(managed_ledger)) or is_pending_ack_store(managed_ledger)
