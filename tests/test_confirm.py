"""The shared plan/ask helper: --dry-run changes nothing, --yes skips the question, no terminal refuses (exit 2)."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from txnadmin.cli.confirm import DryRunOpt, Plan, YesOpt, confirm

runner = CliRunner()


def _app(acted: list, interactive=None):
    app = typer.Typer()

    @app.command()
    def act(yes: bool = YesOpt, dry_run: bool = DryRunOpt, output: str = typer.Option("table", "-o")) -> None:
        plan = Plan("unload everything", "http://b:8080 (from --admin-url)", ["unload 3 topics"], {"topics": 3})
        if confirm(plan, yes=yes, dry_run=dry_run, output=output, interactive=interactive):
            acted.append(True)
            typer.echo(json.dumps({"done": True}) if output == "json" else "done")

    return app


def test_dry_run_prints_the_plan_and_changes_nothing():
    acted: list = []
    result = runner.invoke(_app(acted), ["--dry-run"])
    assert result.exit_code == 0 and not acted
    assert "http://b:8080 (from --admin-url)" in result.stdout and "nothing was changed" in result.stdout
    as_json = runner.invoke(_app(acted), ["--dry-run", "-o", "json"])
    assert json.loads(as_json.stdout) == {"dryRun": True, "plan": {
        "action": "unload everything", "target": "http://b:8080 (from --admin-url)", "steps": ["unload 3 topics"],
        "topics": 3}}
    assert not acted


def test_no_terminal_and_no_yes_refuses_with_exit_2():
    acted: list = []
    result = runner.invoke(_app(acted), [])
    assert result.exit_code == 2 and not acted
    assert "--yes" in result.stderr


def test_yes_acts_and_json_stdout_stays_one_document():
    acted: list = []
    result = runner.invoke(_app(acted), ["--yes", "-o", "json"])
    assert result.exit_code == 0 and acted
    assert json.loads(result.stdout) == {"done": True}
    assert "unload 3 topics" in result.stderr


def test_terminal_answer_decides():
    acted: list = []
    no = runner.invoke(_app(acted, interactive=True), [], input="n\n")
    assert no.exit_code == 1 and not acted and "nothing changed" in no.stderr
    yes = runner.invoke(_app(acted, interactive=True), [], input="yes\n")
    assert yes.exit_code == 0 and acted
