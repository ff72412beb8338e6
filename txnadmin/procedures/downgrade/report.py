"""Why a log waits and what a poll reports: the one vocabulary `status`, `wait`, the CLI and the exporter share."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Optional


class Waiting(StrEnum):
    """Why a log still waits (LogStatus.kind); the live view groups by these. The values are what the JSON
    (``waitingFor``, ``waitingByReason``), the output and the exporter's ``reason`` label say."""

    DONE = "done"
    NOT_ROLLED = "open ledger not rolled"
    PINNED = "open transaction pinning trimming"
    NOT_ACKING = "subscription not acknowledging"
    TRIMMING = "not trimmed yet"
    NOT_REOPENED = "store not reopened"
    REOPENED = "reopened since recording"
    NOT_LOADED = "store not loaded"
    TC_NOT_LOADED = "coordinator not loaded"
    SUBSCRIPTION_GONE = "subscription gone, store still listed"
    UNRECORDED = "created since recording"
    STILL_FLUSHING = "batched writer still flushing"
    COUNTERS = "flush counters not confirmed"
    SCAN = "recorded scan not clean"


class DowngradeError(Exception):
    """A step that cannot go on; ``exit_code`` 1 (failure / not safe) or 3 (target unreadable / cannot tell)."""

    def __init__(self, message: str, exit_code: int = 1, transient: bool = False):
        super().__init__(message)
        self.exit_code = exit_code
        self.transient = transient  # worth retrying within `wait --timeout` (connection lost, 502/504, 503+Retry-After)
        self.abandoned = False  # wait timed out with a poll still hanging (its threads are left behind)


@dataclass
class LogStatus:
    component: str  # "coordinator" | "pending-ack"
    name: str
    last_batched_ledger_id: Optional[int]
    oldest_ledger_id: Optional[int]
    done: bool
    reason: str
    suggestion: Optional[str] = None
    extra: dict = field(default_factory=dict)
    kind: Waiting = Waiting.DONE
    reopened_to: Optional[int] = None  # seen reopened at this recoverStartTime (judged by status, not shown)

    def to_json(self) -> dict:
        out = {"component": self.component, "name": self.name, "lastBatchedLedgerId": self.last_batched_ledger_id,
               "oldestLedgerId": self.oldest_ledger_id, "done": self.done, "reason": self.reason,
               "waitingFor": None if self.done else str(self.kind)}  # a plain str, as in groups()
        if self.suggestion:
            out["suggestion"] = self.suggestion
        out.update(self.extra)
        return out


@dataclass
class Report:
    safe: bool
    flags_disabled: bool
    logs: list[LogStatus]
    verification: Optional[dict]
    target: dict = field(default_factory=dict)
    brokers: list[str] = field(default_factory=list)
    transient_error: Optional[str] = None  # wait: the last poll failed transiently (shown, then retried)
    abandoned: bool = False  # wait: a poll was still hanging at the deadline (its threads are left behind)
    reopens_accepted: int = 0  # reopens the watch proved harmless, over the whole checklist
    poll: Optional[int] = None  # this poll's number (wait's polls only)
    stop: Optional[str] = None  # wait stopped before --timeout: why, and the command that goes on
    topic_loads: list[dict] = field(default_factory=list)  # wait: topics this poll loaded (see _load_its_topic)

    @property
    def waiting(self) -> list[LogStatus]:
        return [l for l in self.logs if not l.done]

    def groups(self) -> dict[str, list[LogStatus]]:
        """Waiting logs grouped by why they wait (the live view's sections), keyed by the reason's words."""
        out: dict[str, list[LogStatus]] = {}
        for log in self.waiting:
            out.setdefault(str(log.kind), []).append(log)  # plain strings: YAML's safe dumper refuses an enum
        return out

    def to_json(self) -> dict:
        return {"safe": self.safe, "target": self.target, "flagsDisabled": self.flags_disabled,
                "brokersChecked": self.brokers, "logs": len(self.logs), "waiting": len(self.waiting),
                "waitingByReason": {k: len(v) for k, v in sorted(self.groups().items())},
                "verification": self.verification, "reopensAccepted": self.reopens_accepted, "poll": self.poll,
                "stopped": self.stop, "topicLoads": self.topic_loads,
                "components": [l.to_json() for l in self.logs]}
