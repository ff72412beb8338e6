"""doctor's `transaction-permissions` and `client-versions` checks, and `upgrade --preflight`.

#26644's rule lives in the binary protocol (adding a partition or a subscription to a transaction), which `txnadmin
serve` does not speak: the permissions are rehearsed on the broker stand-in (tests/broker_standin.py), answering the
grants, tenants and runtime configuration as Pulsar's admin API does. The producers' client versions (#26547) are
rehearsed on the embedded engine behind a real HTTP server: its topics keep their connected producers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from broker_standin import BrokerStandIn, open_transaction
from txnadmin.cli.main import app
from txnadmin.procedures import doctor
from engine_helpers import served_engine, wait_served

runner = CliRunner()
TOPIC = "persistent://public/default/orders"
ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign"
AUTH_ON = {"authorizationEnabled": "true", "superUserRoles": "[admin, ops]"}


def report(standin, only=("transaction-permissions",)):
    return doctor.run(standin.admin(), standin.base, list(only), doctor.parse_thresholds([]))


def findings(rep, severity=None):
    return [f for f in rep.findings if f.check == "transaction-permissions" and severity in (None, f.severity)]


def owned(standin, owner="app", txn="(0,5)"):
    open_transaction(standin.state, txn, opened_ago_ms=1_000, timeout_ms=60_000, produced=[TOPIC], owner=owner,
                     acked={TOPIC: ["billing"]})


def test_authorization_off_means_nothing_to_check_and_the_report_says_so():
    standin = BrokerStandIn()
    owned(standin)
    (finding,) = findings(report(standin))
    assert finding.severity == "info" and "authorizationEnabled is not listed (Pulsar's default: false)" in finding.why
    assert "nothing to check" in finding.why and finding.evidence["owners"] == ["app"]
    assert "only the roles seen owning a transaction" in finding.evidence["coverage"]
    standin.state["runtime"]["authorizationEnabled"] = "false"
    assert "authorizationEnabled is false" in findings(report(standin))[0].why


@pytest.mark.parametrize("version, when", [
    ("4.2.4", "after an upgrade to one of them its transactions are refused"),
    ("4.2.5", "these brokers already check a transaction's participants"),
])
def test_an_owner_without_produce_or_the_coordinators_lookup_is_named_with_the_grants_to_add(version, when):
    standin = BrokerStandIn()
    standin.state["version"] = version
    standin.state["runtime"].update(AUTH_ON)
    standin.state["grants"]["namespaces"]["public/default"] = {"app": ["consume"]}
    owned(standin)
    rep = report(standin)
    (finding,) = findings(rep, "warning")
    assert finding.subject == "role app" and finding.evidence["missing"] == [f"lookup on {ASSIGN}",
                                                                             f"produce on {TOPIC}"]
    assert when in finding.why and "only the roles seen owning a transaction" in finding.why
    assert f"`pulsar-admin topics grant-permission {TOPIC} --role app --actions produce`" in finding.fix
    assert f"`pulsar-admin topics grant-permission {ASSIGN} --role app --actions consume`" in finding.fix
    assert finding.refs == ["apache/pulsar#26644", "apache/pulsar#18716"] and finding.evidence["source"]
    assert doctor.exit_code(rep) == 1
    # the fix as written: a topic grant (kept on the partitioned topic) and consume on the coordinators' topic
    standin.state["grants"]["topics"][TOPIC] = {"app": ["produce"]}
    standin.state["grants"]["topics"][ASSIGN] = {"app": ["consume"]}
    rep = report(standin)
    assert not findings(rep, "warning")
    (info,) = findings(rep, "info")
    assert info.evidence["passing"] == {"app": "grants"} and doctor.exit_code(rep) == 0


def test_super_users_and_tenant_admins_pass_without_grants():
    standin = BrokerStandIn()
    standin.state["runtime"].update(AUTH_ON)
    standin.state["grants"]["tenants"]["public"] = {"adminRoles": ["team-lead"], "allowedClusters": []}
    standin.state["grants"]["tenants"]["pulsar"] = {"adminRoles": ["team-lead"], "allowedClusters": []}
    owned(standin, "ops", "(0,5)")
    owned(standin, "team-lead", "(1,6)")
    (info,) = findings(report(standin))
    assert info.evidence["passing"] == {"ops": "super-user (superUserRoles)",
                                        "team-lead": "grants (tenant admin of public, pulsar)"}


def test_a_subscription_whose_role_list_leaves_the_owner_out_is_missing():
    standin = BrokerStandIn()
    standin.state["runtime"].update(AUTH_ON)
    standin.state["grants"]["namespaces"]["public/default"] = {"app": ["produce", "consume"]}
    standin.state["grants"]["namespaces"]["pulsar/system"] = {"app": ["consume"]}
    standin.state["grants"]["subscriptions"]["public/default"] = {"billing": ["billing-service"]}
    owned(standin)
    (finding,) = findings(report(standin), "warning")
    assert finding.evidence["missing"] == [f"consume on {TOPIC} (subscription billing)"]
    standin.state["grants"]["subscriptions"]["public/default"]["billing"].append("app")
    assert not findings(report(standin), "warning")
    standin.state["grants"]["modes"] = {"public/default": "Prefix"}  # names must start with the role: billing does not
    (finding,) = findings(report(standin), "warning")
    assert finding.evidence["missing"] == [f"consume on {TOPIC} (subscription billing)"]


def test_a_custom_provider_or_an_unreadable_grant_is_cannot_tell_never_a_pass():
    standin = BrokerStandIn()
    standin.state["runtime"].update(AUTH_ON, authorizationProvider="com.example.OpaAuthorizationProvider")
    owned(standin)
    (finding,) = findings(report(standin))
    assert finding.severity == "unknown" and "com.example.OpaAuthorizationProvider" in finding.evidence["reason"]
    assert doctor.exit_code(report(standin), strict=True) == 1
    standin.state["runtime"].pop("authorizationProvider")
    standin.state["grants"]["namespaces"]["pulsar/system"] = {"app": ["consume"]}
    standin.state["grants"]["namespaces"]["public/default"] = (403, "Don't have permission to administrate resources")
    (finding,) = findings(report(standin))
    assert finding.severity == "unknown" and finding.subject == "role app"
    assert any("403" in u or "permission" in u for u in finding.evidence["unknown"])


def test_no_owner_listed_judges_no_role_and_says_so():
    standin = BrokerStandIn()
    standin.state["runtime"].update(AUTH_ON)
    open_transaction(standin.state, "(0,5)", opened_ago_ms=1_000, timeout_ms=60_000, produced=[TOPIC])
    (finding,) = findings(report(standin))
    assert finding.severity == "info" and "no role was judged" in finding.why
    assert finding.evidence["transactionsWithoutOwner"] == 1


# -- upgrade --preflight --------------------------------------------------------------------------

def upgrade_cli(monkeypatch, standin, *args):
    monkeypatch.setattr("txnadmin.admin.target.open_admin", lambda target: standin.admin())
    return runner.invoke(app, ["-u", standin.base, "upgrade", *args])


def test_upgrade_preflight_names_the_owners_that_would_start_failing(monkeypatch):
    standin = BrokerStandIn()
    standin.state["version"] = "4.2.4"
    standin.state["runtime"].update(AUTH_ON)
    owned(standin)
    result = upgrade_cli(monkeypatch, standin, "--preflight", "--to", "4.2.5", "-o", "json")
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["checksParticipants"] is True and out["preflight"]["status"] == "judged"
    (owner,) = out["preflight"]["owners"]
    assert owner["role"] == "app" and f"produce on {TOPIC}" in owner["missing"]
    assert "only the roles seen owning a transaction" in out["preflight"]["coverage"]
    standin.state["grants"]["namespaces"]["public/default"] = {"app": ["produce", "consume"]}
    standin.state["grants"]["namespaces"]["pulsar/system"] = {"app": ["consume"]}
    result = upgrade_cli(monkeypatch, standin, "--preflight", "--to", "4.2.5")
    assert result.exit_code == 0, result.output
    assert "app: passes (grants)" in result.stdout and "only the roles seen owning a transaction" in result.stdout
    # a release without the check: nothing changes for the owners, and it says so
    result = upgrade_cli(monkeypatch, standin, "--preflight", "--to", "4.1.2")
    assert result.exit_code == 0 and "4.1.2 does not check" in result.stdout


def test_upgrade_preflight_cannot_tell_is_exit_3_and_usage_is_checked(monkeypatch):
    standin = BrokerStandIn()
    standin.state["runtime"].update(AUTH_ON, authorizationProvider="com.example.Custom")
    owned(standin)
    result = upgrade_cli(monkeypatch, standin, "--preflight", "--to", "5.0.0")
    assert result.exit_code == 3 and "com.example.Custom" in result.output
    assert upgrade_cli(monkeypatch, standin, "--preflight").exit_code == 2
    assert upgrade_cli(monkeypatch, standin, "--preflight", "--to", "five").exit_code == 2


# -- client-versions, rehearsed on the engine -----------------------------------------------------

@pytest.fixture
def served(tmp_path):
    with served_engine(tmp_path, "4.2.5") as found:
        yield found


def client_findings(url, home):
    result = runner.invoke(app, ["-u", url, "doctor", "-o", "json", "--only", "client-versions"],
                           env={"TXNADMIN_HOME": str(home)})
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)["findings"]


def test_an_old_java_producer_on_a_transactional_topic_is_named_and_an_upgrade_clears_it(served):
    engine, url, home = served
    engine.topic(TOPIC).attach_producer("orders-app-1", "Pulsar-Java-v4.0.13", "/10.0.0.7:51234")
    engine.topic(TOPIC).attach_producer("orders-cpp", "Pulsar-CPP-v3.7.0")
    txn = engine.begin(60_000)
    engine.produce(txn, TOPIC, b"t")
    code, found = client_findings(url, home)
    (warning,) = [f for f in found if f["severity"] == "warning"]
    assert code == 1 and warning["subject"] == TOPIC
    assert warning["evidence"]["producers"] == [{"producerName": "orders-app-1", "clientVersion": "Pulsar-Java-v4.0.13",
                                                 "address": "/10.0.0.7:51234"}]
    assert "gain or lose their transaction" in warning["why"] and "4.0.14 / 4.2.5 / 5.0.0" in warning["fix"]
    assert warning["refs"] == ["apache/pulsar#26547"] and "client-java-4.0.14" in warning["evidence"]["source"]
    # the fix: the application restarts on a fixed client (a new connection reports the new version)
    engine.topic(TOPIC).detach_producer("orders-app-1")
    engine.topic(TOPIC).attach_producer("orders-app-1", "Pulsar-Java-v4.0.14")
    code, found = client_findings(url, home)
    (info,) = found
    assert code == 0 and info["evidence"] == {"javaAtOrPastTheFix": 1, "otherClients": 1, "topics": 1}
    engine.end_transaction(txn, True)  # no transaction touches a topic: nothing checked, and it says so
    code, found = client_findings(url, home)
    assert code == 0 and "no producer was checked" in found[0]["why"]


def test_a_producer_without_a_client_version_is_unknown_not_passed():
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,5)", opened_ago_ms=1_000, timeout_ms=60_000, produced=[TOPIC])
    standin.state["publishers"][TOPIC] = [{"producerName": "mystery", "address": "/10.0.0.9:4000"}]
    rep = report(standin, only=["client-versions"])
    (finding,) = rep.findings
    assert finding.severity == "unknown" and "mystery" in finding.evidence["reason"]


@pytest.mark.slow
def test_engine_run_with_an_old_java_client_version_is_found_by_doctor(tmp_path):
    """The operator's way: `engine run --client-version Pulsar-Java-v4.0.13` in one shell (its transactions left
    open, so topics are touched by ongoing transactions), doctor in another through `-u local:`."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    txnadmin = str(Path(sys.executable).parent / "txnadmin")
    engine = tmp_path / "engine"
    env = dict(os.environ, TXNADMIN_HOME=str(tmp_path))
    subprocess.run([txnadmin, "engine", "init", str(engine), "--set", "engineBrokerVersion=4.2.5"], check=True,
                   capture_output=True, env=env)
    run = subprocess.Popen([txnadmin, "engine", "run", str(engine), "--duration", "0", "--rate", "5",
                            "--concurrency", "2", "--timeout-ratio", "1", "--abort-ratio", "0",
                            "--txn-timeout-ms", "600000", "--client-version", "Pulsar-Java-v4.0.13", "-o", "json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        # Doctor only once `engine run` serves: before that, `local:` would open the directory itself and hold it.
        wait_served(engine)
        deadline = time.monotonic() + 120  # a loaded machine: each doctor run over `local:` takes seconds
        while True:
            result = runner.invoke(app, ["-u", f"local:{engine}", "doctor", "-o", "json", "--only", "client-versions"],
                                   env={"TXNADMIN_HOME": str(tmp_path)})
            found = [f for f in json.loads(result.stdout)["findings"] if f["severity"] == "warning"] \
                if result.stdout.startswith("{") else []
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert found, result.output
        assert {p["clientVersion"] for f in found for p in f["evidence"]["producers"]} == {"Pulsar-Java-v4.0.13"}
        assert {p["producerName"] for f in found for p in f["evidence"]["producers"]} == {"workload-0", "workload-1"}
    finally:
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0, run.stderr.read().decode()[-2000:]


def test_without_the_super_user_list_a_role_without_grants_is_cannot_tell_not_refused():
    """A runtime configuration that does not list superUserRoles cannot prove a role is not a super-user."""
    standin = BrokerStandIn()
    standin.state["runtime"].update(authorizationEnabled="true")
    owned(standin)
    (finding,) = findings(report(standin))
    assert finding.severity == "unknown" and all("may be a super-user" in u for u in finding.evidence["unknown"])
