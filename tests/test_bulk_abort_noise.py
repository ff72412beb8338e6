"""Bulk abort where a plan is long (issue 34, point 10): with --yes -o json, stderr sums the plan up (counts by
coordinator and state, the first ids) and the JSON document carries all of it; an interrupted run says once what was
done, with a count and the first of those never attempted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

from bulk_abort_helpers import T, opened, own_copy, two_coordinators

runner = CliRunner()
OPEN_ON = {0: 8, 1: 5}  # open transactions per coordinator


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """Two coordinators: 8 open transactions on coordinator 0, 5 on coordinator 1, oldest first by id."""
    d = two_coordinators(tmp_path_factory.mktemp("noise") / "e")
    with opened(d) as engine:
        for tc, n in OPEN_ON.items():
            for _ in range(n):
                engine.produce(engine.begin(3_600_000, "app", tc), T + "t", b"x")
    return d


@pytest.fixture
def engine(template, tmp_path, monkeypatch):
    return own_copy(template, tmp_path, monkeypatch)


def test_yes_with_json_sums_the_plan_up_on_stderr_and_keeps_it_whole_in_the_document(engine):
    result = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "abort", "--all", "--yes", "-o", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    planned = [t["txnId"] for t in document["plan"]["transactions"]]
    assert len(planned) == 13 and len(document["plan"]["steps"]) == 13 and document["planned"] == 13
    assert [r["txnId"] for r in document["results"]] == planned
    said = result.stderr.splitlines()
    assert len(said) <= 8, said  # not one line per transaction
    assert said[0] == "plan: abort 13 transactions (every open transaction)"
    assert "  13 transactions on 2 coordinators:" in said
    assert "    coordinator 0: 8 OPEN" in said and "    coordinator 1: 5 OPEN" in said
    assert f"  first: {' '.join(planned[:5])} … and 8 more" in said
    assert not any(line.startswith("  - abort") for line in said)
    left = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "abort", "--all", "--dry-run", "-o", "json"])
    assert left.exit_code == 0 and json.loads(left.stdout)["planned"] == 0  # every one was aborted


def test_asked_or_in_text_the_plan_is_shown_step_by_step(engine):
    text = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "abort", "--all", "--dry-run"])
    assert text.exit_code == 0 and text.stdout.count("\n  - abort (") == 13


@pytest.mark.slow  # a real `serve` process starts for it
def test_ctrl_c_says_once_how_many_were_not_attempted_and_the_first_of_them(engine, tmp_path):
    from http_front import front
    from serve_helpers import serving

    with serving(engine, tmp_path / "home") as (url, token), front(url, token) as door:
        proc: list[subprocess.Popen] = []

        def interrupt(method: str, path: str) -> None:
            if method == "POST" and path.startswith("/admin/v3/transactions/abortTransaction/0/1"):
                proc[0].send_signal(signal.SIGINT)
                time.sleep(1)  # the interrupt lands while the CLI waits for this answer

        door.before_forward.append(interrupt)
        env = dict(os.environ, TXNADMIN_ADMIN_URL="", PULSAR_CLIENT_CONF="")
        proc.append(subprocess.Popen([sys.executable, "-m", "txnadmin.cli.main", "-u", door.url, "transactions",
                                      "abort", "--all", "--yes", "-o", "json"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env))
        out, err = proc[0].communicate(timeout=120)
    assert proc[0].returncode == 130, out + err
    lines = err.splitlines()
    assert lines.count("interrupted") == 0 and sum(line.startswith("interrupted") for line in lines) == 1, err
    [said] = [line for line in lines if line.startswith("interrupted")]
    assert said.startswith("interrupted: 1 of 13 planned transactions aborted or ended; (0,1) may or may not be "
                           "aborted; 11 not attempted: "), said
    assert said.endswith(" … and 6 more") and said.count("(") == 1 + 5  # the one in flight and the first five
