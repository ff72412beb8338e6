"""Every command that talks to a Pulsar, against a stand-in broker that answers each realistic bad reply.

For each (command, reply): no traceback, a short error on stderr that says what is wrong, the documented exit code
(1 under `transactions`, as pulsar-admin; 3 in txnadmin's own commands, where 1 means "not yet"), and the token
never printed.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import dumpgen as g
from test_http_faults import Misbehaving
from txnadmin.cli.main import app

SECRET = "garbage-test-secret-token"
runner = CliRunner()

_EMPTY_LEDGERS = {"managedLedgerInternalStats": {"ledgers": [], "cursors": {}}}
REPLIES = {
    "404 (Jetty page)": (404, "<html><body><h2>HTTP ERROR 404 Not Found</h2></body></html>", {}),
    "[] for an object": (200, "[]", {}),
    '"OK"': (200, '"OK"', {}),
    "null": (200, "null", {}),
    "42": (200, "42", {}),
    "string body": (200, "OK", {}),
    "HTML login page": (200, "<!DOCTYPE html><html><form action='/login'>Sign in</form></html>", {}),
    "deeply nested JSON": (200, "[" * 200_000 + "]" * 200_000, {}),
    "307 to an unparsable Location": (307, "", {"Location": "http://[::1"}),
    "internal stats without ledgers": (200, json.dumps({"transactionLogStats": _EMPTY_LEDGERS,
                                                        "pendingAckLogStats": _EMPTY_LEDGERS}), {}),
    "error body echoing our headers": (400, json.dumps({"reason": f"bad request (Authorization: Bearer {SECRET})"}),
                                       {}),
    "200 echoing our headers": (200, json.dumps({"echo": f"Authorization: Bearer {SECRET}"}), {}),
}

TXN = [
    ["coordinator-internal-stats", "-c", "0"],
    ["pending-ack-internal-stats", "-t", "t", "-s", "s"],
    ["buffer-snapshot-internal-stats", "-t", "t"],
    ["coordinator-stats"],
    ["coordinator-stats", "-c", "0"],
    ["transaction-buffer-stats", "-t", "t"],
    ["pending-ack-stats", "-t", "t", "-s", "s"],
    ["transaction-in-buffer-stats", "-m", "0", "-l", "1", "-t", "t"],
    ["transaction-in-pending-ack-stats", "-m", "0", "-l", "1", "-t", "t", "-s", "s"],
    ["transaction-metadata", "-m", "0", "-l", "1"],
    ["slow-transactions", "-t", "1s"],
    ["scale-transactionCoordinators", "-r", "2"],
    ["position-stats-in-pending-ack", "-t", "t", "-s", "s", "-l", "1", "-e", "1"],
    ["coordinators-list"],
    ["abort-transaction", "-m", "0", "-l", "1"],
    ["set-txn-tc-batch-log", "--disable"],
    ["set-txn-pending-ack-batch-log", "--disable"],
    ["get-txn-tc-batch-log-stat"],
    ["get-txn-pending-ack-batch-log-stat"],
    ["list"],
    ["find-hanging"],
    ["find-hanging", "--max-transaction-timeout", "0", "--abort", "--yes"],
    ["abort", "--all", "--yes"],
    ["abort", "--older-than", "1s", "--yes"],
    ["transaction-metadata", "--txn-id", "(0,1)"],
    ["abort-transaction", "--txn-id", "(0,1)"],
]
OWN = [
    ["downgrade", "start", "--yes", "--state", "{state}"],
    ["downgrade", "status", "--state", "{recorded}"],
    ["downgrade", "wait", "--state", "{recorded}", "--timeout", "0"],
    ["downgrade", "guard", "--state", "{recorded}"],
    ["downgrade", "roll", "--to", "2.10.6", "--yes", "--state", "{recorded}", "--timeout", "0", "--interval", "0.1"],
    ["downgrade", "verify", "--state", "{recorded}", "--dumps", "{dump}", "--ledgers", "{ledgers}", "--engine", "python"],
    ["upgrade", "--yes"],
    ["doctor"],
    ["doctor", "-o", "json", "--fix", "--yes"],
    ["metrics", "{url}/metrics", "--token", SECRET],
]
COMMANDS = [["transactions", *c] for c in TXN] + [["transactions", *c, "-o", "json"] for c in TXN[:4]] + \
    [["transactions", *c, "-o", "table"] for c in TXN[:4]] + OWN


@pytest.fixture(scope="module")
def servers():
    started = {name: Misbehaving(reply) for name, reply in REPLIES.items()}
    yield started
    for server in started.values():
        server.close()


def _recorded_state(path, url):
    from txnadmin.procedures.downgrade.checklist import save_state

    save_state(path, {
        "version": 1, "kind": "pip160-downgrade", "target": url, "phase": "recorded", "changeTime": 1,
        "reload": True, "verification": None,
        "coordinators": {"0": {"lastBatchedLedgerId": 5, "reloaded": True, "recordedAt": 1}},
        "pendingAckStores": {"persistent://public/default/t-s__transaction_pending_ack": {
            "topic": "persistent://public/default/t", "subscription": "s", "lastBatchedLedgerId": 5,
            "recordedAt": 1}}, "safeVerdict": {"at": 1, "poll": 1}})  # written as txnadmin writes it
    return path


@pytest.mark.parametrize("reply", list(REPLIES))
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_bad_reply_gives_one_short_error_and_the_documented_code(servers, reply, command, tmp_path, monkeypatch):
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    server = servers[reply]
    recorded = _recorded_state(tmp_path / "recorded.json", server.url)
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0))])
    g.ledger_list(tmp_path / "l.txt", {10: g.TC_ML.format(0)}, last={10: 0})
    args = [a.format(state=tmp_path / "new.json", recorded=recorded, url=server.url, dump=tmp_path / "0.log",
                     ledgers=tmp_path / "l.txt") for a in command]
    result = runner.invoke(app, ["-u", server.url, "--request-timeout", "5", "--auth-params", f"token:{SECRET}",
                                 *args])
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    assert SECRET not in result.output
    if not _must_fail(reply, command):
        assert result.exit_code in (0, 1), result.output  # a reply this command may legitimately accept
        if result.exit_code == 0:
            return
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if command[0] == "transactions" and not lines and "\nNOT aborted (" in result.stdout:
        assert result.exit_code == 1, result.output  # the abort's account names each one it could not abort
        return
    if command[0] == "transactions":
        assert lines, result.output
        assert result.exit_code == 1, result.output
        assert len(lines) <= 2, result.stderr  # pulsar-admin's "<reason>" + "Reason: <reason>" / "Error connecting"
    else:
        # 3: cannot read the target; 1 only for a deliberate verdict of the procedure (e.g. "no coordinators")
        if command[0] == "doctor" and reply == "200 echoing our headers" and result.exit_code == 3 \
                and "not all checked" in result.stdout:
            return  # a settings object it can read: doctor judges what it could and says the rest went unchecked
        assert result.exit_code in (1, 3), result.output
        assert result.exit_code == 3 or reply in ("[] for an object", "error body echoing our headers"), result.output
        if result.exit_code == 1 and command[0] == "doctor":
            assert not lines and "NOT healthy" in result.stdout, result.output  # doctor's verdict is a report
        else:
            assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(len(line) < 600 for line in lines)


VOID = {"scale-transactionCoordinators", "abort-transaction"}  # POSTs whose reply body is not used
LISTS = {"coordinators-list", "list", "find-hanging", "abort"}  # an empty list is a fine answer
ANY_OBJECT = {"coordinator-internal-stats", "pending-ack-internal-stats",  # ledgers are optional in Pulsar's spec
              "buffer-snapshot-internal-stats", "coordinator-stats", "transaction-buffer-stats", "pending-ack-stats",
              "transaction-in-buffer-stats", "transaction-in-pending-ack-stats", "transaction-metadata",
              "slow-transactions", "position-stats-in-pending-ack"}  # printed as the broker sent them


def _must_fail(reply: str, command: list[str]) -> bool:
    if command[0] != "transactions":
        # nothing this stand-in says makes a downgrade or upgrade step succeed, a cluster healthy or an exposition
        return True
    name = command[1]
    if reply in ("[] for an object", ):
        return name not in VOID | LISTS
    if reply in ("null", "42", '"OK"'):
        return name not in VOID
    if reply == "internal stats without ledgers":  # also spec-valid slowTransactions: two entries with odd keys
        return name not in VOID | ANY_OBJECT | {"list", "find-hanging"}
    if reply == "200 echoing our headers":  # an object of settings, too: the batch-log switches may accept it
        return name not in VOID | ANY_OBJECT | {"set-txn-tc-batch-log", "set-txn-pending-ack-batch-log"}
    return True


# Commands that never talk to a Pulsar or a served engine over HTTP: they read files and engine directories
# (whose bad input has its own tests), so no broker reply can reach them.
NO_SERVER = {"target", "scan", "rehearse", "serve", "inspect entry", "downgrade reset",
             "engine init", "engine run", "engine dump", "engine set", "engine recover", "engine txn begin",
             "engine txn commit", "engine txn abort",
             # a running engine's own brokers, reached through its server.json, never the -u target
             "engine broker stop", "engine broker start", "engine broker restart",
             # contexts are kept in a local file; nothing is contacted
             "context add", "context use", "context list", "context show", "context remove"}

# Commands that run until stopped and must survive a bad reply rather than end with one line: their garbage replies
# (a login page, no clock, a coordinator that never answers) are fed in tests/test_exporter_rules.py.
POLLS_UNTIL_STOPPED = {"exporter"}


def test_every_command_is_in_the_table_or_known_not_to_talk_to_a_server():
    """A command added later must join COMMANDS above (or NO_SERVER, saying why): found by walking the tree."""
    import typer

    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                if not (path == [] and name == "txn"):  # the hidden alias of `transactions`
                    yield from walk(sub, [*path, name])
        else:
            yield " ".join(path)

    every = set(walk(typer.main.get_command(app), []))
    covered = {" ".join(c[:2]) if c[0] in ("transactions", "downgrade") else c[0] for c in COMMANDS}
    assert every - covered - NO_SERVER - POLLS_UNTIL_STOPPED == set(), "commands no bad reply is fed to"
    assert NO_SERVER <= every and not NO_SERVER & covered
