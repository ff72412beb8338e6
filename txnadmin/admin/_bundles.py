"""Which broker owns which namespace bundle, as the brokers say (``GET /admin/v2/brokers/{cluster}/{broker}/
ownedNamespaces``), so HttpAdmin can send a call about a topic to its owner first.

Only where a call enters: a wrong or stale entry costs one redirect (the broker that no longer owns the bundle sends
the call on, as Pulsar's ``validateTopicOwnership`` does), never a wrong answer. A bundle is named
``tenant/namespace/0xLLLLLLLL_0xUUUUUUUU``: the range [lower, upper) of its namespace's 32-bit hash space, the last
one closed at 0xffffffff; a topic falls where the CRC32 of its full name does (``names.topic_hash``).
"""

from __future__ import annotations

import bisect
import re
from typing import Any, Optional

from ..names import FULL_UPPER, bundle_namespace, normalize_topic, topic_hash

BUNDLE = re.compile(r"(?P<namespace>[^/]+/[^/]+)/0x(?P<lower>[0-9a-fA-F]{8})_0x(?P<upper>[0-9a-fA-F]{8})")
MAX_BUNDLES = 100_000  # bundles taken from one broker's answer: past that it is garbage, not a cluster


def owned_bundles(reply: Any) -> list[tuple[str, int, int]]:
    """The active bundles of one ``ownedNamespaces`` reply as (namespace, lower, upper); ValueError for a reply that is
    not a map of bundle names to ownership statuses. Names of another form (a v1 namespace) are skipped."""
    if not isinstance(reply, dict):
        raise ValueError(f"expected a map of bundles, got {type(reply).__name__}")
    found = []
    for name, status in list(reply.items())[:MAX_BUNDLES]:
        if not isinstance(status, dict):
            raise ValueError(f"bundle {str(name)[:80]!r}: expected an ownership status, got {type(status).__name__}")
        if status.get("is_active") is False:
            continue  # being unloaded: its next owner is not known yet
        match = BUNDLE.fullmatch(name) if isinstance(name, str) else None
        if match is None:
            continue
        lower, upper = int(match["lower"], 16), int(match["upper"], 16)
        if lower < upper:
            found.append((match["namespace"], lower, upper))
    return found


class BundleOwners:
    """Per namespace, its owned bundles in hash order with each one's broker base URL. Read by every pool thread
    while one may ``drop`` a broker: each namespace's entry is replaced whole, never changed in place."""

    def __init__(self) -> None:
        self._namespaces: dict[str, tuple[list[int], list[tuple[int, int, str]]]] = {}

    def add(self, base: str, bundles: list[tuple[str, int, int]]) -> None:
        grouped: dict[str, list[tuple[int, int, str]]] = {}
        for namespace, lower, upper in bundles:
            grouped.setdefault(namespace, []).append((lower, upper, base))
        for namespace, added in grouped.items():
            ranges = sorted([*self._namespaces.get(namespace, ([], []))[1], *added])
            self._namespaces[namespace] = ([r[0] for r in ranges], ranges)

    def __len__(self) -> int:
        return sum(len(ranges) for _, ranges in self._namespaces.values())

    def owner(self, topic: str) -> Optional[str]:
        """The base URL of the broker owning ``topic``'s bundle; None when no broker said it owns it."""
        try:
            full = normalize_topic(topic)
        except ValueError:
            return None
        entry = self._namespaces.get(bundle_namespace(full))
        if entry is None:
            return None
        lowers, ranges = entry
        code = topic_hash(full)
        at = bisect.bisect_right(lowers, code) - 1
        if at < 0:
            return None
        _, upper, base = ranges[at]
        return base if code < upper or code == upper == FULL_UPPER else None

    def drop(self, base: str) -> None:
        """Forget every bundle of ``base`` (it refused a connection: it is gone, or not reachable from here)."""
        for namespace, (_, ranges) in list(self._namespaces.items()):
            kept = [r for r in ranges if r[2] != base]
            self._namespaces[namespace] = ([r[0] for r in kept], kept)
