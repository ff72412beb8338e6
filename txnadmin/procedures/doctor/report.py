"""Doctor's findings, their severities, the report and its exit code, and the ``--fix`` plan.

Severities: ``info`` leaves a target healthy; ``warning`` and ``critical`` do not; ``unknown`` (a check that could
not run, with the reason) proves nothing either way, so a report with one is "not all checked" (exit 3, cannot
tell), never "healthy". ``strict`` counts ``unknown`` as a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

from ...admin.protocol import TxnId

SEVERITIES = ("info", "unknown", "warning", "critical")
EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_UNREADABLE = 0, 1, 3


class DoctorError(Exception):
    """The target cannot be read at all, or a usage problem; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_UNREADABLE):
        super().__init__(message)
        self.code = code


@dataclass
class Finding:
    check: str
    severity: str
    subject: str
    evidence: dict
    why: str
    fix: str
    refs: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"check": self.check, "severity": self.severity, "subject": self.subject, "evidence": self.evidence,
                "why": self.why, "fix": self.fix, "refs": list(self.refs)}


def unknown(check: str, subject: str, reason: str, fix: str) -> Finding:
    """A check that could not judge ``subject``: it proves nothing, and says why and what to do."""
    return Finding(check, "unknown", subject, {"reason": reason}, "this check could not run, so it proves nothing", fix)


@dataclass
class Report:
    target: str
    checked_at: int
    clock: str
    checks: list[str]
    findings: list[Finding]
    fix: Optional[dict] = None  # with --fix: the plan, and what applying it did
    lost: Optional[str] = None  # the target stopped answering mid-run

    def counts(self) -> dict[str, int]:
        return {sev: sum(1 for f in self.findings if f.severity == sev) for sev in SEVERITIES}

    def healthy(self, strict: bool = False) -> bool:
        """Nothing wrong found (``strict``: an unknown counts as wrong). Not yet "healthy": see :meth:`verdict`."""
        bad = {"warning", "critical"} | ({"unknown"} if strict else set())
        return not any(f.severity in bad for f in self.findings)

    def verdict(self, strict: bool = False) -> str:
        """The one-line verdict: "healthy" only when every check ran and found nothing wrong."""
        if not self.healthy(strict):
            return "NOT healthy"
        if any(f.severity == "unknown" for f in self.findings):
            return "not all checked"
        return "cannot tell (the target stopped answering)" if self.lost else "healthy"

    def to_json(self, strict: bool = False) -> dict:
        return {"target": self.target,
                "checkedAt": datetime.fromtimestamp(self.checked_at / 1000, timezone.utc).isoformat(timespec="seconds"),
                "findings": [f.to_json() for f in self.findings],
                "summary": dict(self.counts(), checks=self.checks, clock=self.clock, strict=strict,
                                healthy=self.verdict(strict) == "healthy", verdict=self.verdict(strict),
                                **({"targetLost": self.lost} if self.lost else {})),
                **({"fix": self.fix} if self.fix is not None else {})}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Critical first, then warning, unknown, info; within a severity by check and subject."""
    order = {sev: i for i, sev in enumerate(reversed(SEVERITIES))}
    return sorted(findings, key=lambda f: (order[f.severity], f.check, f.subject))


def exit_code(report: Report, strict: bool = False) -> int:
    """1 when anything is wrong (it wins); else 3 when a check could not run or the target stopped answering mid-run
    (cannot tell); else 0."""
    verdict = report.verdict(strict)
    return EXIT_HEALTHY if verdict == "healthy" else EXIT_UNHEALTHY if verdict == "NOT healthy" else EXIT_UNREADABLE


def fix_plan(report: Report) -> list[TxnId]:
    """Transactions doctor may abort: OPEN past their timeout plus the margin, judged on the target's clock."""
    if report.clock != "target":
        raise DoctorError("cannot plan a fix: the target's clock is unknown (no Date header), and doctor will not "
                          "judge timeouts on this machine's clock", EXIT_UNREADABLE)
    # Only findings that carry their own proof: the broker's open time and a positive overdue on its clock.
    return sorted({TxnId.parse(f.subject) for f in report.findings
                   if f.check == "stuck-transactions" and f.severity == "critical" and f.evidence.get("status") == "OPEN"
                   and f.evidence.get("clock") == "target" and isinstance(f.evidence.get("openTimestamp"), int)
                   and f.evidence["openTimestamp"] > 0 and f.evidence.get("overdueMs", 0) > 0})
