"""What people and scripts see: -o validated everywhere, YAML, tables, -h/-v, help without flag metavars, command
order, and the `transactions` conveniences (find-hanging counts, --topic, --abort, --txn-id, abort confirmation)."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

from txnadmin.cli.main import app

runner = CliRunner()


@pytest.fixture
def engine(tmp_path, monkeypatch):
    """An engine with three open transactions on topic t1 and one on topic other."""
    directory = tmp_path / "engine"
    monkeypatch.setenv("TXNADMIN_ENGINE_DIR", str(directory))
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    assert runner.invoke(app, ["engine", "init", "-c", "2"]).exit_code == 0
    for produce in ("t1=a", "t1=b", "t1=c", "other=x"):
        result = runner.invoke(app, ["engine", "txn", "begin", "--dir", str(directory), "--produce", produce])
        assert result.exit_code == 0, result.output
    return ["-u", f"local:{directory}"]


def test_find_hanging_counts_filters_and_suggests_commands_for_the_same_target(engine):
    result = runner.invoke(app, [*engine, "transactions", "find-hanging", "--max-transaction-timeout", "0",
                                 "--topic", "t1"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "3 hanging of 3 open transactions" in result.stdout
    commands = re.findall(r"txnadmin .*abort-transaction.*", result.stdout)
    assert len(commands) == 3 and all(f"-u {engine[1]}" in c and "--txn-id '(" in c for c in commands)
    everything = runner.invoke(app, [*engine, "transactions", "find-hanging", "-o", "json"])
    assert everything.exit_code == 0 and json.loads(everything.stdout) == []  # none older than 15 min
    listed = runner.invoke(app, [*engine, "transactions", "list", "--topic", "other", "-o", "json"])
    assert [r["producedPartitions"] for r in json.loads(listed.stdout)] == [["persistent://public/default/other"]]


def test_find_hanging_abort_shows_the_plan_and_needs_yes_off_a_terminal(engine):
    base = [*engine, "transactions", "find-hanging", "--max-transaction-timeout", "0", "--topic", "t1", "--abort"]
    dry = runner.invoke(app, [*base, "--dry-run"])
    assert dry.exit_code == 0 and "plan: abort 3 hanging transactions" in dry.stdout and "nothing was changed" in dry.stdout
    refused = runner.invoke(app, base)
    assert refused.exit_code == 1 and "--yes" in refused.stderr  # pulsar-admin's code, not 2
    still = runner.invoke(app, [*engine, "transactions", "list", "-o", "json"])
    assert len(json.loads(still.stdout)) == 4  # nothing changed so far
    done = runner.invoke(app, [*base, "--yes"])
    assert done.exit_code == 0 and "3 of 3 hanging transactions aborted" in done.stdout
    left = json.loads(runner.invoke(app, [*engine, "transactions", "list", "-o", "json"]).stdout)
    assert [r["producedPartitions"] for r in left] == [["persistent://public/default/other"]]


def test_txn_id_is_accepted_wherever_m_and_l_are_and_abort_says_what_it_did(engine):
    txn = json.loads(runner.invoke(app, [*engine, "transactions", "list", "-o", "json"]).stdout)[0]["txnId"]
    most, least = txn.strip("()").split(",")
    by_flags = runner.invoke(app, [*engine, "transactions", "transaction-metadata", "-m", most, "-l", least, "-o", "json"])
    by_id = runner.invoke(app, [*engine, "transactions", "transaction-metadata", "--txn-id", txn, "-o", "json"])
    assert by_flags.exit_code == by_id.exit_code == 0 and by_flags.stdout == by_id.stdout
    for bad in (["--txn-id", "1-6"], ["--txn-id", txn, "-m", "0"], ["-m", "0"]):
        result = runner.invoke(app, [*engine, "transactions", "transaction-metadata", *bad])
        assert result.exit_code == 1 and result.stderr.strip(), bad
    aborted = runner.invoke(app, [*engine, "transactions", "abort-transaction", "--txn-id", txn])
    assert aborted.exit_code == 0 and aborted.stdout == ""  # pulsar-admin's stdout
    assert aborted.stderr.strip() == f"aborted transaction {txn} on {engine[1]}"


def test_json_is_byte_stable_and_yaml_is_the_same_data(engine):
    call = [*engine, "transactions", "transaction-metadata", "--txn-id", "(0,0)"]
    first = runner.invoke(app, [*call, "-o", "json"]).stdout
    second = runner.invoke(app, [*call, "-o", "json"]).stdout
    data = json.loads(first)
    assert first == second and first == json.dumps(data, indent=2) + "\n"
    as_yaml = runner.invoke(app, [*call, "-o", "yaml"])
    assert as_yaml.exit_code == 0 and yaml.safe_load(as_yaml.stdout) == data
    target = runner.invoke(app, [*engine, "target", "-o", "yaml"])
    assert yaml.safe_load(target.stdout)["target"] == engine[1]


def test_tables_are_sections_and_rows_not_dotted_keys(engine):
    result = runner.invoke(app, [*engine, "transactions", "coordinator-internal-stats", "-c", "0", "-o", "table"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "ledgers" in result.stdout and "ledgerId" in result.stdout  # the ledger list as rows
    assert "managedLedgerInternalStats.ledgers" not in result.stdout and "False" not in result.stdout
    stats = runner.invoke(app, [*engine, "transactions", "coordinator-stats", "-o", "table"], env={"COLUMNS": "200"})
    assert re.search(r"^0 +Ready .*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stats.stdout, re.M)  # one row per coordinator,
    # timestamps for people (in rows without the age, so a row stays one line)


def test_slow_transactions_table_is_one_row_per_transaction_and_its_json_stays_pulsar_admins(engine):
    """-o table: id, coordinator, state, age, timeout, owner, as `list` shows them, each id once and no raw JSON;
    the default and -o json stay what pulsar-admin prints (the map of TransactionMetadata by id)."""
    base = [*engine, "transactions", "slow-transactions", "-t", "1s"]
    table = runner.invoke(app, [*base, "-o", "table"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0] == f"4 slow transactions (timeout over 1s) on {engine[1]}"
    assert lines[1].split() == ["TXN", "ID", "COORDINATOR", "STATE", "AGE", "TIMEOUT", "OWNER"]
    ids = [line.split()[0] for line in lines[2:]]
    assert len(ids) == 4 and all(re.fullmatch(r"\(\d+,\d+\)", i) for i in ids)
    assert all(table.stdout.count(i) == 1 for i in ids)  # each id once
    assert all(len(line) <= 80 for line in lines[1:]) and "{" not in table.stdout  # the title holds a temp path
    assert all(re.fullmatch(r"\(\d+,\d+\) +\d+ +OPEN +\d+s +1m 0s +-", line) for line in lines[2:]), lines
    document = json.loads(runner.invoke(app, [*base, "-o", "json"]).stdout)
    assert sorted(document) == sorted(ids)
    assert all(set(meta) == {"txnId", "status", "openTimestamp", "timeoutAt", "producedPartitions", "ackedPartitions"}
               for meta in document.values())
    default = runner.invoke(app, base).stdout.splitlines()
    assert len(default) == 4 and all(line.split("    ", 1)[1].startswith("TransactionMetadata(") for line in default)
    none = runner.invoke(app, [*engine, "transactions", "slow-transactions", "-t", "2h", "-o", "table"])
    assert none.exit_code == 0 and none.stdout == f"0 slow transactions (timeout over 2h) on {engine[1]}\n"


def _commands_with_output():
    """Every command that has -o/--output, found in the command tree (so a command added later is covered too)."""
    import typer

    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                if not (path == [] and name == "txn"):  # the hidden alias of `transactions`
                    yield from walk(sub, [*path, name])
        elif any("--output" in getattr(param, "opts", ()) for param in command.params):
            yield path

    return list(walk(typer.main.get_command(app), []))


def test_the_output_walk_finds_the_commands_of_every_group():
    found = {tuple(c[:1]) for c in _commands_with_output()}
    assert {("transactions",), ("downgrade",), ("engine",), ("doctor",), ("metrics",), ("scan",)} <= found


@pytest.mark.parametrize("command", _commands_with_output(), ids=" ".join)
def test_an_unknown_output_format_is_a_usage_error(command, tmp_path):
    result = runner.invoke(app, ["-u", f"local:{tmp_path}", *command, "-o", "xml"])
    assert result.exit_code == 2, result.output
    assert "'xml' is not one of" in result.stderr or "--output 'xml': use" in result.stderr


def test_h_v_and_help_show_metavars_only_for_options_with_values():
    assert runner.invoke(app, ["-v"]).stdout.startswith("txnadmin ")
    assert runner.invoke(app, ["-V"]).stdout == runner.invoke(app, ["--version"]).stdout
    helped = runner.invoke(app, ["-h"], env={"COLUMNS": "200"})
    assert helped.exit_code == 0 and "--install-completion" in helped.stdout
    assert "<bool>" not in helped.stdout and "<str>" in helped.stdout
    commands = re.findall(r"^│ (\w+) ", helped.stdout.split("Commands")[1], flags=re.M)
    assert commands[:4] == ["transactions", "downgrade", "upgrade", "scan"]
    sub = runner.invoke(app, ["transactions", "find-hanging", "-h"], env={"COLUMNS": "200"})
    assert sub.exit_code == 0 and "<bool>" not in sub.stdout and "--dry-run" in sub.stdout


def test_a_call_that_waits_shows_a_spinner_naming_it_on_a_terminal(monkeypatch, capsys):
    import sys
    import time

    from txnadmin.cli.transactions import waiting_notice

    class Slow:
        in_flight = "GET /admin/v3/transactions/coordinatorStats"

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with waiting_notice(Slow(), "http://broker:8080"):
        time.sleep(1.6)
    assert "waiting for GET /admin/v3/transactions/coordinatorStats on http://broker:8080" in capsys.readouterr().err
    with waiting_notice(Slow(), "http://broker:8080"):
        pass  # a quick answer shows nothing
    assert "waiting for" not in capsys.readouterr().err


def test_engine_txn_commit_and_abort_take_txn_id_too(engine):
    directory = engine[1].removeprefix("local:")
    opened = json.loads(runner.invoke(app, [*engine, "transactions", "list", "-o", "json"]).stdout)
    first, second = opened[0]["txnId"], opened[1]["txnId"]
    committed = runner.invoke(app, ["engine", "txn", "commit", "--dir", directory, "--txn-id", first])
    assert committed.exit_code == 0 and json.loads(committed.stdout)["txnId"] == first
    most, least = second.strip("()").split(",")
    aborted = runner.invoke(app, ["engine", "txn", "abort", "--dir", directory, "-m", most, "-l", least])
    assert aborted.exit_code == 0, aborted.output
    assert runner.invoke(app, ["engine", "txn", "abort", "--dir", directory]).exit_code == 2


def test_engine_txn_errors_are_one_line_and_a_bad_produce_opens_nothing(engine):
    directory = engine[1].removeprefix("local:")
    for txn_id in ("(7,0)", "(-1,-1)", "(0,999999)"):  # no such coordinator; no such transaction
        ended = runner.invoke(app, ["engine", "txn", "commit", "--dir", directory, "--txn-id", txn_id])
        assert ended.exit_code == 1 and ended.stderr.count("\n") == 1, ended.output
        assert "unexpected" not in ended.stderr and "not found" in ended.stderr
    before = len(json.loads(runner.invoke(app, [*engine, "transactions", "list", "-o", "json"]).stdout))
    for item in ("garbage", "=x"):
        begun = runner.invoke(app, ["engine", "txn", "begin", "--dir", directory, "--produce", "t1=a",
                                    "--produce", item])
        assert begun.exit_code == 2 and "TOPIC=TEXT" in begun.stderr
    after = json.loads(runner.invoke(app, [*engine, "transactions", "list", "-o", "json"]).stdout)
    assert len(after) == before  # refused before a transaction was opened


def test_own_commands_print_the_same_document_as_yaml(engine, tmp_path):
    """-o yaml everywhere -o json is (pulsarctl's formats): the same data, and JSON again for the next command."""
    from pathlib import Path

    directory = engine[1].removeprefix("local:")
    metrics = str(Path(__file__).parent / "fixtures" / "metrics" / "broker-implemented.prom")
    for command in (["metrics", metrics], ["engine", "recover", directory],
                    [*engine, "upgrade", "--dry-run"], [*engine, "doctor", "--only", "coordinators"],
                    [*engine, "downgrade", "start", "--dry-run", "--state", str(tmp_path / "s.json")]):
        as_json = runner.invoke(app, [*command, "-o", "json"])
        as_yaml = runner.invoke(app, [*command, "-o", "yaml"])
        assert as_json.exit_code == as_yaml.exit_code and as_yaml.exit_code in (0, 1), (command, as_yaml.output)
        data = json.loads(as_json.stdout)
        data.pop("checkedAt", None)
        shown = yaml.safe_load(as_yaml.stdout)
        shown.pop("checkedAt", None)
        assert shown == data, command
    plain = runner.invoke(app, ["engine", "txn", "begin", "--dir", directory])  # no -o: JSON, not the last run's YAML
    assert plain.exit_code == 0 and json.loads(plain.stdout)["txnId"]
