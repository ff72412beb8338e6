"""HttpAdmin's redirect policy: credentials follow a 3xx only within the cluster.

A redirect is followed to the same host, a host of the service host's domain, or a broker in the cluster's active
broker list — never elsewhere, never from https to http, and never to a Location that is not an http(s) URL. A
refusal is a :class:`BadReplyError` naming both origins (the Location is masked: it may carry a secret).
"""

from __future__ import annotations

import ipaddress
from typing import Callable, Optional

import httpx

from ._transport import origin, short
from .auth import mask
from .protocol import BadReplyError

MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)


def follow(current: httpx.URL, location: str, in_cluster: Callable[[httpx.URL], bool]) -> httpx.URL:
    """Where a 3xx from ``current`` sends us — only when our credentials may go there."""
    try:
        target = current.join(location)
        host = target.host
    except (httpx.InvalidURL, ValueError, UnicodeError) as exc:
        raise BadReplyError(f"{origin(current)}: redirect to an invalid Location {mask(location)[:200]!r} "
                            f"({short(exc)})") from None
    if target.scheme not in ("http", "https") or not host:
        raise BadReplyError(f"{origin(current)}: redirect to an invalid Location {mask(location)[:200]!r}")
    if current.scheme == "https" and target.scheme != "https":
        raise BadReplyError(f"{origin(current)}: refusing a redirect from https to {origin(target)} (plain http "
                            "would expose the credentials)")
    if not in_cluster(target):
        raise BadReplyError(f"{origin(current)}: refusing a redirect to {origin(target)}: not a broker of this "
                            "cluster (credentials go only to the service host, its domain, or the active brokers)")
    return target


def in_cluster(target: httpx.URL, service_host: str, active_brokers: Callable[[], set[str]]) -> bool:
    """True when ``target`` is the service host, a host of its domain, or an active broker (asked only when the
    first two rules do not settle it)."""
    host = target.host.lower()
    base = service_host.lower()
    if host == base:
        return True
    domain = _domain(base)
    if domain and host.endswith("." + domain):
        return True
    brokers = active_brokers()
    return host in brokers or f"{host}:{target.port}" in brokers


def add_broker_hosts(found: set[str], clusters: list[str], brokers_of: Callable[[str], list[str]]) -> None:
    """Add to ``found`` the host and host:port of each cluster's active brokers (of the first 16 clusters: a
    longer list is garbage)."""
    for cluster in clusters[:16]:
        for broker in brokers_of(cluster):
            found.add(broker.lower())
            found.add(broker.lower().rsplit(":", 1)[0])


def _domain(host: str) -> Optional[str]:
    """The service host's domain (``pulsar.example.com`` → ``example.com``); None for IPs and bare names, where only
    the exact host (or the active broker list) counts."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    parts = host.split(".")
    if len(parts) < 3:
        return None  # `localhost`, `example.com`: no parent domain narrower than a public suffix
    return ".".join(parts[1:])
