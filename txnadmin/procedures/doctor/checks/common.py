"""What several checks share: ages as people read them, a transaction's times as the coordinator sent them, and
the finding every transaction check gives when coordinators are switched off."""

from __future__ import annotations

from typing import Optional

from ..report import Finding, unknown
from ..survey import Survey


def age_text(ms: Optional[float]) -> str:
    if ms is None:
        return "unknown"
    seconds = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def txn_times(meta: dict) -> tuple[Optional[int], Optional[int], list[str]]:
    """A transaction's ``openTimestamp`` and ``timeoutAt`` as the coordinator sent them, and which are missing.

    Both are required to judge an age: reading a missing open time as 0 ("opened in 1970") would make a live
    transaction look decades overdue, and ``--fix`` would abort it. So a missing, non-integer or non-positive open
    time, or a missing or negative timeout, is reported (unknown), never judged."""
    def number(name: str, low: int) -> Optional[int]:
        value = meta.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= low else None

    opened, timeout = number("openTimestamp", 1), number("timeoutAt", 0)
    missing = [name for name, value in (("openTimestamp", opened), ("timeoutAt", timeout)) if value is None]
    return opened, timeout, missing


def tc_disabled_unknown(name: str, s: Survey) -> list[Finding]:
    return [unknown(name, "cluster", f"transaction coordinators answer 503: {s.tc_disabled}",
                    "see the `coordinators` finding")]
