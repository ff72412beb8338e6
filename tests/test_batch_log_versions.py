"""Batching is never switched on beside a broker that cannot read it (issue 34 point 13, PIP-160: do not enable the
feature while any broker has not been upgraded).

`set-txn-tc-batch-log --enable` and `set-txn-pending-ack-batch-log --enable` ask every active broker its version, at
its own address, by the same rule as `upgrade` (ClusterView.check_batch_readers); they refuse (exit 1) naming a
broker too old or one that cannot say, unless the operator vouches for it by name. Disabling is never held back.
On a stand-in cluster of three brokers, through HttpAdmin's own HTTP code."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from broker_standin import BrokerStandIn
from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG, TC_BATCH_FLAG
from txnadmin.cli.main import app

runner = CliRunner()
MIXED = {"b1.example:8080": "2.10.5", "b2.example:8080": "4.0.12", "b3.example:8080": "5.0.0"}
COMMANDS = {"set-txn-tc-batch-log": TC_BATCH_FLAG, "set-txn-pending-ack-batch-log": PENDING_ACK_BATCH_FLAG}


def _cluster(monkeypatch, brokers: dict) -> BrokerStandIn:
    standin = BrokerStandIn()
    standin.state["brokers"] = dict(brokers)
    standin.state["runtime"] = dict(standin.state["runtime"], **{TC_BATCH_FLAG: "false",
                                                                 PENDING_ACK_BATCH_FLAG: "false"})
    monkeypatch.setattr("txnadmin.admin.target.open_admin", lambda target: standin.admin())
    return standin


def _run(standin: BrokerStandIn, tmp_path, *args: str):
    result = runner.invoke(app, ["-u", standin.base, "transactions", *args], env={"TXNADMIN_HOME": str(tmp_path)})
    assert "Traceback" not in result.output
    return result


def _changes(standin: BrokerStandIn) -> list[str]:
    return [c for c in standin.calls if c.startswith("POST /admin/v2/brokers/configuration/")]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("how", [["--yes"], ["--dry-run"], ["--reload", "--yes"], []])
def test_enable_is_refused_while_a_broker_is_too_old_and_names_it(monkeypatch, tmp_path, command, how):
    standin = _cluster(monkeypatch, MIXED)
    result = _run(standin, tmp_path, command, "--enable", *how)
    assert result.exit_code == 1, result.output
    assert "b1.example:8080 runs 2.10.5" in result.stderr and "2.11.0" in result.stderr, result.stderr
    assert "b2.example:8080" not in result.stderr.split("too old")[1]  # only the old one is named as too old
    assert _changes(standin) == [] and standin.state["runtime"][COMMANDS[command]] == "false"
    asked = {c for c in standin.calls if c.endswith("/admin/v2/brokers/version")}
    assert asked  # asked of the brokers themselves, not taken from the admin URL's broker


@pytest.mark.parametrize("command", COMMANDS)
def test_a_broker_that_cannot_say_blocks_enable_until_it_is_vouched_for_by_name(monkeypatch, tmp_path, command):
    standin = _cluster(monkeypatch, dict(MIXED, **{"b1.example:8080": "4.0.12", "b3.example:8080": None}))  # b3: 503
    refused = _run(standin, tmp_path, command, "--enable", "--yes")
    assert refused.exit_code == 1 and "b3.example:8080" in refused.stderr, refused.output
    assert "--assume-version-ok" in refused.stderr and _changes(standin) == []
    wrong = _run(standin, tmp_path, command, "--enable", "--yes", "--assume-version-ok", "b2.example:8080")
    assert wrong.exit_code == 1 and _changes(standin) == [], wrong.output  # vouching for another broker is no proof
    vouched = _run(standin, tmp_path, command, "--enable", "--yes", "--assume-version-ok", "b3.example:8080",
                   "-o", "json")
    assert vouched.exit_code == 0, vouched.output
    out = json.loads(vouched.stdout)
    assert out["value"] is True and out["versionsChecked"] == {
        "b1.example:8080": "4.0.12", "b2.example:8080": "4.0.12", "b3.example:8080": "assumed ok (--assume-version-ok)"}
    assert standin.state["runtime"][COMMANDS[command]] == "true"


@pytest.mark.parametrize("command", COMMANDS)
def test_enable_goes_ahead_when_every_broker_reads_batches_and_says_what_it_checked(monkeypatch, tmp_path, command):
    standin = _cluster(monkeypatch, dict(MIXED, **{"b1.example:8080": "3.0.7"}))
    result = _run(standin, tmp_path, command, "--enable")
    assert result.exit_code == 0, result.output
    assert "b1.example:8080 runs 3.0.7" in result.stdout and standin.state["runtime"][COMMANDS[command]] == "true"


@pytest.mark.parametrize("command", COMMANDS)
def test_disable_is_never_held_back_by_versions(monkeypatch, tmp_path, command):
    standin = _cluster(monkeypatch, dict(MIXED, **{"b3.example:8080": None}))
    standin.state["runtime"][COMMANDS[command]] = "true"
    result = _run(standin, tmp_path, command, "--disable")
    assert result.exit_code == 0, result.output
    assert standin.state["runtime"][COMMANDS[command]] == "false"
    assert not any(c.endswith("/admin/v2/brokers/version") for c in standin.calls)  # nothing to ask
    misplaced = _run(standin, tmp_path, command, "--disable", "--assume-version-ok", "b3.example:8080")
    assert misplaced.exit_code == 1 and "--assume-version-ok goes with --enable" in misplaced.stderr
