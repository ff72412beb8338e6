"""`guard`: the check just before a broker is taken down for the downgrade (the runbook's step 5).

A safe verdict is a statement about the moment it was given. A store that opened with a batching writer, unseen
(a flip inside one watch period onto a store that then stayed idle), writes its first batched entry whenever its
subscription's next batch job runs, and the older broker that replaces this one cannot read it. So before each
broker goes down, the whole proof is taken again, strictly: every recorded log still proven (one full poll), and
every active broker's flush counters read live (two reads that show its CPU seconds moved) with no batched flush
counted since the baselines. Anything less is "not safe any more" (exit 1), or "cannot tell" (exit 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...admin.protocol import TransactionsAdmin
from .checklist import require_state
from .evidence import iso_time
from .poll import status
from .report import DowngradeError, Report
from .target import Progress


def guard(admin: TransactionsAdmin, state_path: Path, broker: Optional[str] = None, target: Optional[str] = None,
          concurrency: int = 16, progress: Progress = None) -> tuple[Report, dict]:
    """(the poll, the verdict it re-judged); DowngradeError 1 when no safe verdict was recorded, 3 when ``broker``
    is not an active broker of the target."""
    state = require_state(state_path)
    verdict = state.get("safeVerdict")
    if verdict is None:
        raise DowngradeError(f"{state_path}: no safe verdict recorded yet; run `txnadmin downgrade wait` until it says "
                             "safe, then guard each broker before you take it down", 1)
    if getattr(admin, "frozen", False):
        raise DowngradeError("the engine is stopped, so its broker is down already and has no counters to read: "
                             "`guard` runs just before a broker goes down; start the engine to guard it", 3)
    report = status(admin, state_path, concurrency, progress, target=target, save=False, require_counters=True,
                    broker=broker)
    return report, verdict


def describe(verdict: dict) -> str:
    at = verdict.get("at")
    return f"the safe verdict of {iso_time(at)}" if isinstance(at, int) else "the safe verdict"
