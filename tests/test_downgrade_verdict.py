"""The verdict and its reasons: "safe" only once every recorded log is trimmed past LastBatched, each log that
waits says why (an open transaction named with the command that aborts it, a ledger not rolled yet), and the report
is the same in JSON and YAML with the documented exit codes."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from txnadmin.admin.local import LocalAdmin
from txnadmin.cli.main import app
from txnadmin.procedures.downgrade import start, status

from downgrade_helpers import BATCHED, engine_traffic, fresh_engine, running, traffic
from engine_helpers import Clock, open_engine

runner = CliRunner()


def test_a_long_open_transaction_keeps_it_waiting_and_is_named(tmp_path):
    clock = Clock()
    with open_engine(tmp_path / "e", clock, **BATCHED) as engine:
        pinned = engine.begin(3_600_000, tc_id=0, owner="stuck-app")
        traffic(engine, 30)
        admin = LocalAdmin(engine)
        start(admin, tmp_path / "s.json")
        traffic(engine, 40)
        report = status(admin, tmp_path / "s.json")
        assert not report.safe
        tc0 = next(l for l in report.logs if l.name == "__transaction_log_0")
        assert not tc0.done and f"({pinned[0]},{pinned[1]})" in tc0.reason and "stuck-app" in tc0.reason
        assert tc0.suggestion == f"txnadmin transactions abort-transaction -m {pinned[0]} -l {pinned[1]}"
        admin.abort_transaction(__import__("txnadmin.admin.protocol", fromlist=["TxnId"]).TxnId(*pinned))
        traffic(engine, 20)
        assert status(admin, tmp_path / "s.json").safe


def test_open_ledger_not_rolled_is_the_reason(tmp_path):
    with open_engine(tmp_path / "e", managedLedgerMaxEntriesPerLedger="1000", **BATCHED) as engine:
        traffic(engine, 5)
        admin = LocalAdmin(engine)
        start(admin, tmp_path / "s.json")
        traffic(engine, 3)
        report = status(admin, tmp_path / "s.json")
        # Every log that waits says why, in one of the live view's groups.
        assert all(l.reason and l.kind != "done" for l in report.waiting)
        assert report.safe or report.groups()


@pytest.mark.slow
def test_start_status_json_and_exit_codes(tmp_path):
    d = fresh_engine(tmp_path)
    state = tmp_path / "checklist.json"
    with running(d):
        started = runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state", str(state),
                                      "-o", "json"])
        assert started.exit_code == 0, started.output
        summary = json.loads(started.stdout)
        assert summary["coordinators"] == 2 and summary["target"] == {"url": f"local:{d}", "source": "--admin-url"}
        waiting = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
        assert waiting.exit_code in (0, 1), waiting.output
        report = json.loads(waiting.stdout)
        assert report["target"]["url"] == f"local:{d}" and report["target"]["source"] == "--admin-url"
        for comp in report["components"]:
            assert {"component", "name", "lastBatchedLedgerId", "oldestLedgerId", "done", "reason"} <= set(comp)
        done = runner.invoke(app, ["downgrade", "wait", "-u", f"local:{d}", "--state", str(state), "--timeout", "60",
                                   "--interval", "0.5", "-o", "json"])
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["safe"] is True
    # The engine stopped: reading it through local: reopens nothing, so the proven verdict stands …
    stopped = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert stopped.exit_code == 0 and json.loads(stopped.stdout)["safe"] is True, stopped.output
    # … until the engine runs again: every store reopened, and nobody can say with which flags.
    engine_traffic(d, "0.3")
    after = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert after.exit_code == 1 and json.loads(after.stdout)["waitingByReason"].get("reopened since recording")
    # -o yaml says why each log waits in the same words (plain strings: YAML's safe dumper refuses an enum)
    as_yaml = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "yaml"])
    assert as_yaml.exit_code == 1, as_yaml.output
    waiting = {k: v for k, v in yaml.safe_load(as_yaml.stdout).items() if k in ("waitingByReason", "components")}
    assert waiting == {k: v for k, v in json.loads(after.stdout).items() if k in ("waitingByReason", "components")}
