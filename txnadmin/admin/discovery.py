"""Finding every pending-ack store of a target and the subscription it belongs to.

The walk and the split are :meth:`txnadmin.admin.cluster.ClusterView.pending_ack_stores` (one rule for every
procedure and display); this is its entry point for callers that hold only an admin.
"""

from __future__ import annotations

from .cluster import ClusterView, PendingAckStore
from .protocol import TransactionsAdmin


def discover_pending_ack_stores(admin: TransactionsAdmin, concurrency: int = 16) -> dict[str, PendingAckStore]:
    """Every pending-ack store in every namespace of the target, by store name: one listing per namespace."""
    return ClusterView(admin).pending_ack_stores(concurrency)
