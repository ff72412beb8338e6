"""Doctor's checks as pure functions of a hand-made survey: no target, no admin, no HTTP.

This is how a new check is tested: build the :class:`Survey` that shows its condition (and the one that does not),
call the check, read its findings. The survey is what the target answered; a check reads nothing else."""

from __future__ import annotations

import inspect

from txnadmin.admin.protocol import AdminError, NotFoundError
from txnadmin.procedures.doctor import CHECKS, Survey, parse_thresholds
from txnadmin.procedures.doctor.checks import batched_log, coordinators, versions
from txnadmin.procedures.doctor.survey import Store

NOW = 1_790_000_000_000
T = parse_thresholds([])
TOPIC = "persistent://public/default/orders"


def survey(**fields) -> Survey:
    return Survey(now_ms=NOW, clock="target", **fields)


def test_every_check_is_a_function_of_the_survey_and_thresholds_only():
    """No check is handed an admin, so none can read the target (or let an admin error escape)."""
    for name, check in CHECKS.items():
        assert list(inspect.signature(check).parameters) == ["s", "t"], name


def test_a_survey_that_read_nothing_proves_nothing():
    """Every check on a survey that read nothing (the target lost after its clock): no warning or critical, and the
    checks that needed an answer say they could not run."""
    empty = Survey(now_ms=None, clock="unknown", lost="cannot connect")
    findings = [f for check in CHECKS.values() for f in check(empty, T)]
    assert {f.severity for f in findings} <= {"unknown", "info"}
    assert {f.check for f in findings if f.severity == "unknown"} >= {
        "coordinators", "stuck-transactions", "recovery", "batched-log", "coverage", "versions"}


def test_versions_judges_each_broker_and_names_the_old_one():
    s = survey(versions={"b1:8080": "4.2.5", "b2:8080": "2.10.3", "b3:8080": "4.0.14"})
    found = versions.check(s, T)
    assert {f.subject for f in found if f.severity == "warning"} == {"b2:8080"}
    assert {f.evidence["ref"] for f in found if f.subject == "b2:8080"} == {
        17040, 19200, 22943, 23550, 24945, 24401, 26368, 26565, 26335, 26431, 26773, 26073}
    s.versions = {"b1:8080": "4.2.5", "b3:8080": "4.0.14"}
    s.errors["version of b2:8080"] = "HTTP 503: Service Unavailable"  # it could not say: unknown, not healthy
    (finding,) = versions.check(s, T)
    assert (finding.severity, finding.subject) == ("unknown", "b2:8080") and "503" in finding.evidence["reason"]
    s.errors = {"clusters": "HTTP 403: Forbidden"}  # which brokers are active is unknown
    (finding,) = versions.check(s, T)
    assert (finding.severity, finding.subject) == ("unknown", "brokers")


def _store(sub: str, created: str | None = None, error: AdminError | None = None) -> Store:
    internal = None if created is None else {"pendingAckLogStats": {"managedLedgerInternalStats": {
        "lastLedgerCreatedTimestamp": created, "ledgers": [{"ledgerId": 3}]}}}
    return Store(f"{TOPIC}-{sub}__transaction_pending_ack", TOPIC, sub, stats={"state": "Ready"}, internal=internal,
                 internal_error=error)


def test_batched_log_judges_the_stores_it_read_and_says_which_it_could_not():
    change = {"enabled": False, "previous": True, "at": NOW - 60_000}
    s = survey(runtime={"transactionPendingAckBatchedWriteEnabled": "false"}, metrics=(None, "HTTP 404: Not Found"),
               batch_changes={"transactionLogBatchedWriteEnabled": None,
                              "transactionPendingAckBatchedWriteEnabled": change},
               stores=[_store("billing", "2026-09-21T10:00:00.000Z"),  # before the change: not reopened
                       _store("audit", error=AdminError("Don't have permission", 403)),
                       _store("idle", error=NotFoundError("Topic not found"))])  # not loaded: nothing to judge
    stores = {f.severity: f for f in batched_log.check(s, T) if f.subject == "pending-ack stores"}
    assert stores["warning"].evidence["notReopenedSinceChange"] == [f"{TOPIC} billing"]
    assert stores["unknown"].evidence["examples"] == [f"{TOPIC}-audit__transaction_pending_ack"]
    assert "403" in stores["unknown"].evidence["reason"]
    s.stores[1] = _store("audit", "2026-09-21T14:13:00.000Z")  # readable, and reopened after the change
    stores = {f.severity: f for f in batched_log.check(s, T) if f.subject == "pending-ack stores"}
    assert set(stores) == {"warning"} and stores["warning"].evidence["count"] == 1


def test_skew_counts_only_coordinators_a_broker_serves():
    """A coordinator whose partition no broker has loaded is listed without a URL (Pulsar's coordinators-list):
    it is on no broker, so it neither counts as one nor piles onto one."""
    listed = [{"id": i, "brokerServiceUrl": None if i > 1 else "pulsar://b1:6650"} for i in range(8)]
    s = survey(coordinators=listed, brokers=["b1:8080", "b2:8080", "b3:8080"])
    assert coordinators.skew(s) == []
    listed = [{"id": i, "brokerServiceUrl": "pulsar://b1:6650" if i < 6 else None} for i in range(8)]
    (finding,) = coordinators.skew(survey(coordinators=listed, brokers=["b1:8080", "b2:8080", "b3:8080"]))
    assert finding.evidence["count"] == 6 and finding.evidence["limit"] == 3  # ceil(6/3) + 1
    (finding,) = coordinators.skew(survey(coordinators=listed + [{"id": 9, "brokerServiceUrl": "pulsar://b2:6650"}],
                                          brokers=[]))  # the listing failed: the coordinator list names two
    assert finding.evidence["brokers"] == 2 and "upper bound" in finding.evidence["brokersCountedFrom"]
