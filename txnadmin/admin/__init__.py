"""The backend seam: the TransactionsAdmin protocol, its two implementations, and target resolution."""

from .http import HttpAdmin
from .local import LocalAdmin
from .protocol import (
    PENDING_ACK_BATCH_FLAG,
    TC_BATCH_FLAG,
    AdminError,
    NotAuthorizedError,
    NotFoundError,
    TargetUnreachableError,
    TransactionsAdmin,
    TxnId,
)
from .target import Target, open_admin, resolve_target

__all__ = [
    "PENDING_ACK_BATCH_FLAG", "TC_BATCH_FLAG", "AdminError", "HttpAdmin", "LocalAdmin", "NotAuthorizedError",
    "NotFoundError", "Target", "TargetUnreachableError", "TransactionsAdmin", "TxnId", "open_admin", "resolve_target",
]
