"""One grammar for durations, one way to abort (issue 34, point 14).

Every duration flag reads through txnadmin/durations.py: a bare number only where the flag always took one, in the
unit its help names (and its errors repeat); a unit required where a bare number would be misread (doctor's and the
exporter's --threshold, once milliseconds). `transactions abort`, `find-hanging --abort` and `doctor --fix` abort
through one procedure and say the same outcomes in the same words and the same JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.durations import MAX_MS, UNIT_MS, parse_duration_ms

from broker_standin import BrokerStandIn, open_transaction

runner = CliRunner()
TOPIC = "persistent://public/default/orders"
OUTCOME_KEYS = {"txnId", "coordinatorId", "owner", "ageMs", "plannedStatus", "outcome", "status"}


# -- the grammar, through the CLI -----------------------------------------------------------------------------

def test_a_bare_threshold_is_refused_where_it_once_meant_milliseconds(tmp_path):
    env = {"TXNADMIN_HOME": str(tmp_path)}
    for command in (["-u", "http://127.0.0.1:9", "doctor"], ["-u", "http://127.0.0.1:9", "exporter"]):
        refused = runner.invoke(app, [*command, "--threshold", "stuck-margin=60000"], env=env)
        assert refused.exit_code == 2, refused.output
        line = refused.stderr.strip()
        assert "\n" not in line and "'60000'" in line and "--threshold stuck-margin" in line, line
        assert "a number needs its unit" in line and "90s" in line
    for value in ("60s", "1m", "60000ms", "0.5m"):  # the same minute, any way it is written with its unit
        parsed = runner.invoke(app, ["-u", "http://127.0.0.1:9", "doctor", "--threshold", f"stuck-margin={value}",
                                     "--only", "nope"], env=env)
        assert "unknown check" in parsed.stderr or "nope" in parsed.stderr, (value, parsed.output)  # past the value


def test_a_bare_number_keeps_its_flags_unit_and_every_error_names_it(tmp_path):
    from txnadmin.engine.manage import init_engine

    d = tmp_path / "e"
    init_engine(d, {"transactionCoordinatorCount": "1"})
    base = ["-u", f"local:{d}", "transactions"]
    for args, says in ((["list", "--older-than", "5 minutes"], "a bare number is seconds"),
                       (["abort", "--older-than", "-5m", "--dry-run"], "a bare number is seconds"),
                       (["find-hanging", "--max-transaction-timeout", "soon"], "a bare number is minutes")):
        refused = runner.invoke(app, [*base, *args], env={"TXNADMIN_HOME": str(tmp_path)})
        assert refused.exit_code == 1 and says in refused.stderr and "e.g. 90s" in refused.stderr, refused.output
    for args in (["list", "--older-than", "90"], ["list", "--older-than", "90s"],
                 ["find-hanging", "--max-transaction-timeout", "15"], ["find-hanging", "--max-transaction-timeout",
                                                                       "900s"]):
        assert runner.invoke(app, [*base, *args], env={"TXNADMIN_HOME": str(tmp_path)}).exit_code == 0, args


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["ms", "s", "m", "h", "d", "MS", "S", "H"])),
                min_size=1, max_size=4))
def test_parts_add_up(parts):
    text = "".join(f"{n}{u}" for n, u in parts)
    total = sum(n * UNIT_MS[u.lower()] for n, u in parts)
    if total > MAX_MS:
        with pytest.raises(ValueError, match="longer than 100 years"):
            parse_duration_ms(text, "--x")
    else:
        assert parse_duration_ms(text, "--x") == total


@given(st.integers(0, 10**6), st.sampled_from(["ms", "s", "m"]))
def test_a_bare_number_is_the_flags_unit_or_refused(n, unit):
    assert parse_duration_ms(str(n), "--x", unit) == n * UNIT_MS[unit]
    with pytest.raises(ValueError, match="a number needs its unit here"):
        parse_duration_ms(str(n), "--x")


@settings(max_examples=300)
@given(st.text(max_size=30), st.sampled_from([None, "s", "m"]))
def test_any_text_parses_or_says_which_flag_which_input_and_the_rule(text, bare):
    try:
        value = parse_duration_ms(text, "--some-flag", bare)
    except ValueError as exc:
        assert f"'{text}'" in str(exc) and "--some-flag" in str(exc)
    else:
        assert 0 <= value <= MAX_MS


# -- one way to abort --------------------------------------------------------------------------------------------

@pytest.fixture
def stuck(monkeypatch, tmp_path):
    """Three transactions OPEN two hours past their one-minute timeout, on a broker stand-in."""
    standin = BrokerStandIn()
    for txn in ("(0,1)", "(0,2)", "(1,3)"):
        open_transaction(standin.state, txn, opened_ago_ms=2 * 3_600_000, timeout_ms=60_000, produced=[TOPIC],
                         owner="app")
    monkeypatch.setattr("txnadmin.admin.target.open_admin", lambda target: standin.admin())
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path))
    return standin


ABORTS = {
    "abort": ["transactions", "abort", "--all", "--yes"],
    "find-hanging": ["transactions", "find-hanging", "--abort", "--yes"],
    "doctor": ["doctor", "--only", "stuck-transactions", "--fix", "--yes"],
}


@pytest.mark.parametrize("command", sorted(ABORTS))
def test_each_abort_says_every_outcome_and_its_account_in_the_same_words(stuck, command):
    done = runner.invoke(app, ["-u", stuck.base, *ABORTS[command]])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("aborted (")] == ["aborted (0,1)", "aborted (0,2)",
                                                                          "aborted (1,3)"], done.stdout
    noun = "hanging transactions" if command == "find-hanging" else "planned transactions"
    assert f"3 of 3 {noun} aborted on {stuck.base}, 0 ended by themselves meanwhile" in lines, done.stdout
    assert not stuck.state["transactions"] or all(
        t["status"] != "OPEN" for t in stuck.state["transactions"].values())


@pytest.mark.parametrize("command", sorted(ABORTS))
def test_each_abort_gives_the_same_outcomes_in_its_json(stuck, command):
    done = runner.invoke(app, ["-u", stuck.base, *ABORTS[command], "-o", "json"])
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    results = document["fix"]["results"] if command == "doctor" else document["results"]
    assert [r["txnId"] for r in results] == ["(0,1)", "(0,2)", "(1,3)"]
    assert all(set(r) == OUTCOME_KEYS and r["outcome"] == "ABORTED" for r in results), results
    if command != "doctor":
        assert document["summary"]["ABORTED"] == 3 and document["planned"] == 3
