"""`txnadmin doctor`: each check is shown its condition, must report it with the right evidence and fix, and must
be clean once the fix is applied. Conditions the engine produces honestly run on the engine behind a real HTTP
server; the others run against a broker stand-in answering with Pulsar's JSON (tests/broker_standin.py)."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from broker_standin import NOW, V3, BrokerStandIn, open_transaction, unexpected_error
from txnadmin.admin.protocol import TxnId
from txnadmin.cli.main import app
from txnadmin.procedures import doctor
from engine_helpers import served_engine, wait_served

runner = CliRunner()
TOPIC = "persistent://public/default/orders"
ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign-partition-{}"


def run_cli(monkeypatch, standin: BrokerStandIn, *args, env=None):
    monkeypatch.setattr("txnadmin.admin.target.open_admin", lambda target: standin.admin())
    return runner.invoke(app, ["-u", standin.base, "doctor", *args], env=env)


def report(standin: BrokerStandIn, only=None, **thresholds):
    t = doctor.parse_thresholds([f"{k.replace('_', '-')}={v}" for k, v in thresholds.items()])
    return doctor.run(standin.admin(), standin.base, only, t)


def bad(rep):
    return [f for f in rep.findings if f.severity in ("warning", "critical")]


# -- shape and exit codes -------------------------------------------------------------------------

def every_check_answered(standin: BrokerStandIn) -> BrokerStandIn:
    """The stand-in serving /metrics too (a broker without batched writers yet): nothing left unknown to doctor."""
    standin.state["metrics_status"] = 200
    return standin


def test_healthy_cluster_json_shape_and_exit_0(monkeypatch, tmp_path):
    standin = every_check_answered(BrokerStandIn())
    result = run_cli(monkeypatch, standin, "-o", "json", env={"TXNADMIN_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["summary"]["verdict"] == "healthy" and out["summary"]["healthy"] is True
    assert list(out) == ["target", "checkedAt", "findings", "summary"]
    assert out["target"] == standin.base
    assert out["checkedAt"].startswith("2026-09-21T")  # the broker's clock (NOW), not this machine's
    for finding in out["findings"]:
        assert list(finding) == ["check", "severity", "subject", "evidence", "why", "fix", "refs"]
        assert finding["severity"] == "info"  # an unknown would make it "not all checked" (exit 3)
    assert out["summary"]["healthy"] is True and out["summary"]["clock"] == "target"
    standin.state["metrics_status"] = 404  # /metrics not reachable from here: not all checked, never healthy
    result = run_cli(monkeypatch, standin, "-o", "json", env={"TXNADMIN_HOME": str(tmp_path)})
    out = json.loads(result.stdout)
    assert result.exit_code == 3 and out["summary"]["verdict"] == "not all checked"
    # an unknown finding that says so; --strict counts it as a warning
    unknown = [f for f in out["findings"] if f["severity"] == "unknown"]
    assert [f["subject"] for f in unknown] == ["writer metrics"] and "404" in unknown[0]["evidence"]["reason"]
    strict = run_cli(monkeypatch, standin, "-o", "json", "--strict", env={"TXNADMIN_HOME": str(tmp_path)})
    assert strict.exit_code == 1 and json.loads(strict.stdout)["summary"]["healthy"] is False


def test_table_output_names_target_and_verdict(monkeypatch, tmp_path):
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,3)", opened_ago_ms=3_600_000, timeout_ms=60_000, produced=[TOPIC])
    result = run_cli(monkeypatch, standin, env={"TXNADMIN_HOME": str(tmp_path)})
    assert result.exit_code == 1
    assert result.stdout.startswith(f"doctor: {standin.base} (from --admin-url)")
    assert "CRITICAL stuck-transactions  (0,3)" in result.stdout
    assert "NOT healthy: 2 critical" in result.stdout


def test_unreachable_target_is_exit_3_one_line():
    result = runner.invoke(app, ["-u", "http://127.0.0.1:9", "doctor", "--request-timeout", "1"])
    result = runner.invoke(app, ["--request-timeout", "1", "-u", "http://127.0.0.1:9", "doctor"])
    assert result.exit_code == 3
    assert result.stderr.startswith("error: cannot read the target: http://127.0.0.1:9: cannot connect")
    assert len(result.stderr.strip().splitlines()) == 1


def test_unauthorized_target_is_exit_3(monkeypatch):
    standin = BrokerStandIn()
    original = standin.handle
    standin.handle = lambda request: __import__("httpx").Response(401, json={"reason": "Unauthorized"})
    result = run_cli(monkeypatch, standin)
    assert result.exit_code == 3 and "not authorized" in result.stderr
    standin.handle = original


@pytest.mark.parametrize("status, body", [
    (404, {"reason": "Not Found"}),  # the admin URL points at some other web server
    (500, {"reason": "Internal Server Error"}),
    (200, "<html><body>Sign in</body></html>"),  # a proxy's login page
])
def test_a_target_that_answers_nothing_as_pulsar_does_is_exit_3_not_healthy(monkeypatch, status, body):
    import httpx

    standin = every_check_answered(BrokerStandIn())
    original = standin.handle
    standin.handle = lambda request: (httpx.Response(status, json=body) if isinstance(body, dict)
                                      else httpx.Response(status, text=body))
    result = run_cli(monkeypatch, standin, "-o", "json")
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith("error: cannot read the target") and len(result.stderr.strip().splitlines()) == 1
    standin.handle = original  # the right URL: a broker answers
    assert run_cli(monkeypatch, standin, "-o", "json").exit_code == 0


def test_embedded_default_is_refused_unless_named(tmp_path):
    env = {"TXNADMIN_ADMIN_URL": "", "PULSAR_CLIENT_CONF": "", "PULSAR_HOME": str(tmp_path), "HOME": str(tmp_path)}
    result = runner.invoke(app, ["doctor"], env=env)
    assert result.exit_code == 2
    assert "doctor needs a named target" in result.stderr and "-u local:PATH" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--only", "coordinators,nope"], "--only nope: no such check"),
    (["--threshold", "stalled"], "use name=value"),
    (["--threshold", "stalled=soon"], "invalid duration 'soon' for --threshold stalled"),
    (["--threshold", "stalled=120000"], "a number needs its unit"),  # once ms; seconds or minutes elsewhere
    (["--threshold", "nope=1s"], "use name=value"),
    (["--yes"], "--yes and --dry-run go with --fix"),
    (["--fix", "--yes", "--dry-run"], "exclude each other"),
    (["-o", "xml"], "is not one of table, json, yaml"),
    (["--only", "bookie-rocksdb"], "needs --bookie-dir"),
    # --fix acts on what stuck-transactions finds: without that check "nothing to abort" would be a claim unproven
    (["--only", "max-read-position", "--fix", "--dry-run"], "--fix aborts what the stuck-transactions check finds"),
])
def test_usage_errors_are_exit_2(monkeypatch, args, message):
    result = run_cli(monkeypatch, BrokerStandIn(), *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_only_runs_just_the_named_checks(monkeypatch):
    standin = BrokerStandIn()
    result = run_cli(monkeypatch, standin, "--only", "coordinators,recovery", "-o", "json")
    # coverage comes with every check that reads topics: what could not be read is never silently left out
    assert json.loads(result.stdout)["summary"]["checks"] == ["coordinators", "recovery", "coverage"]
    assert not any("/metrics" in c or "version" in c.split()[-1].split("/")[-1] for c in standin.calls[1:])


def _many_topics(standin: BrokerStandIn, count: int) -> None:
    import copy

    for i in range(count):
        standin.state["topics"][f"persistent://public/default/t-{i}"] = copy.deepcopy(standin.state["topics"][TOPIC])


def test_concurrency_is_bounded_by_the_flag(monkeypatch):
    """--concurrency N: never more than N admin calls in flight, and more than one (the survey does run in parallel)."""
    import threading

    standin = BrokerStandIn()
    _many_topics(standin, 40)
    original = standin.handle
    lock, now, peak = threading.Lock(), [0], [0]

    def handle(request):
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        try:
            time.sleep(0.01)
            return original(request)
        finally:
            with lock:
                now[0] -= 1

    standin.handle = handle
    result = run_cli(monkeypatch, standin, "--concurrency", "4", "-o", "json")
    assert result.exit_code in (0, 3), result.output  # 3: /metrics is not served here (not all checked)
    assert 2 <= peak[0] <= 4, peak[0]
    assert run_cli(monkeypatch, standin, "--concurrency", "0").exit_code == 2  # at least one call in flight


def test_progress_counts_every_buffer_and_store_and_the_bar_shows_it(monkeypatch):
    from txnadmin.cli import doctor as doctor_cli

    standin = BrokerStandIn()
    _many_topics(standin, 450)
    seen = []
    doctor.run(standin.admin(), standin.base, ["recovery"], progress=lambda done, total: seen.append((done, total)))
    total = 2 * 451  # a buffer and a pending-ack store per topic
    assert seen[-1] == (total, total) and [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) >= 3
    # on a terminal the CLI draws a bar from those calls; piped or with -o json it draws nothing
    monkeypatch.setattr(doctor_cli.sys.stderr, "isatty", lambda: True)
    bar, progress = doctor_cli._progress("table")
    progress(200, total)
    (task,) = bar.tasks
    assert (task.completed, task.total) == (200, total)
    assert doctor_cli._progress("json") == (None, None)


# -- 1. coordinators ------------------------------------------------------------------------------

def test_coordinators_disabled_says_so_and_fix_clears_it(monkeypatch):
    standin = BrokerStandIn()
    standin.state["tc_disabled"] = True
    rep = report(standin)
    (finding,) = [f for f in rep.findings if f.check == "coordinators"]
    assert finding.severity == "warning" and finding.evidence["status"] == 503
    assert "transactionCoordinatorEnabled=false" in finding.why and "error" not in finding.why.lower()
    assert "transactionCoordinatorEnabled=true" in finding.fix
    assert doctor.exit_code(rep) == 1
    standin.state["tc_disabled"] = False  # the fix: enabled and initialized
    assert not bad(report(standin))


def test_coordinator_not_ready_or_not_answering(monkeypatch):
    standin = BrokerStandIn()
    standin.state["coordinators"][1]["state"] = "Close"
    standin.state["coordinators"][2] = {"status": 500, "reason": "Transaction coordinator with id 2 not found!"}
    rep = report(standin, only=["coordinators"])
    found = {f.subject: f for f in rep.findings}
    assert found["coordinator 1"].severity == "critical" and found["coordinator 1"].evidence["state"] == "Close"
    assert ASSIGN.format(1) in found["coordinator 1"].fix
    assert found["coordinator 2"].evidence["status"] == 500
    assert set(found) == {"coordinator 1", "coordinator 2"}  # the assign topic has a partition per coordinator
    standin.state["coordinators"][1]["state"] = "Ready"
    standin.state["coordinators"][2] = dict(standin.state["coordinators"][0])
    assert not bad(report(standin, only=["coordinators"]))


@pytest.mark.parametrize("status", [500, 403])
def test_a_coordinator_that_does_not_answer_leaves_its_transactions_unknown(monkeypatch, status):
    """Coordinator 1 does not answer (500), or not to doctor's role (403): its transactions were never read, so
    `--only stuck-transactions --strict` must not pass — and a 403 is a permission problem, not a dead coordinator."""
    standin = BrokerStandIn()
    open_transaction(standin.state, "(1,5)", opened_ago_ms=2 * 3_600_000, timeout_ms=60_000)
    standin.state["coordinators"][1] = {"status": status, "reason": "Transaction coordinator not available"}
    result = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--strict", "-o", "json")
    assert result.exit_code == 1, result.output
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["severity"] == "unknown" and finding["subject"] == "coordinator 1"
    assert str(status) in finding["evidence"]["reason"]
    (coordinator,) = [f for f in report(standin, only=["coordinators"]).findings if f.subject == "coordinator 1"]
    assert coordinator.severity == ("critical" if status == 500 else "unknown")
    standin.state["coordinators"][1] = dict(standin.state["coordinators"][0])  # it answers again: the stuck one shows
    again = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "-o", "json")
    assert again.exit_code == 1 and json.loads(again.stdout)["findings"][0]["subject"] == "(1,5)"


def test_assign_topic_partitions_must_match_coordinators():
    standin = BrokerStandIn()
    standin.state["assign_partitions"] = [0, 1, 2]
    rep = report(standin, only=["coordinators"])
    (finding,) = bad(rep)
    assert finding.subject == "transaction_coordinator_assign"
    assert finding.evidence == {"partitions": [0, 1, 2], "coordinators": [0, 1]}
    assert "scale-transactionCoordinators" in finding.fix
    del standin.state["assign_partitions"]
    assert not bad(report(standin, only=["coordinators"]))


# -- 2. stuck transactions ------------------------------------------------------------------------

def test_stuck_open_is_judged_on_the_brokers_clock_and_fixed(monkeypatch):
    standin = BrokerStandIn()
    open_transaction(standin.state, "(1,5)", opened_ago_ms=2 * 3_600_000, timeout_ms=60_000, produced=[TOPIC],
                     owner="payments")
    open_transaction(standin.state, "(0,8)", opened_ago_ms=30_000, timeout_ms=60_000)  # live, within its timeout
    rep = report(standin, only=["stuck-transactions"])
    stuck = [f for f in rep.findings if f.severity == "critical"]
    assert [f.subject for f in stuck] == ["(1,5)"]
    ev = stuck[0].evidence
    assert ev["ageMs"] == 7_200_000 and ev["timeoutMs"] == 60_000 and ev["overdueMs"] == 7_140_000
    assert ev["owner"] == "payments" and ev["producedPartitions"] == [TOPIC] and ev["clock"] == "target"
    assert "abort-transaction -m 1 -l 5" in stuck[0].fix and "apache/pulsar#19200" in stuck[0].refs
    oldest = [f for f in rep.findings if f.severity == "info" and f.subject == "coordinator 0"]
    assert oldest and oldest[0].evidence["txnId"] == "(0,8)"

    dry = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--fix", "--dry-run")
    assert dry.exit_code == 1 and "  - abort (1,5)" in dry.stdout and "dry run: nothing was changed" in dry.stdout
    assert f"target: {standin.base} (from --admin-url)" in dry.stdout
    dry_json = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--fix", "--dry-run", "-o", "json")
    out = json.loads(dry_json.stdout)  # one document: the report, with the plan in it
    assert out["fix"]["dryRun"] is True and out["fix"]["plan"]["abort"] == ["(1,5)"]
    assert "(1,5)" in standin.state["transactions"]
    unconfirmed = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--fix")
    assert unconfirmed.exit_code == 2 and "--yes" in unconfirmed.stderr
    assert "(1,5)" in standin.state["transactions"]

    fixed = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--fix", "--yes")
    assert fixed.exit_code == 0, fixed.output
    assert "aborted (1,5)" in fixed.stdout and "healthy" in fixed.stdout
    assert "(1,5)" not in standin.state["transactions"] and "(0,8)" in standin.state["transactions"]
    assert "POST /admin/v3/transactions/abortTransaction/1/5" in standin.calls
    assert not any("abortTransaction/0/8" in c for c in standin.calls)


def test_a_fast_local_clock_cannot_make_fix_abort_live_transactions(monkeypatch):
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,8)", opened_ago_ms=30_000, timeout_ms=60_000)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 10 * 3600)  # this laptop runs ten hours fast
    result = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--fix", "--yes", "-o", "json")
    assert result.exit_code == 0, result.output
    assert "nothing to abort" in result.stderr
    assert not any("abortTransaction" in c for c in standin.calls)


def test_without_the_brokers_clock_fix_refuses_and_ages_are_unknown(monkeypatch):
    standin = BrokerStandIn()
    standin.state["date_header"] = False
    open_transaction(standin.state, "(1,5)", opened_ago_ms=2 * 3_600_000, timeout_ms=60_000)
    rep = report(standin, only=["stuck-transactions"])
    assert [f.severity for f in rep.findings] == ["unknown"] and "Date header" in rep.findings[0].evidence["reason"]
    result = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--fix", "--yes")
    assert result.exit_code == 3 and "clock is unknown" in result.stderr
    assert not any("abortTransaction" in c for c in standin.calls)


@pytest.mark.parametrize("missing", ["openTimestamp", "timeoutAt"])
def test_fix_never_aborts_a_transaction_whose_age_the_answer_does_not_prove(monkeypatch, missing):
    """A coordinator answer without a transaction's open time (or timeout) must not read as "opened in 1970": that
    would make a live transaction look decades overdue and `--fix --yes` abort it."""
    standin = BrokerStandIn()
    meta = open_transaction(standin.state, "(0,9)", opened_ago_ms=5_000, timeout_ms=60_000, produced=[TOPIC])
    del meta[missing]
    result = run_cli(monkeypatch, standin, "--only", "stuck-transactions,max-read-position", "--fix", "--yes",
                     "-o", "json")
    assert result.exit_code in (1, 3), result.output  # the transaction's age is unknown: never "healthy"
    assert not any("abortTransaction" in c for c in standin.calls)
    assert "nothing to abort" in result.stderr
    out = json.loads(result.stdout)
    (finding,) = [f for f in out["findings"] if f["subject"] == "(0,9)"]
    assert finding["severity"] == "unknown" and missing in finding["evidence"]["reason"]
    assert not any(f["severity"] == "critical" for f in out["findings"])
    strict = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--strict")
    assert strict.exit_code == 1  # it proves nothing, so a CI gate on --strict does not pass


def test_a_transaction_listed_under_an_id_doctor_cannot_read_is_unknown_not_skipped(monkeypatch):
    standin = BrokerStandIn()
    meta = open_transaction(standin.state, "(1,5)", opened_ago_ms=2 * 3_600_000, timeout_ms=60_000)
    standin.state["transactions"]["(1,txn-5)"] = standin.state["transactions"].pop("(1,5)")  # a garbled listing key
    meta["txnId"] = "(1,txn-5)"
    result = run_cli(monkeypatch, standin, "--only", "stuck-transactions", "--strict", "-o", "json")
    assert result.exit_code == 1, result.output
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["severity"] == "unknown" and "(1,txn-5)" in finding["evidence"]["reason"]


def test_committing_too_long_uses_a_lower_bound():
    standin = BrokerStandIn()
    # ended at the latest at its timeout (9.5 min after open): at most 30 s in COMMITTING — not yet judged
    open_transaction(standin.state, "(0,4)", opened_ago_ms=600_000, timeout_ms=570_000, status="COMMITTING")
    assert not bad(report(standin, only=["stuck-transactions"]))
    open_transaction(standin.state, "(1,9)", opened_ago_ms=1_200_000, timeout_ms=60_000, status="ABORTING")
    (finding,) = bad(report(standin, only=["stuck-transactions"]))
    assert finding.subject == "(1,9)" and finding.evidence["endingForAtLeastMs"] == 1_140_000
    assert ASSIGN.format(1) in finding.fix and "apache/pulsar#23550" in finding.refs
    del standin.state["transactions"]["(1,9)"]  # the coordinator reloaded and finished the end
    assert not bad(report(standin, only=["stuck-transactions"]))


@pytest.mark.parametrize("version, upgrade", [
    ("4.1.2", None),  # doctor's own table lists 4.1.2 as fixed: no "upgrade to a release with PR #23551"
    ("4.0.7", "upgrade broker.example:8080 (4.0.7) to 4.0.8 or later (PR #23551)"),
    ("3.2.4", "upgrade broker.example:8080 (3.2.4) to a line with it (3.0.15 / 4.0.8 / 4.1.2 or later)"),
])
def test_the_fix_for_a_held_commit_fits_the_brokers_release(version, upgrade):
    standin = BrokerStandIn()
    standin.state["version"] = version
    open_transaction(standin.state, "(1,9)", opened_ago_ms=1_200_000, timeout_ms=60_000, status="COMMITTING")
    (finding,) = bad(report(standin, only=["stuck-transactions"]))
    assert f"`pulsar-admin topics unload {ASSIGN.format(1)}`" in finding.fix
    if upgrade is None:
        assert "upgrade" not in finding.fix and "every broker runs a release with PR #23551 (4.1.2)" in finding.fix
    else:
        assert upgrade in finding.fix


def test_past_its_timeout_but_within_the_margin_says_how_far_past_and_when_it_is_stuck():
    """Tried as a new user would: 49.6 s past a 10 s timeout used to read "nothing while it is within its
    timeout"."""
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,5)", opened_ago_ms=59_600, timeout_ms=10_000, produced=[TOPIC])
    rep = report(standin, only=["stuck-transactions"])
    (finding,) = rep.findings
    assert finding.severity == "info" and finding.subject == "coordinator 0"
    assert "49.6s past its own timeout of 10.0s" in finding.why and "once it is 1.0m past its timeout" in finding.why
    assert "in 10.4s" in finding.why and "within its timeout" not in finding.why + finding.fix
    assert finding.evidence["overdueMs"] == 49_600 and finding.evidence["stuckInMs"] == 10_400
    assert "run doctor again in 10.4s" in finding.fix
    standin.state["transactions"].clear()
    open_transaction(standin.state, "(0,6)", opened_ago_ms=4_000, timeout_ms=10_000)  # within: says when it times out
    (finding,) = report(standin, only=["stuck-transactions"]).findings
    assert "nothing while it is within its timeout (it times out in 6.0s)" in finding.fix
    assert finding.evidence["timesOutInMs"] == 6_000


def test_ages_are_never_negative_the_json_keeps_the_raw_value():
    """The target's Date header is whole seconds: an open time a few hundred ms after it is "<1s" old, never
    "-0.6s"; the raw milliseconds stay in the JSON."""
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,7)", opened_ago_ms=-600, timeout_ms=10_000)
    buffer = standin.state["topics"][TOPIC]["buffer"]
    buffer.update(snapshotType="Segment", lastSnapshotTimestamps=standin.state["now"] + 700,
                  segmentsStats={"segmentsSize": 2})
    rep = report(standin, only=["stuck-transactions", "snapshots"])
    found = {f.check: f for f in rep.findings}
    assert found["stuck-transactions"].evidence["age"] == "<1s" and found["stuck-transactions"].evidence["ageMs"] == -600
    assert "-0." not in found["stuck-transactions"].why
    assert found["snapshots"].evidence["oldestLastSnapshot"] == "<1s"
    assert found["snapshots"].evidence["oldestLastSnapshotMs"] == -700
    buffer["lastSnapshotTimestamps"] = standin.state["now"] + 120_000  # minutes ahead: clocks disagree, said so
    (snap,) = [f for f in report(standin, only=["snapshots"]).findings if f.check == "snapshots"]
    assert snap.evidence["oldestLastSnapshot"] == "2.0m in the future (the brokers' clocks disagree)"


def test_coordinators_piled_on_one_broker_are_a_warning():
    """#22953: a broker holding more than ceil(N/brokers)+1 coordinators takes them all down when it restarts."""
    standin = BrokerStandIn()
    s = standin.state
    s["brokers"] = {"b1:8080": "4.2.5", "b2:8080": "4.2.5", "b3:8080": "4.2.5"}
    for i in range(2, 9):
        s["coordinators"][i] = dict(s["coordinators"][0])
    s["coordinator_brokers"] = {i: "pulsar://b1:6650" for i in range(8)}
    s["coordinator_brokers"][0] = "pulsar://b2:6650"
    (finding,) = bad(report(standin, only=["coordinators"]))
    assert (finding.severity, finding.subject) == ("warning", "pulsar://b1:6650")
    assert finding.evidence["count"] == 7 and finding.evidence["limit"] == 4 and finding.evidence["brokers"] == 3
    assert finding.evidence["brokersCountedFrom"] == "the active brokers listed"
    assert ASSIGN.format(7) in finding.fix and finding.refs == ["apache/pulsar#22953"]
    s["coordinator_brokers"] = {i: f"pulsar://b{1 + i % 3}:6650" for i in range(8)}  # 3/3/2: spread
    assert not bad(report(standin, only=["coordinators"]))
    s["coordinator_brokers"] = {i: "pulsar://b1:6650" if i < 5 else "pulsar://b2:6650" for i in range(8)}
    (finding,) = bad(report(standin, only=["coordinators"]))  # 5 > ceil(8/3) + 1 = 4
    assert finding.evidence["count"] == 5


# -- 3. max read position -------------------------------------------------------------------------

def test_max_read_position_stalled_behind_an_old_transaction():
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,3)", opened_ago_ms=600_000, timeout_ms=3_600_000, produced=[TOPIC], owner="etl")
    (finding,) = bad(report(standin, only=["max-read-position"]))
    assert finding.subject == TOPIC and finding.severity == "warning"
    ev = finding.evidence
    assert (ev["maxReadPosition"], ev["lastConfirmedEntry"], ev["entriesBehind"]) == ("12:4", "12:60", 56)
    assert ev["oldestTxn"] == "(0,3)" and ev["oldestTxnAgeMs"] == 600_000 and ev["owner"] == "etl"
    assert "abort-transaction -m 0 -l 3" in finding.fix
    # younger than the threshold: consumers wait, but nothing is stalled yet
    assert not bad(report(standin, only=["max-read-position"], stalled="15m"))
    standin.admin().abort_transaction(TxnId(0, 3))
    assert not bad(report(standin, only=["max-read-position"]))


def test_buffer_waiting_for_a_transaction_no_coordinator_knows():
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,3)", opened_ago_ms=600_000, timeout_ms=3_600_000, produced=[TOPIC])
    del standin.state["transactions"]["(0,3)"]  # the coordinator lost it (apache/pulsar#19200)
    (finding,) = bad(report(standin, only=["max-read-position"]))
    assert "no coordinator lists" in finding.why and f"topics unload {TOPIC}" in finding.fix


# -- 4. recovery ----------------------------------------------------------------------------------

def test_recovery_that_never_ends_names_topic_and_subscription():
    standin = BrokerStandIn()
    topic = standin.state["topics"][TOPIC]
    topic["buffer"].update(state="Initializing", recoverStartTime=NOW - 3_600_000, recoverEndTime=0)
    topic["subscriptions"]["billing"].update(state="Initializing", recoverStartTime=NOW - 1_800_000, recoverEndTime=0)
    standin.state["coordinators"][1].update(state="Initializing", recoverStartTime=NOW - 900_000, recoverEndTime=0)
    found = {f.subject: f for f in bad(report(standin, only=["recovery"]))}
    assert set(found) == {TOPIC, f"{TOPIC} billing", "coordinator 1"}
    assert found[TOPIC].evidence["recoveringForMs"] == 3_600_000 and "apache/pulsar#17040" in found[TOPIC].refs
    assert found[f"{TOPIC} billing"].evidence["store"] == f"{TOPIC}-billing__transaction_pending_ack"
    assert "apache/pulsar#26368" in found[f"{TOPIC} billing"].refs
    # a recovery that started 2 minutes ago is still within the threshold
    assert not bad(report(standin, only=["recovery"], recovery="2h"))
    for stats in (topic["buffer"], topic["subscriptions"]["billing"], standin.state["coordinators"][1]):
        stats.update(state="Ready", recoverEndTime=NOW - 1000)  # the fix: unload, recovery completes
    assert not bad(report(standin, only=["recovery"]))


# -- 5. snapshots ---------------------------------------------------------------------------------

def test_single_snapshot_near_max_message_size_recommends_segments():
    standin = BrokerStandIn()
    standin.state["topics"][TOPIC]["buffer"]["totalAbortedTransactions"] = 200_000
    (finding,) = bad(report(standin, only=["snapshots"]))
    assert finding.severity == "warning" and finding.evidence["estimatedSnapshotBytes"] == 3_200_000
    assert finding.evidence["maxMessageSize"] == 5_242_880 and not finding.evidence["maxMessageSizeAssumed"]
    assert "transactionBufferSegmentedSnapshotEnabled=true" in finding.fix and "apache/pulsar#16913" in finding.refs
    standin.state["topics"][TOPIC]["buffer"]["totalAbortedTransactions"] = 400_000
    assert bad(report(standin, only=["snapshots"]))[0].severity == "critical"
    standin.state["topics"][TOPIC]["buffer"].update(snapshotType="Segment", segmentsStats={"segmentsSize": 5})
    rep = report(standin, only=["snapshots"])
    assert not bad(rep) and rep.findings[0].evidence["segments"] == 5


# -- 7. leftovers ---------------------------------------------------------------------------------

def test_pending_ack_stores_whose_topic_or_subscription_is_gone():
    standin = BrokerStandIn()
    gone_topic = "persistent://public/default/refunds-audit__transaction_pending_ack"
    gone_sub = f"{TOPIC}-old-reader__transaction_pending_ack"
    standin.state["extra_system_topics"] = [gone_topic, gone_sub]
    found = {f.subject: f for f in bad(report(standin, only=["leftovers"]))}
    assert found[gone_topic].evidence["missing"] == "topic"
    assert found[gone_sub].evidence == {"store": gone_sub, "topic": TOPIC, "missing": "subscription",
                                        "subscriptions": ["billing"]}
    assert found[gone_sub].fix.startswith(f"`pulsar-admin topics delete {gone_sub}`")
    standin.state["extra_system_topics"] = []  # deleted
    assert not bad(report(standin, only=["leftovers"]))


# -- what the survey could not read ---------------------------------------------------------------

def _refuse_namespace(standin):
    """The stand-in answers 403 to listing public/default's topics; returns the original router."""
    original = standin._route

    def route(method, path, params):
        if path == "/admin/v2/namespaces/public/default/topics":
            return 403, {"reason": "Don't have permission to administrate resources on this tenant"}
        return original(method, path, params)

    standin._route = route
    return original


def test_unreadable_namespaces_and_buffers_are_unknown_not_healthy():
    standin = BrokerStandIn()
    original = _refuse_namespace(standin)
    rep = report(standin, only=["coverage", "max-read-position", "recovery"])
    (finding,) = rep.findings
    assert finding.severity == "unknown" and finding.subject == "topics of public/default"
    assert "403" in finding.evidence["reason"] and doctor.exit_code(rep) == 3 and doctor.exit_code(rep, strict=True) == 1
    standin._route = original
    standin.state["topics"]["persistent://public/default/idle"] = {"subscriptions": {}}  # not loaded: stats 404
    rep = report(standin, only=["coverage"])
    (finding,) = rep.findings
    assert finding.severity == "info" and finding.evidence["examples"] == ["persistent://public/default/idle"]


@pytest.mark.parametrize("only", ["recovery", "max-read-position", "snapshots", "leftovers"])
def test_a_refused_namespace_is_unknown_whichever_checks_run(monkeypatch, only):
    """A 403 on a namespace hides its topics from every topic check: `--only` without `coverage` must still say so,
    so `--strict` cannot pass on a cluster doctor could not read (here one with a stalled buffer behind the 403)."""
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,3)", opened_ago_ms=600_000, timeout_ms=60_000, produced=[TOPIC])
    standin.state["extra_system_topics"] = [f"{TOPIC}-old-reader__transaction_pending_ack"]  # a leftover
    topic = standin.state["topics"][TOPIC]
    topic["buffer"].update(state="Initializing", recoverStartTime=NOW - 3_600_000, recoverEndTime=0,
                           totalAbortedTransactions=400_000)
    original = _refuse_namespace(standin)
    result = run_cli(monkeypatch, standin, "--only", only, "--strict", "-o", "json")
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    unknown = [f for f in out["findings"] if f["severity"] == "unknown" and f["subject"] == "topics of public/default"]
    assert unknown and "403" in unknown[0]["evidence"]["reason"]
    assert "coverage" in out["summary"]["checks"]
    standin._route = original  # the fix: doctor's role may read the namespace; now the problem itself shows
    shown = run_cli(monkeypatch, standin, "--only", only, "-o", "json")
    assert shown.exit_code == 1 and not [f for f in json.loads(shown.stdout)["findings"] if f["severity"] == "unknown"]


def test_pending_ack_stores_that_cannot_be_read_are_unknown_for_the_recovery_check(monkeypatch):
    standin = BrokerStandIn()
    original = standin._route

    def route(method, path, params):
        if path.startswith("/admin/v3/transactions/pendingAckStats/"):
            return 403, {"reason": "Don't have permission"}
        return original(method, path, params)

    standin._route = route
    result = run_cli(monkeypatch, standin, "--only", "recovery", "--strict", "-o", "json")
    assert result.exit_code == 1, result.output
    (finding,) = [f for f in json.loads(result.stdout)["findings"] if f["severity"] == "unknown"]
    assert finding["subject"] == "pending-ack stores" and finding["evidence"]["status"] == 403
    assert finding["evidence"]["examples"] == [f"{TOPIC}-billing__transaction_pending_ack"]
    standin._route = original
    assert run_cli(monkeypatch, standin, "--only", "recovery", "--strict").exit_code == 0



@pytest.mark.parametrize("only", ["leftovers", "recovery"])
def test_a_stores_500_is_a_leftover_only_when_the_topic_lacks_its_subscription(monkeypatch, only):
    """A broker answers pendingAckStats of a subscription missing from its loaded topic with a NullPointerException
    (a plain-text 500): that is a leftover store, not an unreadable one; a 500 while the subscription exists is a
    broker failing, which coverage must report as unknown and leftovers must not call a leftover."""
    standin = BrokerStandIn()
    leftover = f"{TOPIC}-old-reader__transaction_pending_ack"
    standin.state["extra_system_topics"] = [leftover]
    out = json.loads(run_cli(monkeypatch, standin, "--only", only, "-o", "json").stdout)["findings"]
    assert not [f for f in out if f["severity"] == "unknown"], out
    assert [f["subject"] for f in out if f["check"] == "leftovers"] == ([leftover] if only == "leftovers" else [])
    original = standin._route

    def failing(method, path, params):  # the same 500 for the store whose subscription exists
        if path == f"{V3}/pendingAckStats/public/default/orders/billing":
            return 500, unexpected_error("Cannot invoke \"...\" because \"handle\" is null")
        return original(method, path, params)

    standin._route = failing
    out = json.loads(run_cli(monkeypatch, standin, "--only", only, "-o", "json").stdout)["findings"]
    (unknown,) = [f for f in out if f["severity"] == "unknown"]
    assert unknown["evidence"]["examples"] == [f"{TOPIC}-billing__transaction_pending_ack"], unknown
    assert unknown["evidence"]["status"] == 500 and "Stacktrace" not in unknown["evidence"]["reason"], unknown
    assert f"{TOPIC}-billing__transaction_pending_ack" not in [f["subject"] for f in out if f["check"] == "leftovers"]


# -- 8. versions ----------------------------------------------------------------------------------

Y2026 = {26368, 26565, 26335, 26431, 26773, 26073}  # fixed in 4.0.14, 4.2.5 and 5.0.0 (their release notes)


@pytest.mark.parametrize("version, issues", [  # fixed-in releases from Pulsar's release notes (docs/doctor.md)
    ("2.10.3", {17040, 19200, 22943, 23550, 24945, 24401} | Y2026),
    ("2.10.4", {22943, 23550, 24945, 24401} | Y2026),
    ("3.0.6", {22943, 23550, 24945, 24401} | Y2026),
    ("3.0.7", {23550, 24945, 24401} | Y2026),  # PR #23189 shipped in 3.0.7
    ("3.0.15", {24945} | Y2026),  # PR #23551 shipped in 3.0.15; PR #24945 is in no 3.0 release notes
    ("3.2.4", {22943, 23550, 24945, 24401} | Y2026),  # a line none of the fixes was backported to
    ("3.3.2", {23550, 24945, 24401} | Y2026),
    ("3.3.8", {23550, 24945} | Y2026),  # PR #24401 shipped in 3.3.8
    ("4.0.1", {23550, 24945, 24401} | Y2026),
    ("4.0.8", Y2026),
    ("4.0.13", Y2026),
    ("4.0.14", set()),
    ("4.1.1", {23550, 24945} | Y2026),
    ("4.1.2", Y2026),  # no 4.1.x release carries the 2026 fixes
    ("4.2.4", Y2026),
    ("4.2.5", set()),
    ("5.0.0", set()),
])
def test_versions_against_known_bugs(version, issues):
    standin = BrokerStandIn()
    standin.state["version"] = version
    rep = report(standin, only=["versions"])
    assert {f.evidence["ref"] for f in bad(rep)} == issues
    line = tuple(int(x) for x in version.split(".")[:2])
    for finding in bad(rep):  # the fix fits the broker's line; the refs name the bug (and its PR when known)
        own = [v for v in finding.evidence["fixedIn"] if tuple(int(x) for x in v.split(".")[:2]) == line]
        if own:
            assert finding.fix.startswith(f"upgrade to {own[0]} or later (the first {line[0]}.{line[1]}.x")
        else:
            assert finding.fix.startswith("upgrade to a line with PR #")
            assert f"doctor knows no {line[0]}.{line[1]}.x release with it" in finding.fix
        assert finding.refs[0] == f"apache/pulsar#{finding.evidence['ref']}" and finding.evidence["source"]


def test_pulsar_5_scalable_topic_transactions_are_unknown_so_never_healthy():
    standin = BrokerStandIn()
    standin.state["version"] = "5.0.0"
    rep = report(standin, only=["versions"])
    (finding,) = rep.findings
    assert finding.severity == "unknown" and "PIP-473" in finding.evidence["reason"]
    assert doctor.exit_code(rep) == 3 and rep.verdict() == "not all checked"
    standin.state["version"] = "garbage"
    assert report(standin, only=["versions"]).findings[0].severity == "unknown"


# -- the embedded engine, behind a real HTTP server -----------------------------------------------

@pytest.fixture
def served(tmp_path):
    """An engine without its timeout thread (the #19200 condition: nothing aborts timed-out transactions),
    served over HTTP in this process, so tests can drive it and doctor reads it as a user would."""
    with served_engine(tmp_path, "4.2.5", coordinators=2) as found:
        yield found


def doctor_json(url, home, *args):
    result = runner.invoke(app, ["-u", url, "doctor", "-o", "json", *args], env={"TXNADMIN_HOME": str(home)})
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def doctor_until(url, home, wanted, *args, deadline=20.0):
    """Run doctor until ``wanted(findings)`` holds: the server's Date header is cached per event-loop tick and counts
    whole seconds, so on a loaded machine the broker's clock may trail ours by a few seconds (ages come out short,
    never long)."""
    end = time.monotonic() + deadline
    while True:
        code, out = doctor_json(url, home, *args)
        if wanted(out["findings"]) or time.monotonic() > end:
            return code, out
        time.sleep(0.2)


def test_engine_healthy_after_traffic_is_exit_0(served):
    engine, url, home = served
    engine.subscribe(TOPIC, "billing")
    for commit in (True, False):
        message = engine.publish(TOPIC, b"m")
        txn = engine.begin(60_000)
        engine.produce(txn, TOPIC, b"t")
        engine.ack(txn, TOPIC, "billing", [message])
        engine.end_transaction(txn, commit)
    code, out = doctor_json(url, home)
    assert code == 0, out["findings"]
    assert out["summary"]["checks"] == [c for c in doctor.CHECKS if c != "bookie-rocksdb"]


def test_a_fresh_engine_with_its_defaults_is_healthy_and_its_claimed_release_judged_as_any_other(tmp_path):
    """What an operator sees first: `engine init`, then `doctor` on it: healthy. The engine claims the current Pulsar
    release by default (5.0.0, which carries every fix doctor knows). Claiming 4.1.2 instead, doctor judges it as it
    judges a broker's: no 4.1.x release carries the 2026 transaction fixes (4.0.14, 4.2.5, 5.0.0), so those are
    named, and nothing else."""
    env = {"TXNADMIN_HOME": str(tmp_path)}
    engine_dir = tmp_path / "eng"
    assert runner.invoke(app, ["engine", "init", str(engine_dir)], env=env).exit_code == 0
    fresh = runner.invoke(app, ["-u", f"local:{engine_dir}", "doctor", "-o", "json"], env=env)
    assert fresh.exit_code == 0, fresh.output
    assert [f for f in json.loads(fresh.stdout)["findings"] if f["severity"] in ("warning", "critical")] == []
    assert runner.invoke(app, ["engine", "init", str(engine_dir), "--exist-ok", "--set",
                                "engineBrokerVersion=4.1.2"], env=env).exit_code == 0
    result = runner.invoke(app, ["-u", f"local:{engine_dir}", "doctor", "-o", "json"], env=env)
    out = json.loads(result.stdout)
    assert [f for f in out["findings"] if f["severity"] in ("warning", "critical") and f["check"] != "versions"] == []
    versions = [f for f in out["findings"] if f["check"] == "versions"]
    assert {f["evidence"]["version"] for f in versions} == {"4.1.2"} and {f["evidence"]["ref"] for f in versions} == Y2026
    assert all(f["fix"].startswith("the engine claims 4.1.2 (engineBrokerVersion") for f in versions)


def test_engine_stuck_open_transaction_found_and_aborted_by_fix(served):
    engine, url, home = served
    txn = engine.begin(1000, owner="reporting")
    engine.produce(txn, TOPIC, b"never ends")
    engine.publish(TOPIC, b"plain, published after")
    code, out = doctor_until(url, home, lambda fs: any(f["severity"] == "critical" and f["check"] == "stuck-transactions"
                                                       for f in fs),
                             "--only", "stuck-transactions,max-read-position", "--threshold", "stuck-margin=0s",
                             "--threshold", "stalled=0s")
    assert code == 1
    found = {(f["check"], f["subject"]): f for f in out["findings"]}
    stuck = found[("stuck-transactions", f"({txn[0]},{txn[1]})")]
    assert stuck["severity"] == "critical" and stuck["evidence"]["owner"] == "reporting"
    assert stuck["evidence"]["overdueMs"] >= 0 and stuck["evidence"]["timeoutMs"] == 1000
    stalled = found[("max-read-position", TOPIC)]
    assert stalled["severity"] == "critical" and stalled["evidence"]["entriesBehind"] == 2
    result = runner.invoke(app, ["-u", url, "doctor", "--only", "stuck-transactions,max-read-position",
                                 "--threshold", "stuck-margin=0s", "--threshold", "stalled=0s", "--fix", "--yes"],
                           env={"TXNADMIN_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert f"aborted ({txn[0]},{txn[1]})" in result.stdout.splitlines()
    assert engine.topic(TOPIC).buffer_stats()["ongoingTxnSize"] == 0


def test_engine_transaction_held_in_committing_until_its_coordinator_reloads(served):
    from txnadmin.admin.http import HttpAdmin
    from txnadmin.engine.faults import hold_ending

    engine, url, home = served
    engine.subscribe(TOPIC, "billing")
    txn = engine.begin(500)
    engine.produce(txn, TOPIC, b"t")
    hold_ending(engine, txn, commit=True)
    # (until the target's whole-second clock has moved past the timeout: at exactly the timeout the bound is 0)
    code, out = doctor_until(url, home, lambda fs: any(f["severity"] == "critical" and
                                                       f["evidence"].get("endingForAtLeastMs", 0) > 0 for f in fs),
                             "--only", "stuck-transactions", "--threshold", "ending=0s")
    (finding,) = [f for f in out["findings"] if f["severity"] == "critical"]
    assert finding["evidence"]["status"] == "COMMITTING" and finding["evidence"]["endingForAtLeastMs"] > 0
    assert ASSIGN.format(txn[0]) in finding["fix"]
    # the fix as written: unload the coordinator's assign partition; it recovers and drives the commit
    HttpAdmin(url).unload_topic(ASSIGN.format(txn[0]))
    code, out = doctor_json(url, home, "--only", "stuck-transactions", "--threshold", "ending=0s")
    assert code == 0 and not out["findings"]
    assert engine.receive(TOPIC, "billing")[0].payload == b"t"


def test_engine_open_transaction_holds_max_read_position_until_aborted(served):
    engine, url, home = served
    txn = engine.begin(3_600_000)
    engine.produce(txn, TOPIC, b"pending")
    engine.publish(TOPIC, b"after")
    code, out = doctor_until(url, home, lambda fs: bool(fs), "--only", "max-read-position", "--threshold", "stalled=0s")
    (finding,) = out["findings"]
    assert finding["severity"] == "warning" and finding["evidence"]["oldestTxn"] == f"({txn[0]},{txn[1]})"
    assert finding["evidence"]["maxReadPosition"] != finding["evidence"]["lastConfirmedEntry"]
    fix = runner.invoke(app, ["-u", url, "transactions", "abort-transaction", "-m", str(txn[0]), "-l", str(txn[1])])
    assert fix.exit_code == 0, fix.output
    code, out = doctor_json(url, home, "--only", "max-read-position", "--threshold", "stalled=0s")
    assert code == 0 and not out["findings"]


def test_engine_single_snapshot_then_segmented(tmp_path):
    from txnadmin.admin.local import LocalAdmin
    from txnadmin.engine.config import EngineConfig
    from txnadmin.engine.engine import Engine

    directory = tmp_path / "engine"
    config = EngineConfig()
    config.transactionBufferSnapshotMaxTransactionCount = 2
    config.save(directory)
    with Engine(directory, EngineConfig.load(directory), maintenance=False) as engine:
        for _ in range(4):
            txn = engine.begin(60_000)
            engine.produce(txn, TOPIC, b"refund")
            engine.abort(txn)
        t = doctor.parse_thresholds(["snapshot-share=0.00001"])
        rep = doctor.run(LocalAdmin(engine), f"local:{directory}", ["snapshots"], t)
        (finding,) = bad(rep)
        assert finding.evidence["snapshotType"] == "Single" and finding.evidence["totalAbortedTransactions"] == 4
        assert finding.evidence["maxMessageSizeAssumed"] is True  # the engine does not publish maxMessageSize
    # and as the operator runs it, on the stopped engine
    cli = ["-u", f"local:{directory}", "doctor", "--only", "snapshots", "--threshold", "snapshot-share=0.00001",
           "-o", "json"]
    result = runner.invoke(app, cli, env={"TXNADMIN_HOME": str(tmp_path)})
    assert result.exit_code == 1, result.output
    assert [f["evidence"]["snapshotType"] for f in json.loads(result.stdout)["findings"]
            if f["check"] == "snapshots"] == ["Single"]
    config = EngineConfig.load(directory)
    config.transactionBufferSegmentedSnapshotEnabled = True  # the fix, then a restart
    config.save(directory)
    with Engine(directory, EngineConfig.load(directory), maintenance=False) as engine:
        rep = doctor.run(LocalAdmin(engine), f"local:{directory}", ["snapshots"], t)
        assert not bad(rep) and rep.findings[0].evidence["topics"] == 1
    result = runner.invoke(app, cli, env={"TXNADMIN_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output


# -- 6. batched log -------------------------------------------------------------------------------

def test_engine_coordinators_not_reopened_since_the_flag_changed(served):
    engine, url, home = served
    env = {"TXNADMIN_HOME": str(home)}
    switched = runner.invoke(app, ["-u", url, "transactions", "set-txn-tc-batch-log", "--enable"], env=env)
    assert switched.exit_code == 0, switched.output
    code, out = doctor_json(url, home, "--only", "batched-log")
    assert code == 1
    (finding,) = [f for f in out["findings"] if f["severity"] == "warning"]
    assert finding["subject"] == "coordinators" and finding["evidence"]["notReopenedSinceChange"] == ["0", "1"]
    assert finding["evidence"]["transactionLogBatchedWriteEnabled"] is True
    assert "--reload" in finding["fix"]
    # /metrics is served beside the admin API: the writer report is there, as `txnadmin metrics` gives it
    assert {f["subject"] for f in out["findings"] if f["severity"] == "info"} >= {"transaction coordinator log"}
    reloaded = runner.invoke(app, ["-u", url, "transactions", "set-txn-tc-batch-log", "--enable", "--reload", "--yes"], env=env)
    assert reloaded.exit_code == 0, reloaded.output
    code, out = doctor_json(url, home, "--only", "batched-log")
    assert code == 0, out["findings"]


def test_engine_pending_ack_stores_not_reopened_since_the_flag_changed(served):
    engine, url, home = served
    env = {"TXNADMIN_HOME": str(home)}
    engine.subscribe(TOPIC, "billing")
    txn = engine.begin(60_000)
    engine.ack(txn, TOPIC, "billing", [engine.publish(TOPIC, b"m")])
    engine.commit(txn)
    switched = runner.invoke(app, ["-u", url, "transactions", "set-txn-pending-ack-batch-log", "--enable"], env=env)
    assert switched.exit_code == 0, switched.output
    code, out = doctor_json(url, home, "--only", "batched-log")
    (finding,) = [f for f in out["findings"] if f["severity"] == "warning"]
    assert finding["subject"] == "pending-ack stores"
    assert finding["evidence"]["notReopenedSinceChange"] == [f"{TOPIC} billing"]
    reloaded = runner.invoke(app, ["-u", url, "transactions", "set-txn-pending-ack-batch-log", "--enable", "--reload",
                                       "--yes"],
                             env=env)
    assert reloaded.exit_code == 0, reloaded.output
    assert doctor_json(url, home, "--only", "batched-log")[0] == 0


def test_metrics_that_are_not_an_exposition_are_unknown_not_a_claim():
    """A login page where /metrics should be proves nothing about the batched writers: unknown, not "no writer has
    flushed"."""
    standin = BrokerStandIn()
    standin.state.update(metrics_status=200, metrics="<html><body>Sign in</body></html>")
    rep = report(standin, only=["batched-log"])
    (finding,) = [f for f in rep.findings if f.subject == "writer metrics"]
    assert finding.severity == "unknown" and "not a Prometheus exposition" in finding.evidence["reason"]
    assert doctor.exit_code(rep, strict=True) == 1
    standin.state["metrics"] = "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.0\n"
    (finding,) = [f for f in report(standin, only=["batched-log"]).findings if f.subject == "writer metrics"]
    assert finding.severity == "info"  # a real exposition without writer metrics: nothing flushed, said as info


# -- 9. bookie RocksDB ----------------------------------------------------------------------------

def _rocksdb(directory, checksum, number=7, format_version=5):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "CURRENT").write_text("MANIFEST-000005\n")
    (directory / f"OPTIONS-{number:06d}").write_text(
        "[Version]\n  rocksdb_version=7.9.2\n  options_file_version=1.1\n\n[DBOptions]\n  create_if_missing=true\n\n"
        '[CFOptions "default"]\n  compression=kLZ4Compression\n\n'
        f'[TableOptions/BlockBasedTable "default"]\n  format_version={format_version}\n  checksum={checksum}\n'
        '  block_size=65536\n')


def test_bookie_rocksdb_checksum_an_older_rocksdb_cannot_read(monkeypatch, tmp_path):
    bookie = tmp_path / "bookie"
    _rocksdb(bookie / "data" / "current" / "ledgers", "kxxHash")
    _rocksdb(bookie / "data" / "current" / "locations", "kXXH3")
    _rocksdb(bookie / "data" / "current" / "locations", "kxxHash", number=3)  # older options file: ignored
    _rocksdb(bookie / "data2" / "current" / "newformat", "kxxHash", format_version=6)
    (bookie / "conf").mkdir()
    (bookie / "conf" / "entry_location_rocksdb.conf").write_text(
        '[TableOptions/BlockBasedTable "default"]\n  checksum=kxxHash\n  format_version=5\n')
    standin = BrokerStandIn()
    result = run_cli(monkeypatch, standin, "--only", "bookie-rocksdb", "--bookie-dir", str(bookie), "-o", "json")
    assert result.exit_code == 1, result.output
    findings = {f["subject"].rsplit("/", 1)[-1]: f for f in json.loads(result.stdout)["findings"]}
    bad_db = findings["locations"]
    assert bad_db["severity"] == "warning" and bad_db["evidence"]["checksum"] == "kXXH3"
    assert bad_db["evidence"]["optionsFile"] == "OPTIONS-000007" and bad_db["evidence"]["writtenBy"] == "7.9.2"
    assert bad_db["evidence"]["confFiles"] == {"entry_location_rocksdb.conf": {"checksum": "kxxHash",
                                                                              "format_version": "5"}}
    assert "only govern files written from now on" in bad_db["why"] and "6.27.0" in bad_db["why"]
    assert bad_db["refs"] == ["apache/pulsar#22051"]
    assert findings["ledgers"]["severity"] == "info"
    assert findings["newformat"]["severity"] == "warning"
    assert findings["newformat"]["evidence"]["readableFromRocksDB"] == "8.6.0"
    # the fix: the database rewritten with a checksum the old RocksDB knows
    _rocksdb(bookie / "data" / "current" / "locations", "kxxHash", number=9)
    _rocksdb(bookie / "data2" / "current" / "newformat", "kxxHash", number=9)
    result = run_cli(monkeypatch, standin, "--only", "bookie-rocksdb", "--bookie-dir", str(bookie))
    assert result.exit_code == 0, result.output


def test_bookie_dir_without_databases_is_unknown(monkeypatch, tmp_path):
    result = run_cli(monkeypatch, BrokerStandIn(), "--only", "bookie-rocksdb", "--bookie-dir", str(tmp_path), "-o", "json")
    assert result.exit_code == 3  # nothing to judge is not a pass
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["severity"] == "unknown" and "no RocksDB database" in finding["evidence"]["reason"]
    missing = run_cli(monkeypatch, BrokerStandIn(), "--bookie-dir", str(tmp_path / "nope"))
    assert missing.exit_code == 3 and "not a directory" in missing.stderr


# -- garbage from the target ----------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
GARBLED = ["/admin/v3/transactions/coordinators", "/admin/v3/transactions/coordinatorStats",
           "/admin/v3/transactions/slowTransactions", "/admin/v3/transactions/transactionBufferStats",
           "/admin/v3/transactions/pendingAckStats", "/admin/v2/tenants", "/admin/v2/namespaces",
           "/admin/v2/persistent", "/admin/v2/brokers/configuration/runtime", "/admin/v3/transactions/coordinatorInternalStats"]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.sampled_from(GARBLED), garbage=JSON, stuck=st.booleans())
def test_garbage_answers_never_make_a_traceback(monkeypatch, prefix, garbage, stuck):
    standin = BrokerStandIn()
    if stuck:
        open_transaction(standin.state, "(0,3)", opened_ago_ms=3_600_000, timeout_ms=60_000, produced=[TOPIC])
    original = standin._route

    def route(method, path, params):
        if path.startswith(prefix):
            return 200, garbage
        return original(method, path, params)

    standin._route = route
    result = run_cli(monkeypatch, standin, "-o", "json", "--fix", "--dry-run")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1, 3), result.output
    if result.exit_code != 3:
        json.loads(result.stdout)
    else:
        assert len(result.stderr.strip().splitlines()) == 1
    if stuck:  # whatever one path answers, a cluster with a stuck transaction never passes a --strict gate
        assert run_cli(monkeypatch, standin, "-o", "json", "--strict").exit_code != 0


def test_pulsar_5_encoded_subscription_in_a_store_name_is_not_a_leftover():
    standin = BrokerStandIn()
    standin.state["topics"][TOPIC]["subscriptions"]["team/a"] = dict(standin.state["topics"][TOPIC]["subscriptions"]["billing"])
    standin.state["topics"][TOPIC]["internal"]["cursors"]["team/a"] = {}
    # Pulsar 5 names the store with the subscription URL-encoded (PR #25727); the stand-in lists the raw name too
    standin.state["extra_system_topics"] = [f"{TOPIC}-team%2Fa__transaction_pending_ack"]
    original = standin._route

    def route(method, path, params):
        status, body = original(method, path, params)
        if path.endswith("/topics") and "public" in path:
            body = [n for n in body if n != f"{TOPIC}-team/a__transaction_pending_ack"]
        return status, body

    standin._route = route
    assert not bad(report(standin, only=["leftovers", "recovery"]))


def test_idle_pending_ack_stores_only_with_proof_from_metrics():
    standin = BrokerStandIn()
    subs = standin.state["topics"][TOPIC]["subscriptions"]
    subs["audit"] = dict(subs["billing"])
    standin.state["topics"][TOPIC]["internal"]["cursors"]["audit"] = {}
    counters = (f'pulsar_txn_tp_committed_count_total{{namespace="public/default",topic="{TOPIC}",'
                f'subscription="billing",status="succeed"}} 42.0\n')

    def metrics(started_days_ago, with_counters=True):
        standin.state["metrics_status"] = 200
        standin.state["metrics"] = ("# TYPE process_start_time_seconds gauge\n"
                                    f"process_start_time_seconds {(NOW - started_days_ago * 86_400_000) / 1000}\n"
                                    + ("# TYPE pulsar_txn_tp_committed_count counter\n" + counters if with_counters else ""))

    metrics(started_days_ago=10)
    rep = report(standin, only=["leftovers"])
    (finding,) = rep.findings
    assert finding.severity == "info" and finding.subject == "idle pending-ack stores"
    assert finding.evidence["examples"] == [f"{TOPIC} audit"] and finding.evidence["brokerUp"] == "10.0d"
    assert doctor.exit_code(rep) == 0
    metrics(started_days_ago=1)  # not up long enough to say
    assert not report(standin, only=["leftovers"]).findings
    metrics(started_days_ago=10, with_counters=False)  # counters not exported: no proof either way
    assert not report(standin, only=["leftovers"]).findings
    counters += counters.replace("billing", "audit").replace("committed", "aborted")
    metrics(started_days_ago=10)  # the fix is traffic (or unsubscribing): nothing idle
    assert not report(standin, only=["leftovers"]).findings


def test_engine_with_transactions_switched_off_then_on(tmp_path):
    """The engine answers 503 as a broker with transactionCoordinatorEnabled=false does; the fix is the setting."""
    from txnadmin.engine.config import EngineConfig

    directory = tmp_path / "engine"
    config = EngineConfig()
    config.transactionCoordinatorEnabled = False
    config.engineBrokerVersion = "4.2.5"
    config.save(directory)
    from txnadmin.engine.engine import Engine

    Engine(directory, EngineConfig.load(directory), maintenance=False).close()
    env = {"TXNADMIN_HOME": str(tmp_path)}
    result = runner.invoke(app, ["-u", f"local:{directory}", "doctor", "-o", "json"], env=env)
    assert result.exit_code == 1, result.output
    found = {(f["check"], f["severity"]) for f in json.loads(result.stdout)["findings"]}
    (coordinators,) = [f for f in json.loads(result.stdout)["findings"] if f["check"] == "coordinators"]
    assert coordinators["severity"] == "warning" and coordinators["evidence"]["status"] == 503
    assert "transactionCoordinatorEnabled=false" in coordinators["why"]
    assert ("stuck-transactions", "unknown") in found  # nothing about transactions is claimed healthy
    config = EngineConfig.load(directory)
    config.transactionCoordinatorEnabled = True  # the fix, then a restart (the next open)
    config.save(directory)
    result = runner.invoke(app, ["-u", f"local:{directory}", "doctor", "-o", "json"], env=env)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("stuck, code", [(True, 1), (False, 3)])
def test_target_lost_mid_run_judges_what_was_read(monkeypatch, stuck, code):
    """A warning found before the target went away wins (1); with nothing found the run cannot say healthy (3)."""
    import httpx

    standin = BrokerStandIn()
    if stuck:
        open_transaction(standin.state, "(0,3)", opened_ago_ms=3_600_000, timeout_ms=60_000)
    original = standin.handle

    def handle(request):
        if "/transactionBufferStats/" in request.url.raw_path.decode():  # gone once the topics are being read
            raise httpx.ConnectError("Connection refused")
        return original(request)

    standin.handle = handle
    result = run_cli(monkeypatch, standin, "-o", "json")
    assert result.exit_code == code, result.output
    out = json.loads(result.stdout)
    assert "cannot connect" in out["summary"]["targetLost"] and out["summary"]["healthy"] is False
    lost = [f for f in out["findings"] if f["check"] == "coverage" and f["subject"] == "target"]
    assert lost and lost[0]["severity"] == "unknown"
    assert any(f["subject"] == "(0,3)" and f["severity"] == "critical" for f in out["findings"]) is stuck


@pytest.mark.slow
def test_engine_run_faults_are_found_by_doctor_and_cleared_by_the_fixes(tmp_path):
    """The operator's way: `engine run --fault stuck-open --fault hold-ending` in one shell, doctor in another
    (through the running engine's server); `--fix --yes` aborts the three stuck ones, a restart of the engine
    drives the held commit to the end, and doctor is clean."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    txnadmin = str(Path(sys.executable).parent / "txnadmin")
    engine = tmp_path / "engine"
    env = dict(os.environ, TXNADMIN_HOME=str(tmp_path))
    subprocess.run([txnadmin, "engine", "init", str(engine), "-c", "2"], check=True, capture_output=True, env=env)
    run = subprocess.Popen([txnadmin, "engine", "run", str(engine), "--duration", "0", "--rate", "20",
                            "--txn-timeout-ms", "300", "--fault", "stuck-open", "--fault", "hold-ending", "-o", "json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    url = f"local:{engine}"
    checks = ("--only", "stuck-transactions,max-read-position", "--threshold", "stuck-margin=0s",
              "--threshold", "ending=0s", "--threshold", "stalled=0s")
    try:
        wait_served(engine)
        def faulted(findings):  # the workload's own 300 ms transactions may be caught overdue on a loaded machine
            return [f for f in findings if f["check"] == "stuck-transactions"
                    and str(f["evidence"].get("owner")).startswith("fault:")]

        code, out = doctor_until(url, tmp_path, lambda fs: len(faulted(fs)) == 4, *checks, deadline=60)
        stuck: dict[str, list[str]] = {}
        for f in faulted(out["findings"]):
            assert f["severity"] == "critical"
            stuck.setdefault(f["evidence"]["owner"], []).append(f["evidence"]["status"])
        assert stuck == {"fault:stuck-open": ["OPEN"] * 3, "fault:hold-ending": ["COMMITTING"]}, stuck
        (held,) = [f for f in faulted(out["findings"]) if f["evidence"]["status"] == "COMMITTING"]
        # the fix fits a `local:` engine: restart `engine run` there; no upgrade of a broker the engine does not have
        assert f"start it again with `txnadmin engine run {engine}`" in held["fix"] and "upgrade" not in held["fix"]
        assert code == 1
        left_open = {f["subject"] for f in faulted(out["findings"]) if f["evidence"]["status"] == "OPEN"}
        fixed = runner.invoke(app, ["-u", url, "doctor", *checks, "--fix", "--yes", "-o", "json"],
                              env={"TXNADMIN_HOME": str(tmp_path)})
        out = json.loads(fixed.stdout)
        aborted = {r["txnId"] for r in out["fix"]["results"] if r["outcome"] == "ABORTED"}
        assert left_open <= aborted, out["fix"]
        assert [f["evidence"]["status"] for f in faulted(out["findings"])] == ["COMMITTING"] and fixed.exit_code == 1
    finally:
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0, run.stderr.read().decode()[-2000:]
    # the held commit's fix on an engine: a restart recovers the coordinator, which drives the end
    restart = subprocess.run([txnadmin, "engine", "run", str(engine), "--duration", "1", "--rate", "5", "-o", "json"],
                             capture_output=True, env=env, timeout=120)
    assert restart.returncode == 0, restart.stderr[-2000:]
    code, out = doctor_json(url, tmp_path, *checks)
    assert code == 0 and not out["findings"], out["findings"]


def test_engine_run_refuses_an_unknown_fault(tmp_path):
    result = runner.invoke(app, ["engine", "run", str(tmp_path / "engine"), "--fault", "melt"])
    assert result.exit_code == 2 and "--fault melt: use one of stuck-open, hold-ending" in result.stderr


def test_engine_run_stalled_buffer_recovery_is_found_by_doctor_and_cleared_by_an_unload(tmp_path):
    """`engine run --fault stall-buffer-recovery` in one shell: a topic's transaction buffer starts recovering and
    never finishes (apache/pulsar#17040) while the workload goes on; doctor in another shell names the topic with
    the recovery's start and missing end and says to unload it; the unload (through the running engine's server,
    as `pulsar-admin topics unload` would) recovers it, and doctor is clean."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from txnadmin.admin.target import open_admin, resolve_target
    from txnadmin.engine.faults import STALLED_TOPIC

    txnadmin = str(Path(sys.executable).parent / "txnadmin")
    engine = tmp_path / "engine"
    env = dict(os.environ, TXNADMIN_HOME=str(tmp_path))
    subprocess.run([txnadmin, "engine", "init", str(engine), "-c", "2"], check=True, capture_output=True, env=env)
    run = subprocess.Popen([txnadmin, "engine", "run", str(engine), "--duration", "0", "--rate", "20",
                            "--fault", "stall-buffer-recovery", "-o", "json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    url = f"local:{engine}"
    checks = ("--only", "recovery", "--threshold", "recovery=0s")
    try:
        wait_served(engine)

        def stalled(findings):
            return [f for f in findings if f["check"] == "recovery" and f["subject"] == STALLED_TOPIC]

        code, out = doctor_until(url, tmp_path, lambda fs: bool(stalled(fs)), *checks, deadline=60)
        [finding] = stalled(out["findings"])
        assert code == 1 and finding["severity"] == "critical", out
        ev = finding["evidence"]
        assert ev["state"] == "Initializing" and ev["recoverStartTime"] > 0 and ev["recoverEndTime"] == 0, ev
        assert ev["recoveringForMs"] >= 0
        assert f"pulsar-admin topics unload {STALLED_TOPIC}" in finding["fix"]
        assert any("17040" in r for r in finding["refs"]), finding["refs"]
        # only the stalled buffer: the workload's topics recovered and keep going
        assert [f["subject"] for f in out["findings"] if f["check"] == "recovery"] == [STALLED_TOPIC]

        open_admin(resolve_target(url)).unload_topic(STALLED_TOPIC)  # the fix doctor gave
        code, out = doctor_json(url, tmp_path, *checks)
        assert code == 0 and not out["findings"], out["findings"]
    finally:
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0, run.stderr.read().decode()[-2000:]
    stats = json.loads(run.stdout.read())
    assert stats["committed"] > 0 and stats["errors"] == 0, stats  # nothing else in the engine hung or failed
