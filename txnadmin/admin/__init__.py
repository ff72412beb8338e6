"""The backend seam: the TransactionsAdmin protocol, its two implementations, and target resolution."""

import typing

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

if typing.TYPE_CHECKING:
    from .http import HttpAdmin


def __getattr__(name: str) -> typing.Any:
    """HttpAdmin on first use: it brings httpx (~150 ms at start-up), which a command on a local engine never needs."""
    if name == "HttpAdmin":
        from .http import HttpAdmin

        return HttpAdmin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "HttpAdmin"})
