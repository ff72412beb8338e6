"""`txnadmin doctor` on a cluster of several brokers and on a target that refuses some reads (issue 25's bugs).

Each failed before the survey read the cluster through ClusterView: doctor judged only the version of the broker
that answered the admin URL, and one store's 403 while judging pending-ack batching ended the whole run in one
generic error line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from broker_standin import NOW, BrokerStandIn
from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG
from txnadmin.cli.main import app

runner = CliRunner()
TOPIC = "persistent://public/default/orders"
BROKERS = {"broker-1.example:8080": "4.2.5", "broker-2.example:8080": "2.10.3", "broker-3.example:8080": "4.2.5"}


def doctor_json(monkeypatch, standin: BrokerStandIn, home, *args):
    monkeypatch.setattr("txnadmin.admin.target.open_admin", lambda target: standin.admin())
    result = runner.invoke(app, ["-u", standin.base, "doctor", "-o", "json", *args], env={"TXNADMIN_HOME": str(home)})
    return result, (json.loads(result.stdout) if result.exit_code in (0, 1) else None)


def test_every_broker_s_version_is_judged_and_the_old_one_named(monkeypatch, tmp_path):
    """A rolling upgrade halfway: one broker of three still runs 2.10.3 (timed-out transactions never end, #19200).
    The broker behind the admin URL runs 4.2.5; whichever broker answers, the old one must be named."""
    standin = BrokerStandIn()
    standin.state["brokers"] = dict(BROKERS)
    result, out = doctor_json(monkeypatch, standin, tmp_path, "--only", "versions")
    assert result.exit_code == 1, result.output
    warned = {(f["subject"], f["evidence"]["ref"]) for f in out["findings"] if f["severity"] == "warning"}
    assert {subject for subject, _ in warned} == {"broker-2.example:8080"}
    assert ("broker-2.example:8080", 19200) in warned
    asked = {c for c in standin.calls if c.endswith("/admin/v2/brokers/version")}
    assert asked  # each broker was asked at its own address (the stand-in answers by host)
    standin.state["brokers"]["broker-2.example:8080"] = "4.2.5"  # the fix: finish the rolling upgrade
    result, out = doctor_json(monkeypatch, standin, tmp_path, "--only", "versions")
    assert result.exit_code == 0, result.output


def test_a_broker_that_cannot_say_its_version_is_unknown_and_the_others_still_judged(monkeypatch, tmp_path):
    standin = BrokerStandIn()
    standin.state["brokers"] = dict(BROKERS, **{"broker-3.example:8080": None})  # answers 503
    result, out = doctor_json(monkeypatch, standin, tmp_path, "--only", "versions")
    assert result.exit_code == 1, result.output
    by_subject = {f["subject"]: f for f in out["findings"]}
    assert by_subject["broker-3.example:8080"]["severity"] == "unknown"
    assert "503" in by_subject["broker-3.example:8080"]["evidence"]["reason"]
    assert by_subject["broker-2.example:8080"]["severity"] == "warning"


def _recorded_change(home, target: str, at_ms: int) -> None:
    """A change of the pending-ack flag txnadmin recorded (as `set-txn-pending-ack-batch-log` writes it)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "batchlog-changes.json").write_text(json.dumps(
        {target: {PENDING_ACK_BATCH_FLAG: {"enabled": False, "previous": True, "at": at_ms}}}))


@pytest.mark.parametrize("status", [403, 500])
def test_one_store_refusing_its_internal_stats_is_one_unknown_finding_not_the_end_of_the_run(monkeypatch, tmp_path,
                                                                                            status):
    standin = BrokerStandIn()
    subs = standin.state["topics"][TOPIC]["subscriptions"]
    subs["audit"] = dict(subs["billing"])  # a second store: its internal stats answer `status`
    standin.state["topics"][TOPIC]["internal"]["cursors"]["audit"] = {}
    home = tmp_path / "home"
    _recorded_change(home, standin.base, NOW - 60_000)  # billing's ledger (10:00) predates it: not reopened since
    original = standin._route

    def route(method, path, params):
        if path.startswith("/admin/v3/transactions/pendingAckInternalStats/") and path.endswith("/audit"):
            return status, {"reason": "Don't have permission" if status == 403 else "Internal Server Error"}
        return original(method, path, params)

    standin._route = route
    result, out = doctor_json(monkeypatch, standin, home)
    assert result.exit_code == 1, result.output  # the rest of the report: billing's store lags the change
    batched = [f for f in out["findings"] if f["check"] == "batched-log" and f["subject"] == "pending-ack stores"]
    (unknown,) = [f for f in batched if f["severity"] == "unknown"]
    assert str(status) in unknown["evidence"]["reason"]
    assert unknown["evidence"]["examples"] == [f"{TOPIC}-audit__transaction_pending_ack"]
    (lagging,) = [f for f in batched if f["severity"] == "warning"]
    assert lagging["evidence"]["notReopenedSinceChange"] == [f"{TOPIC} billing"]
    assert len(out["summary"]["checks"]) == 11  # every check ran and reported (all but bookie-rocksdb)
    assert any(f["subject"] == "writer metrics" for f in out["findings"])  # the check went on past the store
    standin._route = original  # readable again: both stores judged, no unknown
    result, out = doctor_json(monkeypatch, standin, home)
    assert result.exit_code == 1, result.output
    (lagging,) = [f for f in out["findings"] if f["check"] == "batched-log" and f["subject"] == "pending-ack stores"]
    assert lagging["evidence"]["notReopenedSinceChange"] == [f"{TOPIC} audit", f"{TOPIC} billing"]


@pytest.mark.parametrize("version,unknowns", [("5.0.0", ["versions"]), ("4.2.5", [])])
def test_what_doctor_could_not_check_never_adds_up_to_healthy(monkeypatch, tmp_path, version, unknowns):
    """Issue 34 point 2: a finding said doctor did not check Pulsar 5's scalable-topic transactions, and the last line
    read 'healthy: 0 critical, 0 warning…' with exit 0. Unknown is "not all checked", exit 3 (cannot tell)."""
    standin = BrokerStandIn()
    standin.state["brokers"] = {broker: version for broker in BROKERS}
    env = {"TXNADMIN_HOME": str(tmp_path)}
    monkeypatch.setattr("txnadmin.admin.target.open_admin", lambda target: standin.admin())
    shown = runner.invoke(app, ["-u", standin.base, "doctor", "--only", "versions"], env=env)
    result = runner.invoke(app, ["-u", standin.base, "doctor", "-o", "json", "--only", "versions"], env=env)
    out = json.loads(result.stdout)  # one JSON document whatever the verdict
    strict = runner.invoke(app, ["-u", standin.base, "doctor", "--only", "versions", "--strict"], env=env)
    last = shown.stdout.strip().splitlines()[-1]
    if unknowns:
        assert [f["check"] for f in out["findings"]] == unknowns * len(BROKERS)
        assert shown.exit_code == result.exit_code == 3, shown.output  # docs/exit-codes.md: 3 is "cannot tell"
        assert last.startswith("not all checked: 0 critical, 0 warning, 3 unknown") and "healthy" not in last
        assert out["summary"]["healthy"] is False and out["summary"]["verdict"] == "not all checked"
        assert strict.exit_code == 1 and strict.stdout.strip().splitlines()[-1].startswith("NOT healthy")
    else:  # every check ran and found nothing: healthy, 0
        assert shown.exit_code == result.exit_code == strict.exit_code == 0, shown.output
        assert last.startswith("healthy: 0 critical, 0 warning, 0 unknown")
        assert out["summary"]["healthy"] is True and out["summary"]["verdict"] == "healthy"
