"""The guided PIP-160 downgrade, backend-agnostic (it talks only to TransactionsAdmin).

"Safe" must be a proof that no live transaction-log or pending-ack ledger can hold a batched entry, on the
target the operator meant. The evidence, per log (a coordinator's transaction log or a pending-ack store), and the
module that holds each rule:

1. **Flags off everywhere** (``target.py``, checked again after every reload by ``recording.py``). Both batching
   flags are switched off (dynamic config) and confirmed off in the runtime configuration of *every* active
   broker, before any store is reloaded, after each topic's reload, and at the end.
2. **A reopen with batching off** (``recording.py``). A store reads the flags only when it opens. So ``start``
   reads the store's ``recoverStartTime`` (coordinator-stats / pending-ack-stats) and its ledgers *after* the
   flags are confirmed off, reloads it, and requires a new ``recoverStartTime``: that reopen happened with
   batching off. LastBatched is the largest ledger that existed before that reopen (re-read after the reload: a
   rollover in between moves it up). Without a reload the log keeps waiting until it is seen reopened and
   re-recorded; that re-record takes every ledger but the newest (the reopen's own) as LastBatched, as the reload
   does.
3. **Nobody reopened it since** (``evidence.py``; a reopen `wait`'s watch proves harmless is accepted in
   ``reopen.py``). Every ``status`` poll compares ``recoverStartTime`` with the recorded value: a store reopened
   by anyone since recording may have reopened with batching on, so it is never "done" ("reopened since
   recording") until ``start`` re-records it. A managed ledger always opens a new ledger, so while a log's newest
   ledger is the one already checked, it cannot have reopened: the extra stats call is made only when the newest
   ledger changed, which keeps a 10,000-store poll at one call per store in the common case. A store seen done
   stays done while it has not reopened (it writes nothing batched while open, and deleted ledgers never come
   back), so later polls read only its ``recoverStartTime`` (pending-ack-stats), not its ledgers.
4. **The batched ledgers are gone** (``evidence.py``). Done when the oldest live ledger is newer than LastBatched.
   A store answers "deleted" only when it is gone from the topic listing; a 404 while listed means "not loaded"
   and keeps waiting. A broker answers pending-ack-stats of a deleted subscription with 500 (an unchecked lookup)
   and only the internal stats with 404: a 500 there with a 404 here is a gone subscription, which the listing
   judges the same way.
5. **The same target** (``target.py``). The checklist records the admin URL, the cluster name, the
   metadata/BookKeeper URIs and each coordinator log's ledger history; a checklist from another target is refused.

Every step is idempotent and the checklist file (``checklist.py``) is rewritten atomically after each one, so a
killed run resumes where it was.

The modules, lowest first; each imports only those before it (tests/test_downgrade_layers.py): ``report`` (why a
log waits), ``checklist``, ``watch`` (the brokers read in the background), ``target``, ``logs`` (how one log is
read), ``evidence``, ``reopen``, ``recording`` (``start``), ``poll`` (``status``), ``guard`` (before a broker goes
down), ``waiting`` (``wait``), ``verification`` (``verify``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the checker sees; at run time each name is imported from its home on first use (below)
    from .checklist import reset
    from .guard import guard
    from .logs import coordinator_not_loaded
    from .poll import status
    from .recording import start
    from .reopen import Session
    from .report import DowngradeError, LogStatus, Report, Waiting
    from .target import plan
    from .verification import record_verification, verify
    from .waiting import needs_rerecord, rerecord, wait
    from .watch import WATCH_PERIOD_S

__all__ = [
    "WATCH_PERIOD_S", "DowngradeError", "LogStatus", "Report", "Session", "Waiting", "coordinator_not_loaded",
    "guard", "needs_rerecord", "plan", "record_verification", "rerecord", "reset", "start", "status", "verify", "wait",
]

# Each public name's module. Lazy because the CLI imports the checklist's constants at start-up, and every
# `txnadmin` command would otherwise import the whole admin layer before doing anything.
_HOMES = {
    "reset": "checklist", "guard": "guard", "coordinator_not_loaded": "logs", "status": "poll", "start": "recording",
    "Session": "reopen", "DowngradeError": "report", "LogStatus": "report", "Report": "report", "Waiting": "report",
    "plan": "target", "record_verification": "verification", "verify": "verification", "needs_rerecord": "waiting",
    "rerecord": "waiting", "wait": "waiting", "WATCH_PERIOD_S": "watch",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
