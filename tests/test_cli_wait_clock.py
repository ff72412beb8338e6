"""Issue #26, point 9: on a terminal, `downgrade wait`'s clock ticks between polls (it once showed [0:00:00] for a
whole --interval). Checked in a pseudo-terminal: two distinct clock values within one interval."""

from __future__ import annotations

import os
import re
import sys

import pytest

from engine_helpers import stuck_open_downgrade
from pty_helpers import run_on_terminal

pytestmark = pytest.mark.slow  # a running engine, a recorded downgrade and seconds of waiting in a pty

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


def _read_pty(command: list[str], env: dict, seconds: float) -> tuple[int, str]:
    code, out = run_on_terminal(command, env, seconds, wait_s=60)
    return code, out.decode("utf-8", "replace")


def test_the_wait_clock_ticks_between_polls_on_a_terminal(tmp_path):
    d, state = tmp_path / "e", str(tmp_path / "checklist.json")
    with stuck_open_downgrade(d, state):
        env = {**os.environ, "COLUMNS": "80", "TERM": "xterm"}
        # two polls at most (at 0 s and 5 s; a third would pass --timeout): three clock values or more mean the clock
        # moved between polls
        code, shown = _read_pty(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state,
                                            "--interval", "5", "--timeout", "8"], env, 90)
    assert code == 1, shown  # not yet: the stuck transactions pin their logs
    assert "logs done" in shown, shown
    clocks = set(re.findall(r"\[(\d+:\d\d:\d\d)\] \d+/\d+ logs done", shown))
    assert len(clocks) >= 3, shown


def test_the_live_panel_names_the_target_in_the_commands_its_reasons_suggest(tmp_path):
    """On a terminal `wait` lists why logs wait; a command named there must paste onto the same target and checklist,
    as in `status` (the report's own reasons stay bare: the procedure reads them again at the next poll)."""
    import time

    import click
    import typer

    from txnadmin.admin.target import Target
    from txnadmin.cli import downgrade
    from txnadmin.cli._target import TARGET_META
    from txnadmin.procedures.downgrade import LogStatus, Report

    ctx = typer.Context(click.Command("wait"))
    ctx.meta[TARGET_META] = Target("http://prod-broker:8080", "--admin-url", again=["-u", "http://prod-broker:8080"])
    downgrade._suggest(ctx, tmp_path / "prod.json")
    bare = "reopened since recording: run `txnadmin downgrade wait --rerecord` to re-record it"
    log = LogStatus("pending-ack", "persistent://t/ns/orders-billing__transaction_pending_ack", 7, 5, False, bare,
                    kind="reopened since recording", extra={"topic": "persistent://t/ns/orders",
                                                            "subscription": "billing"})
    view = downgrade._LiveView(time.monotonic())
    view.poll(Report(safe=False, flags_disabled=True, logs=[log], verification=None))
    shown = "\n".join(view.detail)
    prod = tmp_path / "prod.json"
    assert f"`txnadmin -u http://prod-broker:8080 downgrade wait --state {prod} --rerecord`" in shown
    assert log.reason == bare
