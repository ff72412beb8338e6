"""The checklist: `status` needs one that `start` wrote; it is valid JSON with its digest after every step;
one that cannot be read, or a target that cannot, is refused with exit 3 and a one-line reason."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from txnadmin.admin.local import LocalAdmin
from txnadmin.cli.main import app
from txnadmin.procedures.downgrade import DowngradeError, start, status
from txnadmin.procedures.downgrade.checklist import load_state

from downgrade_helpers import BATCHED, fresh_engine, traffic
from engine_helpers import open_engine

runner = CliRunner()


def test_status_needs_a_started_checklist(tmp_path):
    with open_engine(tmp_path / "e") as engine:
        with pytest.raises(DowngradeError, match="downgrade start"):
            status(LocalAdmin(engine), tmp_path / "none.json")


def test_checklist_is_valid_json_after_every_step(tmp_path):
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        traffic(engine, 5)
        start(LocalAdmin(engine), tmp_path / "s.json")
    data = json.loads((tmp_path / "s.json").read_text())
    assert data.pop("digest").startswith("sha256:")  # what tells a file edited by hand
    assert data == load_state(tmp_path / "s.json") and data["version"] == 1


def test_unreadable_target_and_missing_checklist(tmp_path):
    missing = runner.invoke(app, ["downgrade", "status", "-u", f"local:{tmp_path / 'nope'}", "--state",
                                  str(tmp_path / "s.json")])
    assert missing.exit_code == 3 and "engine init" in missing.stderr
    d = fresh_engine(tmp_path)
    no_state = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(tmp_path / "s.json")])
    assert no_state.exit_code == 1 and "downgrade start" in no_state.stderr
    garbage = tmp_path / "bad.json"
    garbage.write_text("{not json")
    bad = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(garbage)])
    assert bad.exit_code == 3 and "bad.json" in bad.stderr
