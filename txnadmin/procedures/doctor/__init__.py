"""`txnadmin doctor`: what is wrong with a cluster's transactions, why it matters, and the fix.

Backend-agnostic: everything is read through :class:`TransactionsAdmin`, by one survey (``survey.py``: all the
I/O, through a ClusterView that records what it could not read). Each check (``checks/``, one family per module) is
a pure function of the survey returning :class:`Finding` objects; ``knowledge.py`` holds the version table and the
upstream references; ``report.py`` the findings, severities, exit code and the ``--fix`` plan. Ages are judged on
the target's clock (``broker_time_ms``), never on ours: a laptop whose clock runs an hour fast must not make
``--fix`` abort live transactions.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from ...admin.protocol import TransactionsAdmin, TxnId
from .checks import CHECK_HELP, CHECKS, TOPIC_CHECKS
from .knowledge import THRESHOLDS, parse_thresholds
from .report import (
    EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_UNREADABLE, SEVERITIES, DoctorError, Finding, Report, exit_code, fix_plan,
    sort_findings, unknown,
)
from .survey import MALFORMED, Progress, Survey, malformed, survey

__all__ = [
    "CHECKS", "CHECK_HELP", "EXIT_HEALTHY", "EXIT_UNHEALTHY", "EXIT_UNREADABLE", "SEVERITIES", "THRESHOLDS",
    "DoctorError", "Finding", "Report", "Survey", "apply_fix", "exit_code", "fix_plan", "fix_rows",
    "judge", "parse_thresholds", "run", "select_checks", "survey",
]


def select_checks(only: Optional[list[str]], bookie_dir: Optional[Path] = None) -> list[str]:
    names = [n for n in CHECKS if n != "bookie-rocksdb" or bookie_dir is not None]
    if not only:
        return names
    unknown_names = [n for n in only if n not in CHECKS]
    if unknown_names:
        raise DoctorError(f"--only {','.join(unknown_names)}: no such check (checks: {', '.join(CHECKS)})", 2)
    if "bookie-rocksdb" in only and bookie_dir is None:
        raise DoctorError("--only bookie-rocksdb needs --bookie-dir DIR", 2)
    chosen = set(only) | ({"coverage"} if set(only) & set(TOPIC_CHECKS) else set())
    return [n for n in CHECKS if n in chosen]


def run(admin: TransactionsAdmin, target: str, only: Optional[list[str]] = None,
        thresholds: Optional[dict[str, float]] = None, concurrency: int = 16, progress: Progress = None,
        bookie_dir: Optional[Path] = None) -> Report:
    """Survey the target once and run the selected checks on it. DoctorError when it cannot be read at all."""
    names = select_checks(only, bookie_dir)
    t = parse_thresholds([]) if thresholds is None else thresholds
    return judge(survey(admin, target, set(names), concurrency, progress, bookie_dir), target, names, t)


def judge(s: Survey, target: str, names: list[str], t: dict[str, float]) -> Report:
    """The selected checks on one survey (the exporter judges the survey its metrics come from, so both agree).
    DoctorError when nothing in the survey answered as a broker does."""
    if not s.answered and s.lost is None:
        # Nothing answered as a broker does (another web server on that port, a login page, a 500 everywhere): a
        # report of "unknown" findings would exit 0 and pass for healthy. The target cannot be read at all.
        reasons = "; ".join(f"{area}: {reason}" for area, reason in sorted(s.errors.items()) if area != "clock")
        raise DoctorError(f"cannot read the target: no admin call answered as a Pulsar broker does ({reasons[:300]})")
    findings: list[Finding] = []
    for name in names:
        try:
            findings += CHECKS[name](s, t)
        except MALFORMED as exc:  # an answer not shaped as Pulsar's: this check proves nothing, the others still run
            findings.append(unknown(name, "target", f"an answer doctor cannot read: {malformed(exc)}",
                                    "compare the target's admin API with Pulsar's (docs/doctor.md lists the calls)"))
    return Report(target, s.now_ms if s.now_ms is not None else int(time.time() * 1000),
                  s.clock, names, sort_findings(findings), lost=s.lost)


def fix_rows(plan: list[TxnId]) -> list[dict]:
    """The fix plan as the abort procedure's planned rows (each OPEN past its timeout, so planned as OPEN)."""
    return [{"txnId": str(txn), "coordinatorId": txn.most_bits, "status": "OPEN"} for txn in plan]


def apply_fix(admin: TransactionsAdmin, plan: list[TxnId],
              on_outcome: Optional[Callable[[dict], None]] = None) -> list[dict]:
    """Abort each planned transaction through the one abort procedure (procedures/bulk_abort.abort_selected, which
    `transactions abort` and `find-hanging --abort` use): its outcomes (ABORTED, ENDED, FAILED, UNKNOWN,
    NOT_ATTEMPTED), each passed to ``on_outcome`` as soon as it is known."""
    from ..bulk_abort import abort_selected

    return abort_selected(admin, fix_rows(plan), on_outcome)
