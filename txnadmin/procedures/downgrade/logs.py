"""How one log's evidence is read: a coordinator's transaction log or a pending-ack store, its ledgers and its
store's recoverStartTime; and what a coordinator answering 404 means."""

from __future__ import annotations

import time
from typing import Optional

from ...admin.endpoints import JUDGED_LEDGERS, log_stats
from ...admin.protocol import AdminError, BadReplyError, NotFoundError, TransactionsAdmin
from .report import DowngradeError
from .target import admin_call, admin_failure

COORDINATOR_LOAD_WAIT_S = 30.0  # `start` gives a coordinator failing over (or replaying its log) this long to load


class LogReader:
    """How to read one log's evidence: its ledgers and its store's recoverStartTime. ``load_wait_s``: how long a
    coordinator answering 404 is asked again before it counts as not loaded (`start` cannot record it then)."""

    def __init__(self, admin: TransactionsAdmin, component: str, key: str, info: dict, load_wait_s: float = 0.0):
        self.admin, self.component, self.key, self.info = admin, component, key, info
        self.load_wait_s = load_wait_s

    def _loaded(self, read):
        """``read()``, asked again while a coordinator answers 404 for up to ``load_wait_s``: a broker answers 404
        from the moment the coordinator's bundle moves until the new owner has replayed its log."""
        if self.component != "coordinator" or self.load_wait_s <= 0:
            return read()
        until = None
        while True:
            try:
                return read()
            except NotFoundError:
                now = time.monotonic()
                until = now + self.load_wait_s if until is None else until
                if now >= until:
                    raise DowngradeError(coordinator_not_loaded(self.key, f"for {self.load_wait_s:g} s") + "; run "
                                         "`txnadmin downgrade start` again once it answers (it resumes); if it does "
                                         f"not, {TC_OWNER_LOG}", 3) from None
                time.sleep(min(0.5, until - now))

    def ledgers(self) -> list[int]:
        return [int(l["ledgerId"]) for l in self.live_ledgers()[1]]

    def live_ledgers(self) -> tuple[Optional[str], list[dict]]:
        """(its managed ledger's name when the target says it, its ledgers as the target lists them)."""
        return self._loaded(self._live_ledgers)

    def _live_ledgers(self) -> tuple[Optional[str], list[dict]]:
        if self.component == "coordinator":
            stats = admin_call(lambda: log_stats(self.admin.coordinator_internal_stats(int(self.key)),
                                                 "transactionLogStats", f"coordinator {self.key}'s internal stats",
                                                 JUDGED_LEDGERS))
        else:
            stats = admin_call(lambda: log_stats(self.admin.pending_ack_internal_stats(
                self.info["topic"], self.info["subscription"]), "pendingAckLogStats",
                f"{self.key}'s internal stats", JUDGED_LEDGERS))
        name = stats.get("managedLedgerName")
        return (name if isinstance(name, str) and name else None), stats["managedLedgerInternalStats"]["ledgers"]

    def recover_start(self) -> Optional[int]:
        if self.component == "coordinator":
            stats = self._loaded(lambda: admin_call(self.admin.coordinator_stats, int(self.key)))
        else:
            stats = self._pending_ack_stats()
        value = stats.get("recoverStartTime")
        return int(value) if value else None  # 0: not recovered yet, no evidence

    def _pending_ack_stats(self) -> dict:
        """pendingAckStats; a server error there is SubscriptionGone when the internal stats answer 404."""
        topic, sub = self.info["topic"], self.info["subscription"]
        try:
            return self.admin.pending_ack_stats(topic, sub)
        except NotFoundError:
            raise
        except AdminError as exc:
            if exc.status < 500 or isinstance(exc, BadReplyError):
                raise admin_failure(exc) from None
            failure = exc
        # Pulsar's loaded topic dereferences a missing subscription here unchecked (a NullPointerException, HTTP
        # 500) but checks it for the internal stats (404): that 404 tells a deleted subscription from a failing broker.
        try:
            self.admin.pending_ack_internal_stats(topic, sub)
        except NotFoundError:
            raise SubscriptionGone(failure) from None
        except AdminError:
            pass  # the internal stats fail too: say what the stats call answered
        raise admin_failure(failure, f"cannot read the pending-ack stats of {self.key} (HTTP {failure.status})") from None


class SubscriptionGone(NotFoundError):
    """pendingAckStats failed with a server error while pendingAckInternalStats answered 404: the subscription is
    missing from its loaded topic. A 404 to every caller that treats the store as absent; the listing decides."""

    def __init__(self, failure: AdminError):
        super().__init__(failure.reason)
        self.failure = failure


TC_OWNER_LOG = "`pulsar-admin transactions coordinators-list` names its broker, whose log says why"


def coordinator_not_loaded(key: str, how_long: str = "") -> str:
    """Why a coordinator answering 404 is not judged: Pulsar's admin handlers find a coordinator only once its
    current owner has replayed its log, so a failover answers 404 for seconds (minutes for a long log)."""
    return (f"coordinator {key} is not loaded (its stats answer 404{' ' + how_long if how_long else ''}): it is "
            "failing over to another broker or replaying its transaction log")
