"""`txnadmin downgrade verify` proves something only about the cluster it is run against (issue #24, item 9).

An operator who mixes up staging and production runs verify with the other cluster's clean dumps: the tool must
refuse, record nothing, and say why. Through the CLI, on engine directories (`-u local:`) and over `serve`. And
what verify proves is folded into the verdict: batched dumps keep it unsafe, clean ones are recorded as clean.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import time

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

from downgrade_helpers import engine_traffic, fresh_engine, running
from serve_helpers import serving

runner = CliRunner()


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """Engine a with a recorded downgrade and three dumps of it (before `start`, and two after), engine b (another
    cluster under the same workload) with its own dump. Each test works on its own copy of a's checklist."""
    root = tmp_path_factory.mktemp("clusters")
    a, b = fresh_engine(root / "a"), fresh_engine(root / "b")
    engine_traffic(a)
    engine_traffic(b)

    def dump(d, name):
        return runner.invoke(app, ["engine", "dump", str(d), "--out", str(root / name)])

    assert dump(a, "a-before").exit_code == 0
    started = runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{a}", "--state",
                                  str(root / "checklist.json")])
    assert started.exit_code == 0, started.output
    assert dump(a, "a-after").exit_code == 0 and dump(b, "b-dump").exit_code == 0
    return root, a, b


def _checklist(clusters, tmp_path):
    root = clusters[0]
    shutil.copy(root / "checklist.json", tmp_path / "s.json")
    return tmp_path / "s.json"


def _verify(target, state, dump_dir, *extra, ledgers=None):
    args = ["downgrade", "verify", "-u", target, "--state", str(state), "--dumps", str(dump_dir / "ledgers"),
            "--engine", "python"]
    if ledgers is not False:
        args += ["--ledgers", str(ledgers or dump_dir / "ledgers.txt")]
    return runner.invoke(app, [*args, *extra])


def _coordinator_ledgers(engine_dir, tc_id=0) -> list[dict]:
    stats = runner.invoke(app, ["-u", f"local:{engine_dir}", "transactions", "coordinator-internal-stats", "-c",
                                str(tc_id)])
    assert stats.exit_code == 0, stats.output
    return json.loads(stats.stdout)["transactionLogStats"]["managedLedgerInternalStats"]["ledgers"]


def _one_error_line(result) -> str:
    assert "Traceback" not in result.output and (result.exception is None or isinstance(result.exception, SystemExit))
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("target: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_another_clusters_dump_and_list_are_refused_and_nothing_is_recorded(clusters, tmp_path):
    root, a, _b = clusters
    state = _checklist(clusters, tmp_path)
    before = state.read_bytes()
    result = _verify(f"local:{a}", state, root / "b-dump")
    assert result.exit_code == 3, result.output
    line = _one_error_line(result)
    # It names the list, the checklist, how many ledgers are missing and a few of them, and what to do.
    assert str(root / "b-dump" / "ledgers.txt") in line and str(state) in line and "listledgers -meta" in line
    count = re.search(r"(\d+) ledgers are live on the target .* lacks (\d+) of them", line)
    assert count and int(count.group(2)) >= 1, line
    named = re.findall(r"(\d+) of (__transaction_log_\d+|persistent://\S+?__transaction_pending_ack)", line)
    assert named and all(f"ledgerID: {lid}\n" not in (root / "b-dump" / "ledgers.txt").read_text()
                         for lid, _ in named), line
    assert state.read_bytes() == before
    # The same cluster's dump from before `start` is as wrong: the reloads opened ledgers it does not hold.
    old = _verify(f"local:{a}", state, root / "a-before")
    assert old.exit_code == 3 and "lacks" in _one_error_line(old), old.output
    assert state.read_bytes() == before


def test_this_clusters_dump_is_recorded_with_what_it_was_checked_against(clusters, tmp_path):
    root, a, _b = clusters
    state = _checklist(clusters, tmp_path)
    listing = root / "a-after" / "ledgers.txt"
    since = int(time.time() * 1000)
    result = _verify(f"local:{a}", state, root / "a-after", "-o", "json")
    until = int(time.time() * 1000)
    assert result.exit_code in (0, 1), result.output  # the scan's own verdict (batched ledgers may still be live)
    out = json.loads(result.stdout)
    recorded = json.loads(state.read_text())["verification"]
    assert {k: v for k, v in out.items() if k != "state"} == recorded
    assert recorded["verdict"] in ("clean", "batched")
    assert since <= recorded["verifiedAt"] <= until
    assert recorded["target"]["adminUrl"] == f"local:{a}"
    dumps = root / "a-after" / "ledgers"
    files = [p for p in dumps.rglob("*") if p.is_file()]
    assert recorded["dumps"] == [{"path": str(dumps), "files": len(files), "bytes": sum(p.stat().st_size
                                                                                          for p in files)}]
    assert recorded["ledgerList"] == {"path": str(listing), "bytes": listing.stat().st_size,
                                      "sha256": hashlib.sha256(listing.read_bytes()).hexdigest()}
    assert recorded["txnLedgers"] is None and recorded["liveLedgersChecked"] > 0
    status = runner.invoke(app, ["downgrade", "status", "-u", f"local:{a}", "--state", str(state), "-o", "json"])
    assert json.loads(status.stdout)["verification"] == recorded, status.output


def _rewrite(listing: str, lid: int, change) -> str:
    """The list with ledger ``lid``'s metadata line passed through ``change``."""
    lines = listing.splitlines(keepends=True)
    at = lines.index(f"ledgerID: {lid}\n") + 1
    changed = change(lines[at])
    assert changed != lines[at]
    return "".join(lines[:at] + [changed] + lines[at + 1:])


def test_a_list_with_this_clusters_ids_for_other_ledgers_is_refused(clusters, tmp_path):
    """Two clusters number their ledgers alike: the same id there may be another managed ledger's ledger, or one
    that closed with another number of entries. Such a list is not this cluster's."""
    root, a, _b = clusters
    state = _checklist(clusters, tmp_path)
    before = state.read_bytes()
    listing = (root / "a-after" / "ledgers.txt").read_text()
    ledgers = _coordinator_ledgers(a)
    closed = ledgers[0]["ledgerId"]  # the oldest: closed (start's reload opened a newer one)
    assert len(ledgers) > 1
    ours = base64.b64encode(b"pulsar/system/persistent/__transaction_log_0").decode()
    cases = []
    for theirs in ("public/default/persistent/orders", "pulsar/system/persistent/__transaction_log_1"):
        other_owner = tmp_path / f"owner-{len(cases)}.txt"  # a message ledger there; another coordinator's there
        encoded = base64.b64encode(theirs.encode()).decode()
        other_owner.write_text(_rewrite(listing, closed, lambda line, encoded=encoded: line.replace(ours, encoded)))
        cases.append((other_owner, f"{theirs} there, pulsar/system/persistent/__transaction_log_0 here"))
    other_size = tmp_path / "size.txt"
    other_size.write_text(_rewrite(listing, closed, lambda line: re.sub(
        r"lastEntryId=(\d+)", lambda m: f"lastEntryId={int(m.group(1)) + 1}", line)))
    cases.append((other_size, f"{ledgers[0]['entries'] + 1} entries there, {ledgers[0]['entries']} here"))
    for path, says in cases:
        result = _verify(f"local:{a}", state, root / "a-after", ledgers=path)
        assert result.exit_code == 3, result.output
        line = _one_error_line(result)
        assert f"{closed}: {says}" in line and "1 of them as other ledgers" in line, line
        assert state.read_bytes() == before


def test_txn_ledgers_must_name_every_live_ledger_of_the_recorded_logs(clusters, tmp_path):
    """Without metadata in the list, --txn-ledgers says which ledgers the scan holds to coverage: one of this
    cluster's live transaction ledgers left out is one the scan never checks."""
    root, a, _b = clusters
    state = _checklist(clusters, tmp_path)
    before = state.read_bytes()
    bare = tmp_path / "bare.txt"  # `listledgers` without -meta
    bare.write_text("".join(line for line in (root / "a-after" / "ledgers.txt").read_text().splitlines(True)
                            if line.startswith("ledgerID:")))
    left_out = _coordinator_ledgers(a)[0]["ledgerId"]
    every = json.loads(state.read_text())
    live = {lid for line in (root / "a-after" / "ledgers.txt").read_text().splitlines()
            for lid in re.findall(r"^ledgerID: (\d+)", line)}
    # The ids of every transaction ledger in the list, as an operator would collect them from the managed ledgers.
    txn = sorted(int(lid) for lid in live if _is_transaction_ledger(root / "a-after" / "ledgers.txt", int(lid)))
    assert left_out in txn and every["phase"] == "recorded"
    short = ",".join(str(lid) for lid in txn if lid != left_out)
    for ledgers, extra in ((bare, ["--txn-ledgers", short]), (False, ["--txn-ledgers", short])):
        result = _verify(f"local:{a}", state, root / "a-after", *extra, ledgers=ledgers)
        assert result.exit_code == 3, result.output
        line = _one_error_line(result)
        says = "--txn-ledgers lacks 1 of them" if ledgers is False else \
            "lists 1 of them without metadata and --txn-ledgers does not name them"
        assert says in line and f"({left_out} of __transaction_log_0)" in line, line
        assert state.read_bytes() == before
    named = _verify(f"local:{a}", state, root / "a-after", "--txn-ledgers", ",".join(map(str, txn)), "-o", "json",
                    ledgers=bare)
    assert named.exit_code in (0, 1), named.output
    assert json.loads(state.read_text())["verification"]["txnLedgers"] == ",".join(map(str, txn))


def _is_transaction_ledger(listing, lid: int) -> bool:
    from txnadmin.scan import read_ledger_list

    return read_ledger_list(listing)[lid].transaction_ledger


def test_a_garbage_or_unreadable_list_keeps_its_exit_codes_and_records_nothing(clusters, tmp_path):
    root, a, _b = clusters
    state = _checklist(clusters, tmp_path)
    before = state.read_bytes()
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(os.urandom(4096))
    bad_id = tmp_path / "bad-id.txt"
    bad_id.write_text("ledgerID: twelve\n")
    bare = tmp_path / "bare.txt"
    bare.write_text("ledgerID: 12\n")
    unreadable = tmp_path / "unreadable.txt"
    unreadable.write_text((root / "a-after" / "ledgers.txt").read_text())
    unreadable.chmod(0)
    cases = [(garbage, [], 3, "no `ledgerID:` lines"), (bad_id, [], 3, "bad-id.txt:1"),
             (bare, [], 3, "--txn-ledgers"), (tmp_path / "nope.txt", [], 3, "cannot read ledger list"),
             (tmp_path, [], 3, "cannot read ledger list"), (bare, ["--txn-ledgers", "ten"], 2, "--txn-ledgers")]
    if os.geteuid() != 0:  # root reads a file whatever its mode
        cases.append((unreadable, [], 3, "cannot read ledger list"))
    for listing, extra, code, says in cases:
        result = _verify(f"local:{a}", state, root / "a-after", *extra, ledgers=listing)
        assert result.exit_code == code, (listing, result.output)
        assert says in _one_error_line(result), (listing, result.stderr)
        assert state.read_bytes() == before


def test_verify_needs_a_named_target_and_the_checklists_own(clusters, tmp_path, monkeypatch):
    root, a, b = clusters
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    state = _checklist(clusters, tmp_path)
    before = state.read_bytes()
    unnamed = runner.invoke(app, ["downgrade", "verify", "--state", str(state), "--dumps",
                                  str(root / "a-after" / "ledgers"), "--ledgers", str(root / "a-after" / "ledgers.txt")])
    assert unnamed.exit_code == 2 and "downgrade verify needs a named target" in unnamed.stderr, unnamed.output
    # b's dumps checked against b: but the checklist is a's.
    other = _verify(f"local:{b}", state, root / "b-dump")
    assert other.exit_code == 3 and "recorded on another target" in _one_error_line(other), other.output
    assert state.read_bytes() == before


def test_over_http_the_same_refusal_and_the_same_record(clusters, tmp_path):
    """Through `serve`: verify reads the live ledgers over HTTP, from the URL the checklist was recorded on."""
    root, a, _b = clusters
    engine = tmp_path / "e"
    shutil.copytree(a, engine)  # a copy: serving reopens its stores, and the other tests read a as it was
    with serving(engine, tmp_path / "home") as (url, token):
        state = tmp_path / "http.json"
        auth = ["--auth-params", f"token:{token}"]
        started = runner.invoke(app, [*auth, "downgrade", "start", "--yes", "-u", url, "--state", str(state)])
        assert started.exit_code == 0, started.output
        before = state.read_bytes()
        refused = runner.invoke(app, [*auth, "downgrade", "verify", "-u", url, "--state", str(state), "--dumps",
                                      str(root / "b-dump" / "ledgers"), "--ledgers", str(root / "b-dump" / "ledgers.txt"),
                                      "--engine", "python"])
        assert refused.exit_code == 3 and "lacks" in _one_error_line(refused), refused.output
        assert state.read_bytes() == before
        now = tmp_path / "now"  # the served engine's ledgers as they are after this start's reloads
        assert runner.invoke(app, ["engine", "dump", str(engine), "--out", str(now)]).exit_code == 0
        accepted = runner.invoke(app, [*auth, "downgrade", "verify", "-u", url, "--state", str(state), "--dumps",
                                       str(now / "ledgers"), "--ledgers", str(now / "ledgers.txt"), "--engine",
                                       "python", "-o", "json"])
        assert accepted.exit_code in (0, 1), accepted.output
        recorded = json.loads(state.read_text())["verification"]
        assert recorded["target"]["adminUrl"] == url and recorded["liveLedgersChecked"] > 0


def test_a_dump_directorys_own_list_is_never_taken_unchecked(clusters, tmp_path):
    """`scan DUMPDIR` judges by the ledgers.txt that `engine dump` wrote there; verify must not: only a list named
    with --ledgers is checked against the target, so another cluster's clean-looking dump directory proves nothing."""
    root, a, _b = clusters
    state = _checklist(clusters, tmp_path)
    result = runner.invoke(app, ["downgrade", "verify", "-u", f"local:{a}", "--state", str(state), "--dumps",
                                 str(root / "b-dump"), "--engine", "python", "-o", "json"])
    assert result.exit_code == 1, result.output  # b's batched entries, in ledgers nobody checked are live here
    out = json.loads(result.stdout)
    assert out["verdict"] == "batched" and out["ledgerList"] is None, out
    assert any(r.startswith("no ledger list (--ledgers)") for r in out["reasons"]), out  # judged without one


@pytest.mark.slow
def test_verify_folds_the_scan_into_the_verdict(tmp_path):
    d = fresh_engine(tmp_path)
    state = tmp_path / "s.json"
    engine_traffic(d)
    with running(d):
        assert runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state",
                                   str(state)]).exit_code == 0
    # Right after `start`, the batched ledgers are still live: the dump holds batched entries in them. (Taken after
    # `start`, whose reloads open new ledgers: a dump from before lacks them, and verify refuses it.)
    assert runner.invoke(app, ["engine", "dump", str(d), "--out", str(tmp_path / "before")]).exit_code == 0
    dirty = runner.invoke(app, ["downgrade", "verify", "-u", f"local:{d}", "--dumps", str(tmp_path / "before" /
                                "ledgers"), "--ledgers", str(tmp_path / "before" / "ledgers.txt"), "--state",
                                str(state), "--engine", "python", "-o", "json"])
    assert dirty.exit_code == 1 and json.loads(dirty.stdout)["verdict"] == "batched"
    engine_traffic(d, "3")
    status = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert json.loads(status.stdout)["safe"] is False  # the recorded scan said batched
    # More traffic rolls and trims the batched ledgers; how much depends on the machine's speed, so load in rounds
    # until the dump proves clean (bounded) rather than for a fixed time.
    for attempt in range(8):
        after = tmp_path / f"after-{attempt}"
        assert runner.invoke(app, ["engine", "dump", str(d), "--out", str(after)]).exit_code == 0
        clean = runner.invoke(app, ["downgrade", "verify", "-u", f"local:{d}", "--dumps", str(after / "ledgers"),
                                    "--ledgers", str(after / "ledgers.txt"), "--state", str(state), "--engine",
                                    "python"])
        if clean.exit_code != 1:
            break
        engine_traffic(d, "2")
    assert clean.exit_code == 0, clean.output
    final = runner.invoke(app, ["downgrade", "status", "-u", f"local:{d}", "--state", str(state), "-o", "json"])
    assert json.loads(final.stdout)["verification"]["verdict"] == "clean"
    assert final.exit_code == 1  # clean dumps, but the engine restarted (reopened) since recording: not a proof
