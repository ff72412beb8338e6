"""Small words operators read every day: counts in the singular when there is one, tables without trailing spaces."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

runner = CliRunner()


@pytest.fixture
def one_open(tmp_path, monkeypatch):
    """An engine of one coordinator with one open transaction, named with -u."""
    directory = tmp_path / "engine"
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    made = runner.invoke(app, ["engine", "init", str(directory), "-c", "1"])
    assert made.exit_code == 0 and f"engine ready at {directory} (1 coordinator)" in made.stdout, made.output
    begun = runner.invoke(app, ["engine", "txn", "begin", "--dir", str(directory), "--produce", "t1=a"])
    assert begun.exit_code == 0, begun.output
    return ["-u", f"local:{directory}"]


def test_one_of_a_thing_is_counted_in_the_singular(one_open):
    def out(*args: str, code: int = 0) -> str:
        result = runner.invoke(app, [*one_open, *args], env={"COLUMNS": "200"})
        assert result.exit_code == code, result.output
        return result.stdout

    assert "1 open transaction on local:" in out("transactions", "list")
    assert "0 hanging of 1 open transaction on local:" in out("transactions", "find-hanging")
    assert "1 hanging of 1 open transaction on local:" in out("transactions", "find-hanging",
                                                             "--max-transaction-timeout", "0", code=1)
    assert "plan: abort 1 hanging transaction\n" in out("transactions", "find-hanging", "--max-transaction-timeout",
                                                        "0", "--abort", "--dry-run")
    assert "plan: abort 1 transaction (" in out("transactions", "abort", "--all", "--dry-run")
    assert out("doctor", "--only", "coordinators").rstrip().endswith("(1 check)")
    done = out("transactions", "abort", "--all", "--yes")
    assert "1 of 1 planned transaction aborted" in done


def test_context_list_pads_no_line_with_trailing_spaces(tmp_path):
    env = {"TXNADMIN_HOME": str(tmp_path / "home")}
    for name, url in (("a-rather-long-context-name", "http://127.0.0.1:9"), ("b", "https://pulsar.example:8443")):
        assert runner.invoke(app, ["context", "add", name, "-u", url], env=env).exit_code == 0
    listed = runner.invoke(app, ["context", "list"], env=env)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["CURRENT", "NAME", "URL", "AUTH"] and len(lines) == 3
    assert all(line == line.rstrip() for line in lines), [line for line in lines if line != line.rstrip()]
    assert any("a-rather-long-context-name" in line and "http://127.0.0.1:9" in line for line in lines)
    assert json.loads(runner.invoke(app, ["context", "list", "-o", "json"], env=env).stdout)["contexts"]
