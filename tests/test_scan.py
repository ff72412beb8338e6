"""`txnadmin scan` on fixtures built from the published formats, with both engines."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.scan import REGISTRY, DumpFormat, Finding, register, run_scan, unregister

import dumpgen as g

runner = CliRunner()


@pytest.fixture
def bookie(tmp_path):
    """Two entry logs: TC log 10 (batched + plain), a pending-ack ledger 11, a message ledger 12 full of 0E 01,
    trimmed TC ledger 9 (batched, not live), and a cursor ledger 13 (not judged)."""
    d = tmp_path / "bookie" / "current"
    d.mkdir(parents=True)
    g.write_entry_log(d / "0.log", [
        (9, 0, g.batched(3)), (10, 0, g.batched(2, 10)), (12, 0, g.pulsar_message(0)), (10, 1, g.plain(20)),
        (11, 0, g.ack_batch([g.ack_record(1)])),
    ])
    g.write_entry_log(d / "1.log", [(12, i, g.pulsar_message(i)) for i in range(1, 50)]
                      + [(10, 2, g.batched(1, 30)), (13, 0, g.batched(2))])
    g.ledger_list(tmp_path / "ledgers.txt", {10: g.TC_ML.format(1), 11: g.ACK_ML, 12: g.MSG_ML, 13: g.TC_ML.format(1)},
                  cursor={13: "transaction.subscription"})
    return tmp_path


@pytest.mark.parametrize("engine", ["python", pytest.param("spark", marks=pytest.mark.spark)])
def test_entry_logs_with_live_list(bookie, engine, request):
    if engine == "spark":
        request.getfixturevalue("spark")
    result = run_scan([str(bookie / "bookie")], bookie / "ledgers.txt", engine=engine)
    assert result.engine.startswith(engine)
    assert result.verdict == "batched"
    by_id = {l["ledgerId"]: l for l in result.ledgers}
    assert by_id[10]["batchedEntries"] == 2 and by_id[10]["entries"] == 3  # a batch of one still counts
    assert by_id[11]["batchedEntries"] == 1
    assert result.live_batched_entries == 3
    assert 12 not in by_id or by_id[12]["transactionLedger"] is False  # 0E 01 messages never count
    assert 13 not in by_id  # cursor ledgers are skipped
    assert [d["ledgerId"] for d in result.dead_ledgers] == [9]  # trimmed: still in the entry log, reported apart
    assert result.dead_ledgers[0]["batchedEntries"] == 1


def test_trimmed_ledger_is_reported_apart_without_the_filter(bookie):
    from txnadmin.scan.job import collect_inputs, judge, scan_in_process
    from txnadmin.scan.ledgers import read_ledger_list

    from txnadmin.scan.formats import ReadPlan

    inputs, notes = collect_inputs([str(bookie / "bookie")])
    tally = scan_in_process(inputs, ReadPlan())
    result = judge(tally, read_ledger_list(bookie / "ledgers.txt"), "python", inputs, notes)
    dead = {d["ledgerId"]: d for d in result.dead_ledgers}
    assert dead[9]["batchedEntries"] == 1 and dead[9]["live"] is False
    assert result.live_batched_entries == 3


def test_clean_when_only_plain_entries_remain(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(10, i, g.plain(i)) for i in range(5)]
                      + [(12, i, g.pulsar_message(i)) for i in range(5)])
    g.ledger_list(tmp_path / "l.txt", {10: g.TC_ML.format(0), 12: g.MSG_ML}, last={10: 4, 12: 4})
    result = runner.invoke(app, ["scan", str(tmp_path / "0.log"), "--ledgers", str(tmp_path / "l.txt"), "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["verdict"] == "clean" and out["liveBatchedEntries"] == 0
    assert {"ledgerId", "managedLedger", "live", "transactionLedger", "expectedEntries", "foundEntries", "missing",
            "batchedEntries", "verifiedEntries"} <= set(out["ledgers"][0])
    tc = out["ledgers"][0]
    assert tc["expectedEntries"] == tc["foundEntries"] == tc["verifiedEntries"] == 5 and tc["missing"] == []


def test_cli_exit_1_and_report_jsonl(bookie, tmp_path):
    report = tmp_path / "findings.jsonl"
    result = runner.invoke(app, ["scan", str(bookie / "bookie"), "--ledgers", str(bookie / "ledgers.txt"),
                                 "--engine", "python", "--report", str(report), "-o", "json"])
    assert result.exit_code == 1
    rows = [json.loads(l) for l in report.read_text().splitlines()]
    assert sum(r["form"] == "batched" and r["ledgerId"] != 9 for r in rows) == 3  # 9 is trimmed


def test_report_parquet(bookie, tmp_path):
    import pyarrow.parquet as pq

    run_scan([str(bookie / "bookie")], bookie / "ledgers.txt", engine="python", report=tmp_path / "f.parquet")
    table = pq.read_table(tmp_path / "f.parquet")
    assert set(table.column_names) >= {"file", "offset", "ledgerId", "entryId", "form"}


def test_truncated_and_corrupt_files_are_located_and_never_clean(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(1)), (10, 1, g.plain(2))], truncate_last=10)
    (tmp_path / "bad.log").write_bytes(b"BKLO" + b"\x00" * 1020 + b"\x7f\xff\xff\xff" + b"junk")
    g.ledger_list(tmp_path / "l.txt", {10: g.TC_ML.format(0)}, last={10: 1})
    result = run_scan([str(tmp_path / "0.log"), str(tmp_path / "bad.log")], tmp_path / "l.txt", engine="python")
    assert result.verdict == "incomplete" and result.exit_code == 3
    tc = result.ledgers[0]
    assert tc["foundEntries"] == 1 and tc["missing"] == [[1, 1]]
    assert any("ledger 10" in r and "entries 1 failed" in r for r in result.reasons), result.reasons
    assert result.unreadable_count == 1 and result.unreadable[0]["file"].endswith("bad.log")
    assert result.unreadable[0]["offset"] == 1024


def test_the_magic_decides_not_the_decoder(tmp_path):
    """Unknown versions and undecodable bodies behind 0E 01 are batched entries, never a lesser finding."""
    g.write_entry_log(tmp_path / "0.log", [(10, 0, b"\x0e\x01\x00\x02" + g.batched(1)[4:]),
                                           (10, 1, b"\x0e\x01\x00\x01\xff\xff")])
    g.ledger_list(tmp_path / "l.txt", {10: g.TC_ML.format(0)}, last={10: 1})
    result = run_scan([str(tmp_path / "0.log")], tmp_path / "l.txt", engine="python")
    assert result.verdict == "batched" and result.live_batched_entries == 2
    details = [x["detail"] for x in result.ledgers[0]["examples"]]
    assert any("unknown batch version 2" in d for d in details)
    assert result.ledgers[0]["examples"][0]["offset"] == 1024


def test_nothing_readable_is_exit_3(tmp_path):
    (tmp_path / "x.log").write_bytes(b"BKLO")
    result = runner.invoke(app, ["scan", str(tmp_path / "x.log")])
    assert result.exit_code == 3 and "nothing readable" in result.stderr
    missing = runner.invoke(app, ["scan", str(tmp_path / "absent")])
    assert missing.exit_code == 3 and "no such file" in missing.stderr
    unknown = runner.invoke(app, ["scan", str(tmp_path / "x.log"), "--format", "tape"])
    assert unknown.exit_code == 2 and "unknown" in unknown.stderr


ENTRIES = [(10, 0, g.batched(2)), (10, 1, g.plain(5)), (10, 2, b""), (12, 0, g.pulsar_message(1))]


@pytest.mark.parametrize("name, text, fmt", [
    ("hex417.txt", g.readledger_hex(ENTRIES, "4.17").encode(), "readledger-hex"),
    ("hex418.txt", g.readledger_hex(ENTRIES, "4.18").encode(), "readledger-hex"),
    ("readlog.txt", g.readlog(ENTRIES[:2]).encode(), "readlog"),
    ("bookie.txt", g.readledger_bookie(ENTRIES[:2]).encode(), "readledger-bookie"),
])
def test_text_dumps_are_detected_and_exact(tmp_path, name, text, fmt):
    from txnadmin.scan import detect

    (tmp_path / name).write_bytes(text)
    assert detect(str(tmp_path / name)).name == fmt
    g.ledger_list(tmp_path / "l.txt", {10: g.TC_ML.format(0), 12: g.MSG_ML})
    result = run_scan([str(tmp_path / name)], tmp_path / "l.txt", engine="python")
    tc = next(l for l in result.ledgers if l["ledgerId"] == 10)
    assert tc["batchedEntries"] == 1 and result.verdict == "batched", result.to_json()


def test_string_dump_checks_the_prefix_only(tmp_path):
    (tmp_path / "s.txt").write_bytes(g.readledger_string(ENTRIES[:2]))
    from txnadmin.scan import detect

    assert detect(str(tmp_path / "s.txt")).name == "readledger-string"
    g.ledger_list(tmp_path / "l.txt", {10: g.TC_ML.format(0)})
    result = runner.invoke(app, ["scan", str(tmp_path / "s.txt"), "--ledgers", str(tmp_path / "l.txt")])
    assert result.exit_code == 1
    assert "not recoverable" in result.stdout


def test_a_format_registered_by_a_plugin_is_used(tmp_path):
    def read(path, wanted):
        for line in open(path).read().splitlines()[1:]:  # after the FAKE magic line
            lid, eid, form = line.split()
            yield Finding(path, 0, int(lid), int(eid), form, "", "")

    register(DumpFormat("fake", "test format", lambda head: 99 if head.startswith(b"FAKE") else 0, read))
    try:
        (tmp_path / "f.txt").write_text("FAKE\n10 0 plain\n10 1 batched\n")
        g.ledger_list(tmp_path / "l.txt", {10: g.TC_ML.format(3)})
        result = run_scan([str(tmp_path / "f.txt")], tmp_path / "l.txt", engine="python")
        assert result.live_batched_entries == 1 and result.inputs[0]["format"] == "fake"
    finally:
        unregister("fake")
    assert "fake" not in REGISTRY


@pytest.mark.spark
def test_engine_dump_then_scan_agrees_with_the_engine(tmp_path, spark):
    from txnadmin.codec import decode_entry
    from txnadmin.engine.storage import LedgerStorage

    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "2", "--set", "transactionLogBatchedWriteEnabled=true",
                               "--set", "transactionPendingAckBatchedWriteEnabled=true",
                               "--set", "managedLedgerMaxEntriesPerLedger=30",
                               "--set", "managedLedgerMinLedgerRolloverTimeMinutes=0"]).exit_code == 0
    assert runner.invoke(app, ["engine", "run", str(d), "--duration", "1.5", "--rate", "0", "-o", "json"]).exit_code == 0
    assert runner.invoke(app, ["engine", "dump", str(d), "--out", str(tmp_path / "dump")]).exit_code == 0
    storage = LedgerStorage.open(d, read_only=True)
    truth = {}
    for meta in storage.list_ledgers():
        ml = meta.custom_metadata.get("pulsar/managed-ledger", "")
        if "__transaction_log_" in ml or ml.endswith("__transaction_pending_ack"):
            truth[meta.ledger_id] = sum(decode_entry(e).batched for e in
                                        storage.read_entries(meta.ledger_id, 0, meta.last_entry_id)) if meta.entries else 0
    storage.close()
    assert sum(truth.values()) > 0
    for engine in ("python", "spark"):
        result = run_scan([str(tmp_path / "dump" / "ledgers")], tmp_path / "dump" / "ledgers.txt", engine=engine)
        scanned = {l["ledgerId"]: l["batchedEntries"] for l in result.ledgers if l["transactionLedger"]}
        assert {k: v for k, v in scanned.items() if v} == {k: v for k, v in truth.items() if v}


def test_without_a_ledger_list_messages_never_count_and_the_best_is_incomplete(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(12, i, g.pulsar_message(i)) for i in range(200)]
                      + [(10, 0, g.plain(1))])
    result = run_scan([str(tmp_path / "0.log")], engine="python")
    assert result.verdict == "incomplete" and result.live_batched_entries == 0
    assert "listledgers -meta" in result.reasons[0]
    assert not any(l["transactionLedger"] for l in result.ledgers)
    g.write_entry_log(tmp_path / "1.log", [(10, 1, g.batched(2))])
    assert run_scan([str(tmp_path / "1.log")], engine="python").verdict == "batched"


@pytest.mark.spark
def test_both_engines_give_identical_reports(tmp_path, spark, monkeypatch):
    """Same dumps, same list: the reports differ only in the engine field (damage, replicas, formats, coverage),
    also when the operator names the dumps with a relative path (executors need absolute ones)."""
    monkeypatch.chdir(tmp_path)
    d = tmp_path / "dumps"
    d.mkdir()
    g.write_entry_log(d / "0.log", [(10, i, g.plain(i)) for i in range(6)] + [(11, 0, g.batched(2))],
                      corrupt={(10, 3)})
    g.write_entry_log(d / "1.log", [(10, i, g.plain(i)) for i in range(4)] + [(12, 0, g.pulsar_message(0)),
                                                                               (9, 0, g.batched(1))])
    g.write_entry_log(d / "2.log", [(13, i, g.plain(i)) for i in range(3)], truncate_last=5)
    (d / "hex.txt").write_text(g.readledger_hex([(14, 0, g.batched(1)), (14, 1, g.plain(1))], "4.18"))
    (d / "junk.log").write_bytes(b"BKLO" + bytes(1020) + b"\x00\x00\x00\x05abc")
    (d / "readlog.txt").write_text(g.readlog([(15, 0, g.plain(0)), (15, 1, g.plain(1))], "4.18"))
    (d / "bookie.txt").write_text(g.readledger_bookie([(16, 0, g.plain(0))], "4.17"))
    (d / "string.txt").write_bytes(g.readledger_string([(17, 0, g.plain(0))], "4.14"))
    g.write_direct_entry_log(d / "direct.log", [(18, i, g.plain(i)) for i in range(3)])
    g.ledger_list(tmp_path / "l.txt", {10: g.TC_ML.format(0), 11: g.ACK_ML, 12: g.MSG_ML, 13: g.TC_ML.format(1),
                                       14: g.TC_ML.format(2), 15: g.TC_ML.format(3), 16: g.TC_ML.format(4),
                                       17: g.TC_ML.format(5), 18: g.TC_ML.format(6)},
                  last={10: 6, 11: 0, 12: 0, 13: 2, 14: 1, 15: 1, 16: 0, 17: 0, 18: 2}, prefix="4.18")
    reports = {}
    for engine in ("python", "spark"):
        out = run_scan(["dumps"], tmp_path / "l.txt", engine=engine).to_json()
        assert out.pop("engine").startswith(engine)
        reports[engine] = out
    assert reports["python"] == reports["spark"]
    assert reports["python"]["verdict"] == "batched" and reports["python"]["liveBatchedEntries"] == 2
    by_id = {l["ledgerId"]: l for l in reports["python"]["ledgers"]}
    assert by_id[10]["missing"] == [[6, 6]] and by_id[13]["missing"] == [[2, 2]]
    assert all(by_id[lid]["missing"] == [] and by_id[lid]["foundEntries"] for lid in (15, 16, 17, 18)), by_id
    assert {i["format"] for i in reports["python"]["inputs"]} == {"entrylog", "readledger-hex", "readlog",
                                                                  "readledger-bookie", "readledger-string"}
    spark_report = tmp_path / "findings"
    run_scan([str(d)], tmp_path / "l.txt", engine="spark", report=spark_report)
    rows = [json.loads(line) for part in spark_report.glob("part-*") for line in part.read_text().splitlines()]
    assert sum(r["form"] == "batched" and r["ledgerId"] in (11, 14) for r in rows) == 2
