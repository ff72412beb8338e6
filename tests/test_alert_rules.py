"""examples/prometheus/txnadmin-alerts.yml under the real promtool (Debian's `prometheus` package): `check rules` is
clean, every rule's unit test passes, every alert has a test where it fires and one where it stays silent, and
every metric a rule reads is on a checked list (Pulsar's names, or the exporter's)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pulsar_metric_names import BY_NAME, TXNADMIN_EXPORTER_METRICS, family_of, metric_names_in

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "prometheus"
RULES = EXAMPLES / "txnadmin-alerts.yml"
TESTS = EXAMPLES / "txnadmin-alerts.test.yml"
INSTALL_HINT = ("promtool not found on PATH: install Debian's prometheus package (`apt-get install -y prometheus`, "
                "as root), or run `make test`, which installs it when run as root")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(INSTALL_HINT)
    return found


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_check_rules_is_clean():
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "WARNING" not in (result.stdout + result.stderr).upper()


def test_every_rule_unit_test_passes():
    # promtool resolves rule_files relative to the test file
    result = subprocess.run([promtool(), "test", "rules", str(TESTS)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_rule_fails_its_unit_test(tmp_path):
    """The unit tests bite: a rule that pages on a healthy coordinator (> 0 turned into >= 0) fails them."""
    broken = RULES.read_text().replace("(txnadmin_transactions_hanging) > 0", "(txnadmin_transactions_hanging) >= 0")
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / TESTS.name).write_text(TESTS.read_text())
    result = subprocess.run([promtool(), "test", "rules", str(tmp_path / TESTS.name)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0 and "TxnadminTransactionsHanging" in result.stdout + result.stderr


def test_every_alert_fires_in_one_test_and_stays_silent_in_another():
    fires: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    alerts = {rule["alert"] for rule in _rules()}
    assert alerts and alerts - fires == set(), f"never shown firing: {sorted(alerts - fires)}"
    assert alerts - silent == set(), f"never shown silent: {sorted(alerts - silent)}"
    # the issue's list, by the alert that covers it
    for required in ("TxnadminOldestOpenTransactionTooOld", "TxnadminTransactionsPastTimeout",
                     "TxnadminTransactionsStuckEnding", "TxnadminTransactionBufferRecoveringTooLong",
                     "TxnadminMaxReadPositionStalled", "TxnadminBatchingEnabledDuringDowngrade",
                     "TxnadminExporterPollFailing", "TxnadminExporterStale", "PulsarMaxReadPositionStalled",
                     "PulsarBatchedWritesDuringDowngrade"):
        assert required in alerts


PROMETHEUS_OWN = {"up"}  # written by Prometheus for each scrape target (the exporter down), not by Pulsar or txnadmin


def test_every_metric_a_rule_reads_is_listed():
    import re

    used: set[str] = set()
    for rule in _rules():
        names = metric_names_in(rule["expr"]) | {n for n in PROMETHEUS_OWN if re.search(rf"\b{n}\{{", rule["expr"])}
        assert names, rule["alert"]
        used |= names
        for name in names:
            if name in PROMETHEUS_OWN:
                continue
            if name.startswith("txnadmin_"):
                assert name in TXNADMIN_EXPORTER_METRICS, (rule["alert"], name)
            else:
                assert family_of(name) is not None, f"{rule['alert']}: {name} is not on Pulsar's list"
    assert any(n.startswith("pulsar_") for n in used) and any(n.startswith("txnadmin_") for n in used)
    # Pulsar's current names, never the pre-2.11 *_count ones
    assert not any(n.endswith("_count") and n not in BY_NAME for n in used if n.startswith("pulsar_txn_"))


def test_a_machine_without_promtool_fails_and_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=r"apt-get install -y prometheus"):
        promtool()
