"""`transactions list` filters and `transactions abort` (issue #28 point 5): each filter selects exactly what it
says, on `list` and `abort` alike; --dry-run changes nothing; the refusals; a transaction that ends by itself between
the plan and the abort is reported as such; a partial failure leaves an account of what was and was not aborted."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from bulk_abort_helpers import T, opened, own_copy, two_coordinators
from engine_helpers import directory_fingerprint
from txnadmin.cli.main import app
from txnadmin.procedures.bulk_abort import id_matcher, parse_older_than as parse_duration

runner = CliRunner()
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """Two coordinators; (0,0) alice on t1, opened an hour ago with a 2 h timeout; (1,0) alice on t2, (0,1) bob on
    t1 and acking on `other`, (1,1) carol on other. Built once; each test works on its own copy."""
    d = two_coordinators(tmp_path_factory.mktemp("bulk") / "e")
    with opened(d, clock_ms=lambda: int(time.time() * 1000) - HOUR_MS) as engine:
        first = engine.begin(2 * HOUR_MS, "alice", 0)
        engine.produce(first, T + "t1", b"a")
    with opened(d) as engine:
        engine.publish(T + "other", b"m")
        engine.subscribe(T + "other", "s")
        for owner, tc, topic in (("alice", 1, "t2"), ("bob", 0, "t1"), ("carol", 1, "other")):
            txn = engine.begin(600_000, owner, tc)
            engine.produce(txn, T + topic, b"x")
            if owner == "bob":
                position = engine.publish(T + "other", b"n")
                engine.ack(txn, T + "other", "s", [position])
    return d


@pytest.fixture
def engine(template, tmp_path, monkeypatch):
    return own_copy(template, tmp_path, monkeypatch)


def txn(*args, target):
    result = runner.invoke(app, ["-u", target, "transactions", *args])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def ids(rows) -> set[str]:
    return {r["txnId"] for r in rows}


EVERY = {"(0,0)", "(1,0)", "(0,1)", "(1,1)"}
FILTERS = [
    (["--owner", "alice"], {"(0,0)", "(1,0)"}),
    (["--coordinator-id", "1"], {"(1,0)", "(1,1)"}),
    (["-c", "0", "--owner", "alice"], {"(0,0)"}),
    (["--topic", "t1"], {"(0,0)", "(0,1)"}),
    (["--topic", "other"], {"(0,1)", "(1,1)"}),  # bob acked on it, carol produced to it
    (["--id-pattern", "1,*"], {"(1,0)", "(1,1)"}),
    (["--id-pattern", "(?,1)"], {"(0,1)", "(1,1)"}),
    (["--older-than", "30m"], {"(0,0)"}),
    (["--older-than", "1h30m"], set()),
    (["--state", "open", "--owner", "bob"], {"(0,1)"}),
    (["--state", "ABORTING", "--state", "COMMITTING"], set()),
]


@pytest.mark.parametrize("args,expected", FILTERS, ids=[" ".join(a) for a, _ in FILTERS])
def test_each_filter_selects_the_same_on_list_dry_run_and_abort(engine, args, expected):
    target = f"local:{engine}"
    listed = txn("list", *args, "-o", "json", target=target)
    assert listed.exit_code == 0 and ids(json.loads(listed.stdout)) == expected, listed.output
    before = directory_fingerprint(engine)
    dry = txn("abort", *args, "--dry-run", "-o", "json", target=target)
    assert dry.exit_code == 0, dry.output
    if not expected:
        assert json.loads(dry.stdout)["planned"] == 0
    else:
        assert json.loads(dry.stdout)["dryRun"] is True
        plan = json.loads(dry.stdout)["plan"]
        assert ids(plan["transactions"]) == expected
        assert plan["coordinators"] == sorted({int(i.strip("()").split(",")[0]) for i in expected})
        assert all(r["owner"] and r["ageMs"] >= 0 for r in plan["transactions"])
    assert directory_fingerprint(engine) == before  # the dry run changed nothing
    done = txn("abort", *args, "--yes", "-o", "json", target=target)
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert {r["txnId"]: r["outcome"] for r in report["results"]} == {i: "ABORTED" for i in expected}
    left = txn("list", "-o", "json", target=target)
    assert ids(json.loads(left.stdout)) == EVERY - expected


def test_the_table_sorts_by_age_and_shows_state_owner_timeout_left_and_partition_counts(engine):
    shown = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "list", "-o", "table"],
                          env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert re.split(r" {2,}", lines[1]) == ["TXN ID", "STATE", "OWNER", "AGE", "TIMEOUT LEFT", "PRODUCED", "ACKED"]
    rows = [re.split(r" {2,}", line) for line in lines[2:]]  # columns two spaces apart, cells whole
    by_age = json.loads(txn("list", "-o", "json", target=f"local:{engine}").stdout)
    assert [r[0] for r in rows] == [r["txnId"] for r in sorted(by_age, key=lambda r: (-r["ageMs"], r["txnId"]))]
    assert rows[0][1:4] == ["OPEN", "alice", "1h 0m"]  # the oldest first, an hour old
    assert rows[0][4].startswith("59m") or rows[0][4].startswith("1h")  # of its 2 h timeout, about 1 h left
    bob = next(r for r in rows if r[2] == "bob")
    assert bob[5:] == ["1", "1"]  # one produced partition, one acked subscription
    assert bob[4].startswith("9m")  # 10 min timeout, seconds gone


def test_list_without_filters_is_unchanged_and_filtered_json_keeps_the_same_rows(engine):
    target = f"local:{engine}"
    every = json.loads(txn("list", "-o", "json", target=target).stdout)
    assert list(every[0]) == ["txnId", "coordinatorId", "status", "openTimestamp", "ageMs", "timeoutMs", "owner",
                              "producedPartitions", "ackedPartitions"]
    alice = json.loads(txn("list", "--owner", "alice", "-o", "json", target=target).stdout)
    assert [r["txnId"] for r in alice] == [r["txnId"] for r in every if r["owner"] == "alice"]


@pytest.mark.parametrize("args,words", [
    ([], "needs a filter"),
    (["--all", "--owner", "alice"], "not both"),
    (["--state", "PENDING"], "invalid --state 'PENDING'"),
    (["--older-than", "5 minutes"], "invalid duration '5 minutes'"),
    (["--older-than", "-5m"], "invalid duration '-5m'"),
    (["--id-pattern", "(1;6)"], "invalid --id-pattern"),
    (["--id-pattern", ""], "invalid --id-pattern"),
    (["--id-pattern", "(1,*"], "invalid --id-pattern '(1,*': parentheses"),  # a typo, not a glob over ids
    (["--id-pattern", "["], "invalid --id-pattern '[': a [ without its closing ]"),
    (["--coordinator-id", "-1"], "invalid --coordinator-id"),
    (["--owner", "alice"], "--yes"),  # not on a terminal, no --yes: refused
])
def test_abort_refuses_and_changes_nothing(engine, args, words):
    target = f"local:{engine}"
    before = directory_fingerprint(engine)
    refused = txn("abort", *args, target=target)
    assert refused.exit_code == 1 and words in refused.stderr, refused.output  # `transactions` codes: 0/1
    assert directory_fingerprint(engine) == before


@pytest.mark.parametrize("pattern", ["(1,*", "[", "1,[0-", "(1,5))", "1,5,6", "1,5]"])
def test_list_refuses_a_malformed_id_pattern_instead_of_matching_nothing(engine, pattern):
    refused = txn("list", "--id-pattern", pattern, "-o", "json", target=f"local:{engine}")
    assert refused.exit_code == 1 and refused.stdout == "", refused.output  # `transactions` codes: a usage error is 1
    assert refused.stderr.startswith(f"invalid --id-pattern '{pattern}': ") and refused.stderr.count("\n") == 1


def test_abort_refuses_an_implicit_target(engine, monkeypatch):
    monkeypatch.setenv("TXNADMIN_ENGINE_DIR", str(engine))  # the embedded default would be this very engine
    before = directory_fingerprint(engine)
    refused = runner.invoke(app, ["transactions", "abort", "--all", "--yes"])
    assert refused.exit_code == 1 and "needs a named target" in refused.stderr, refused.output
    assert directory_fingerprint(engine) == before
    listed = runner.invoke(app, ["transactions", "list", "-o", "json"])  # reading needs no named target
    assert listed.exit_code == 0 and ids(json.loads(listed.stdout)) == EVERY


def test_abort_all_aborts_everything_and_says_so_in_text(engine):
    target = f"local:{engine}"
    done = txn("abort", "--all", "--yes", target=target)
    assert done.exit_code == 0, done.output
    assert "plan: abort 4 transactions (every open transaction)" in done.stdout
    for i in EVERY:
        assert f"aborted {i}" in done.stdout
    assert "4 of 4 planned transactions aborted" in done.stdout
    again = txn("abort", "--all", "--yes", target=target)
    assert again.exit_code == 0 and "nothing to abort" in again.stdout


# -- over HTTP: a real `serve`, behind a front door that plays the race and the failure ------------------------


@pytest.fixture
def served(engine, tmp_path):
    from http_front import front
    from serve_helpers import serving

    with serving(engine, tmp_path / "home") as (url, token), front(url, token) as door:
        yield door, url, token


@pytest.mark.slow  # a real `serve` process starts for it
def test_a_transaction_ending_by_itself_between_plan_and_abort_is_reported_not_an_error(served):
    """Someone else ends (1,0) after the plan was shown, just before our abort of it reaches the broker."""
    import httpx

    door, url, token = served

    def ends_first(method: str, path: str) -> None:
        if method == "POST" and path.startswith("/admin/v3/transactions/abortTransaction/1/0"):
            other = httpx.post(url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            assert other.status_code < 300, other.text

    door.before_forward.append(ends_first)
    done = txn("abort", "--owner", "alice", "--yes", "-o", "json", target=door.url)
    assert done.exit_code == 0, done.output
    outcomes = {r["txnId"]: r for r in json.loads(done.stdout)["results"]}
    assert outcomes["(0,0)"]["outcome"] == "ABORTED"
    assert outcomes["(1,0)"]["outcome"] == "ENDED" and "by itself" in outcomes["(1,0)"]["reason"]
    assert json.loads(done.stdout)["summary"] == {"ABORTED": 1, "ENDED": 1, "FAILED": 0, "UNKNOWN": 0,
                                                  "NOT_ATTEMPTED": 0}
    text = txn("abort", "--owner", "bob", "--yes", target=door.url)  # and the text form of a clean run
    assert text.exit_code == 0 and "1 of 1 planned transaction aborted" in text.stdout


@pytest.mark.slow  # a real `serve` process starts for it
def test_a_partial_failure_says_what_was_aborted_and_what_was_not(served):
    door, _, _ = served

    def refuse_one(method: str, path: str):
        if method == "POST" and path.startswith("/admin/v3/transactions/abortTransaction/0/1"):
            return 500, json.dumps({"reason": "bookie write failed"})
        return None

    door.intercepts.append(refuse_one)
    done = txn("abort", "--topic", "t1", "--yes", target=door.url)
    assert done.exit_code == 1, done.output
    assert "aborted (0,0)" in done.stdout
    assert "FAILED to abort (0,1): bookie write failed; it is still OPEN" in done.stdout
    assert "1 of 2 planned transactions aborted" in done.stdout and "NOT aborted (1): (0,1)" in done.stdout
    as_json = txn("abort", "--owner", "bob", "--yes", "-o", "json", target=door.url)
    assert as_json.exit_code == 1
    [result] = json.loads(as_json.stdout)["results"]
    assert result["outcome"] == "FAILED" and result["status"] == "OPEN" and "bookie write failed" in result["reason"]
    left = txn("list", "-o", "json", target=door.url)
    assert ids(json.loads(left.stdout)) == {"(0,1)", "(1,0)", "(1,1)"}  # the account matches the cluster


# -- parsing, fuzzed -----------------------------------------------------------------------------------------

UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from("smhdSMHD")), min_size=1, max_size=4))
def test_durations_add_up_their_parts(parts):
    text = "".join(f"{n}{u}" for n, u in parts)
    total = sum(n * UNITS[u.lower()] for n, u in parts)
    if total > 100 * 365 * UNITS["d"]:  # past the cap: refused, naming the input (as any bad value is)
        with pytest.raises(ValueError, match="longer than 100 years"):
            parse_duration(text)
    else:
        assert parse_duration(text) == total


@given(st.integers(0, 10**9))
def test_a_bare_number_is_seconds(n):  # --older-than's, as it always was (txnadmin/durations.py)
    assert parse_duration(str(n)) == n * 1000


@settings(max_examples=300)
@given(st.text(max_size=30))
def test_any_duration_text_parses_or_says_why(text):
    try:
        value = parse_duration(text)
    except ValueError as exc:
        assert text in str(exc)
    else:
        assert 0 <= value <= 100 * 365 * 86_400_000


@settings(max_examples=300)
@given(st.text(max_size=20), st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))
def test_any_pattern_compiles_or_says_why_and_never_raises_on_an_id(pattern, most, least):
    try:
        match = id_matcher(pattern)
    except ValueError as exc:
        assert "--id-pattern" in str(exc)
    else:
        assert match(f"({most},{least})") in (True, False)


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.integers(0, 12))
def test_an_id_pattern_cut_short_or_with_a_set_left_open_is_refused(most, least, cut):
    whole = f"({most},[{least % 10}]*)"
    for broken in (whole[:-1 - cut % 3], whole.replace("]", "") , whole + ")", "(" + whole):
        with pytest.raises(ValueError, match="invalid --id-pattern"):
            id_matcher(broken)
    assert id_matcher(whole)(f"({most},{least % 10}{least})")


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))
def test_a_literal_id_matches_itself_only_and_a_star_matches_its_coordinator(most, least, other_most, other_least):
    mine, other = f"({most},{least})", f"({other_most},{other_least})"
    assert id_matcher(mine)(mine) and id_matcher(f"{most},{least}")(mine)
    assert id_matcher(mine)(other) == (mine == other)
    assert id_matcher(f"{most},*")(other) == (other_most == most)
    assert id_matcher("*")(other)


# -- a live workload: transactions end by themselves all the time ----------------------------------------------


@pytest.mark.slow
def test_under_a_live_workload_every_planned_transaction_is_aborted_or_ended_and_a_held_commit_is_not_claimed(
        tmp_path):
    """`engine run` commits and aborts its own transactions while we abort the open ones: whatever raced, each
    planned one is ABORTED or ENDED and the run exits 0. The one held in COMMITTING (--fault hold-ending) cannot be
    aborted in Pulsar: it is reported FAILED, still COMMITTING, and the run exits 1."""
    d = two_coordinators(tmp_path / "e")
    env = dict(os.environ, TXNADMIN_HOME=str(tmp_path / "home"))
    cli = [sys.executable, "-m", "txnadmin.cli.main", "-u", f"local:{d}", "transactions"]
    run = subprocess.Popen([sys.executable, "-m", "txnadmin.cli.main", "engine", "run", str(d), "--duration", "0",
                            "--rate", "100", "--concurrency", "4", "--txn-timeout-ms", "60000",
                            "--fault", "hold-ending", "-o", "json"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)

    def call(*args):
        result = subprocess.run(cli + list(args), capture_output=True, text=True, env=env, timeout=120)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    try:
        held = []
        for _ in range(300):
            if (d / "server.json").exists():
                listed = call("list", "--owner", "fault:hold-ending", "--state", "COMMITTING", "-o", "json")
                if listed.returncode == 0 and json.loads(listed.stdout):
                    held = json.loads(listed.stdout)
                    break
            assert run.poll() is None, run.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        assert len(held) == 1, "the held commit never showed"
        planned = 0
        deadline = time.monotonic() + 120  # the workload's transactions are short: keep catching them until 5 are
        while time.monotonic() < deadline:
            done = call("abort", "--state", "OPEN", "--yes", "-o", "json")
            assert done.returncode == 0, done.stdout + done.stderr
            report = json.loads(done.stdout)
            assert {r["outcome"] for r in report["results"]} <= {"ABORTED", "ENDED"}, report["results"]
            planned += report["planned"]
            if planned >= 5:
                break
        assert planned >= 5, "the workload never had open transactions to abort"
        stuck = call("abort", "--owner", "fault:hold-ending", "--yes", "-o", "json")
        assert stuck.returncode == 1, stuck.stdout + stuck.stderr
        [result] = json.loads(stuck.stdout)["results"]
        assert (result["txnId"], result["outcome"], result["status"]) == (held[0]["txnId"], "FAILED", "COMMITTING")
        assert "does not abort a committing transaction" in result["reason"]
        assert run.poll() is None  # the workload lived through having its transactions aborted
    finally:
        run.terminate()
        code = run.wait(timeout=60)
    assert code == 0, run.stderr.read().decode()[-2000:]


@pytest.mark.slow
def test_ctrl_c_mid_run_leaves_the_account_of_what_was_done(served):
    """A real CLI process interrupted while its second abort is at the broker: what was aborted, the one that may or
    may not be, and those never tried, then exit 130."""
    import signal

    door, _, _ = served
    proc: list[subprocess.Popen] = []

    def interrupt(method: str, path: str) -> None:
        if method == "POST" and path.startswith("/admin/v3/transactions/abortTransaction/1/0"):
            proc[0].send_signal(signal.SIGINT)
            time.sleep(1)  # the broker "takes its time": the interrupt lands while the CLI waits for this answer

    door.before_forward.append(interrupt)
    env = dict(os.environ, TXNADMIN_ADMIN_URL="", PULSAR_CLIENT_CONF="")
    proc.append(subprocess.Popen([sys.executable, "-m", "txnadmin.cli.main", "-u", door.url, "transactions", "abort",
                                  "--all", "--yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env))
    out, err = proc[0].communicate(timeout=120)
    assert proc[0].returncode == 130, out + err
    assert "Traceback" not in err
    assert "aborted (0,0)" in out  # the oldest went first
    assert "interrupted: 1 of 4 planned transactions aborted or ended; (1,0) may or may not be aborted; " \
           "2 not attempted: " in err, err
    assert set(err.split("not attempted: ")[1].split()[:2]) == {"(0,1)", "(1,1)"}
    assert "interrupted" not in err.splitlines()  # said once, not again bare


def test_an_owner_is_data_never_markup(tmp_path, monkeypatch):
    d = tmp_path / "e"
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "1"]).exit_code == 0
    owner = "[bold red]mallory[/bold red]"
    assert runner.invoke(app, ["engine", "txn", "begin", "--dir", str(d), "--owner", owner]).exit_code == 0
    shown = runner.invoke(app, ["-u", f"local:{d}", "transactions", "list", "--owner", owner],
                          env={"COLUMNS": "200"})
    flat = "".join(shown.stdout.split())  # the title wraps at the table's width
    assert shown.exit_code == 0 and flat.count(owner.replace(" ", "")) == 2, shown.output  # its row and the title
    planned = txn("abort", "--owner", owner, "--dry-run", target=f"local:{d}")
    assert planned.exit_code == 0 and f"owner {owner}," in planned.stdout


@pytest.mark.parametrize("answer,code,left", [("n\n", 1, 4), ("y\n", 0, 2)])
def test_on_a_terminal_it_asks_and_a_no_changes_nothing(engine, monkeypatch, answer, code, left):
    import txnadmin.cli.confirm as confirm

    monkeypatch.setattr(confirm, "_stdin_is_terminal", lambda: True)
    asked = runner.invoke(app, ["-u", f"local:{engine}", "transactions", "abort", "--owner", "alice", "-o", "yaml"],
                          input=answer)
    assert asked.exit_code == code and "Proceed?" in asked.stderr, asked.output
    assert "plan: abort 2 transactions" in asked.stderr  # -o yaml: stdout is the one document
    remaining = json.loads(txn("list", "-o", "json", target=f"local:{engine}").stdout)
    assert len(remaining) == left
    if code == 0:
        import yaml

        document = asked.stdout[asked.stdout.index("target:"):]  # CliRunner echoes the typed answer to stdout
        assert yaml.safe_load(document)["summary"]["ABORTED"] == 2


@pytest.mark.slow
def test_a_target_that_stops_answering_mid_run_leaves_unknown_and_not_attempted(served):
    """The connection drops while the second abort is at the broker: that one may or may not be aborted, the rest
    are not tried (a broker that stopped answering would fail them all), and the account says so."""
    door, _, _ = served

    def drop(method: str, path: str) -> None:
        if method == "POST" and path.startswith("/admin/v3/transactions/abortTransaction/1/0"):
            raise ConnectionAbortedError("the broker went away mid-request")

    door.before_forward.append(drop)
    # a process of its own: the front's report of the dropped request lands on this test's stderr, not the CLI's
    done = subprocess.run([sys.executable, "-m", "txnadmin.cli.main", "-u", door.url, "transactions", "abort",
                           "--all", "--yes", "-o", "json"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TXNADMIN_ADMIN_URL="", PULSAR_CLIENT_CONF=""))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    outcomes = [(r["txnId"], r["outcome"]) for r in json.loads(done.stdout)["results"]]
    assert outcomes[:2] == [("(0,0)", "ABORTED"), ("(1,0)", "UNKNOWN")], outcomes
    assert sorted(outcomes[2:]) == [("(0,1)", "NOT_ATTEMPTED"), ("(1,1)", "NOT_ATTEMPTED")]
    door.before_forward.clear()
    left = ids(json.loads(txn("list", "-o", "json", target=door.url).stdout))
    assert {"(0,1)", "(1,1)", "(1,0)"} == left  # the dropped request never reached the broker: (1,0) still open
