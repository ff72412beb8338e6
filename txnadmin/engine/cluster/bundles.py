"""Namespace bundles as Pulsar's NamespaceService cuts them.

A namespace's hash space (32 bits) is split into ``defaultNumberOfNamespaceBundles`` (4) equal ranges, the last
closed at 0xffffffff (NamespacesBase.getBundles). A topic belongs to the range holding the CRC32 of its full name
(``persistent://t/ns/x``): NamespaceService builds its NamespaceBundleFactory with Guava's ``Hashing.crc32()``, and
NamespaceBundles.findBundle hashes ``topicName.toString()`` with it. A bundle is named ``t/ns/0x00000000_0x40000000``.
"""

from __future__ import annotations

import functools

from ...names import FULL_UPPER, bundle_namespace, normalize_topic, topic_hash

DEFAULT_BUNDLES = 4  # broker.conf defaultNumberOfNamespaceBundles


def bundle_ranges(count: int = DEFAULT_BUNDLES) -> list[tuple[int, int]]:
    """The (lower, upper) bounds of ``count`` equal bundles; each is [lower, upper) but the last, [lower, upper]."""
    size = (FULL_UPPER + 1) // count
    bounds = [i * size for i in range(count)] + [FULL_UPPER]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


@functools.lru_cache(maxsize=1 << 16)  # asked on every transaction end (Engine.host_of); a topic's bundle never changes
def bundle_of(topic: str, count: int = DEFAULT_BUNDLES) -> str:
    """The bundle ``topic`` belongs to, named as Pulsar names it: ``t/ns/0xLLLLLLLL_0xUUUUUUUU``."""
    full = normalize_topic(topic)
    code = topic_hash(full)
    ranges = bundle_ranges(count)
    lower, upper = next(((lo, up) for lo, up in ranges if lo <= code < up), ranges[-1])
    return f"{bundle_namespace(full)}/0x{lower:08x}_0x{upper:08x}"
