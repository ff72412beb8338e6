"""Trying to make `txnadmin scan` say "clean" without proof: each case here once did, on dumps written from the
published formats (tests/dumpgen.py), and must now say batched (exit 1) or incomplete (exit 3), with the reason."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

import dumpgen as g

runner = CliRunner()
TC = g.TC_ML.format(1)


def scan(*args: str):
    result = runner.invoke(app, ["scan", *map(str, args), "--engine", "python", "-o", "json"])
    out = json.loads(result.stdout) if result.stdout.startswith("{") else None
    return result, out


def ledger(out: dict, lid: int) -> dict:
    return next(l for l in out["ledgers"] if l["ledgerId"] == lid)


def test_a_torn_entry_log_inside_a_live_transaction_ledger_is_incomplete(tmp_path):
    # Entry 2 is a batched entry whose tail was not copied: its header is there, its body is not.
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (10, 1, g.plain(1)), (10, 2, g.batched(3))],
                      truncate_last=20)
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 2})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and out["verdict"] == "incomplete"
    tc = ledger(out, 10)
    assert tc["expectedEntries"] == 3 and tc["foundEntries"] == 2 and tc["missing"] == [[2, 2]]
    assert any("ledger 10" in r and "0.log@" in r and "torn" in r for r in out["reasons"]), out["reasons"]


@pytest.mark.parametrize("finished", [True, False])
def test_direct_io_entry_logs_are_read(tmp_path, finished):
    """DirectEntryLogger files (header block with a dummy record, 0xF0 padding at each flush, zeroed preallocated
    tail) are entry logs too: read to the end, not stopped at the first padding as damage."""
    entries = [(10, 0, g.plain(0)), (12, 0, g.pulsar_message(0)), (10, 1, g.plain(1)), (10, 2, g.batched(2)),
               (12, 1, g.pulsar_message(1))]
    g.write_direct_entry_log(tmp_path / "0.log", entries, finished=finished)
    g.ledger_list(tmp_path / "l.txt", {10: TC, 12: g.MSG_ML}, last={10: 2, 12: 1})
    from txnadmin.scan import detect

    assert detect(str(tmp_path / "0.log")).name == "entrylog"
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 1 and out["liveBatchedEntries"] == 1, out
    assert ledger(out, 10)["foundEntries"] == 3 and ledger(out, 10)["verifiedEntries"] == 3
    assert out["unreadable"] == 0 and out["reasons"] == [], out["reasons"]
    g.write_direct_entry_log(tmp_path / "1.log", entries[:3], finished=finished)
    g.ledger_list(tmp_path / "l1.txt", {10: TC, 12: g.MSG_ML}, last={10: 1, 12: 0})
    result, out = scan(tmp_path / "1.log", "--ledgers", tmp_path / "l1.txt")
    assert result.exit_code == 0, out


def test_direct_io_padding_or_tail_that_is_not_padding_is_damage(tmp_path):
    g.write_direct_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (10, 1, g.plain(1))], flush_every=1)
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 1})
    data = bytearray((tmp_path / "0.log").read_bytes())
    first_pad = data.index(b"\xf0\xf0\xf0\xf0", 4096)
    bad = bytearray(data)
    bad[first_pad + 100] = 0x00  # padding with a hole: not what DirectWriter writes
    (tmp_path / "bad.log").write_bytes(bytes(bad))
    result, out = scan(tmp_path / "bad.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and out["unreadable"] >= 1, out
    tail = bytearray(data)
    tail[-10] = 0x07  # something after the zeroed tail: not the end of the data
    (tmp_path / "tail.log").write_bytes(bytes(tail))
    result, out = scan(tmp_path / "tail.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3, out


def test_an_entry_log_with_a_damaged_header_in_a_bookie_directory_is_not_skipped(tmp_path):
    # current/1.log lost its BKLO magic: it no longer sniffs as any format, and a directory walk skips such files
    # with a note. But its name says entry log, and it holds the tail of open ledger 10: the scan must say so.
    cur = tmp_path / "bookie" / "current"
    (cur / "ledgers").mkdir(parents=True)
    g.write_entry_log(cur / "0.log", [(10, 0, g.plain(0)), (10, 1, g.plain(1))])
    g.write_entry_log(cur / "1.log", [(10, 2, g.batched(1))])
    data = bytearray((cur / "1.log").read_bytes())
    data[0] = 0
    (cur / "1.log").write_bytes(bytes(data))
    (cur / "ledgers" / "CURRENT").write_text("MANIFEST-000005\n")  # DbLedgerStorage's RocksDB: its WAL is NNN.log
    (cur / "ledgers" / "000004.log").write_bytes(b"\x01\x02rocksdb wal")
    (cur / "lastMark").write_bytes(bytes(16))
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: None})
    result, out = scan(tmp_path / "bookie", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and out["verdict"] == "incomplete", out
    assert out["unreadableLocations"][0]["file"].endswith("current/1.log"), out["unreadableLocations"]
    assert "BKLO" in out["unreadableLocations"][0]["detail"]
    assert any("000004.log" in n for n in out["notes"]) and any("lastMark" in n for n in out["notes"])


def test_a_digest_mismatch_is_incomplete_with_ledger_entry_file_and_offset(tmp_path):
    # A damaged first byte turns the batch magic 0E into 4E: read without the digest it is a plain entry.
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (10, 1, g.batched(2))], corrupt={(10, 1)})
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 1})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and out["verdict"] == "incomplete"
    tc = ledger(out, 10)
    assert tc["missing"] == [[1, 1]] and tc["verifiedEntries"] == 1
    bad = [x for x in tc["examples"] if x["form"] == "bad-digest"]
    assert bad and bad[0]["entryId"] == 1 and bad[0]["offset"] > 1024 and bad[0]["file"].endswith("0.log")
    assert "CRC32C digest mismatch" in bad[0]["detail"]


def test_a_batched_entry_with_an_unknown_field_is_batched_and_shows_the_field(tmp_path):
    field13 = bytes([13 << 3 | 2]) + b"\x06client"  # PIP-255's proposed clientName, unknown to the codec
    payload = g.raw_batch([g.raw_txn_record(7, field13)])
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (10, 1, payload)])
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 1})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 1 and out["verdict"] == "batched" and out["liveBatchedEntries"] == 1
    assert "unknown fields 13" in ledger(out, 10)["examples"][0]["detail"]


@pytest.mark.parametrize("kind", ["CRC32", "MAC", "DUMMY"])
def test_other_digest_types_are_read_by_the_metadata(tmp_path, kind):
    entries = [(10, 0, g.plain(0)), (10, 1, g.raw_batch([g.raw_txn_record(1)])), (10, 2, g.plain(2))]
    g.write_entry_log(tmp_path / "0.log", entries, digests={10: kind}, password=b"secret")
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 2}, digest_type=kind, password=b"secret")
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 1 and out["liveBatchedEntries"] == 1, out
    tc = ledger(out, 10)
    assert tc["foundEntries"] == 3 and tc["digestType"] == kind
    assert tc["verifiedEntries"] == (0 if kind == "DUMMY" else 3)  # DUMMY has nothing to verify: not a failure
    # Plain only: clean, with every entry verified where the digest allows.
    g.write_entry_log(tmp_path / "1.log", [(11, i, g.plain(i)) for i in range(3)], digests={11: kind},
                      password=b"secret")
    g.ledger_list(tmp_path / "l1.txt", {11: TC}, last={11: 2}, digest_type=kind, password=b"secret")
    result, out = scan(tmp_path / "1.log", "--ledgers", tmp_path / "l1.txt")
    assert result.exit_code == 0 and out["verdict"] == "clean", out


def test_crc32_ledgers_damaged_by_one_byte_fail_their_digest(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.batched(1))], digests={10: "CRC32"}, corrupt={(10, 0)})
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 0}, digest_type="CRC32")
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and "CRC32 digest mismatch" in ledger(out, 10)["examples"][0]["detail"]


def test_without_metadata_the_digest_is_detected_but_never_weakened(tmp_path):
    """No list: CRC32 entries are detected as such; a damaged entry is never re-read as DUMMY (no digest)."""
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.batched(1)), (10, 1, g.batched(1))], digests={10: "CRC32"},
                      corrupt={(10, 1)})
    result, out = scan(tmp_path / "0.log", "--txn-ledgers", "10")
    assert result.exit_code == 1  # entry 0 is a verified batch
    tc = ledger(out, 10)
    assert tc["batchedEntries"] == 1 and tc["missing"] == [[1, 1]]
    assert any(x["form"] == "bad-digest" and x["entryId"] == 1 for x in tc["examples"])


def test_a_damaged_first_entry_is_never_read_as_dummy(tmp_path):
    # No metadata names the digest and the ledger's first entry is damaged: no type verifies it. DUMMY would
    # (it checks nothing) and would read the digest bytes as the payload: a plain entry. It must fail instead.
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.batched(1)), (10, 1, g.plain(1))], corrupt={(10, 0)})
    g.ledger_list(tmp_path / "l.txt", {10: TC}, meta=False)
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10")
    assert result.exit_code == 3 and ledger(out, 10)["missing"] == [[0, 0]], out
    assert "no digest type verifies" in ledger(out, 10)["examples"][0]["detail"]


def test_a_detected_digest_type_is_held_to_across_entries_and_files(tmp_path):
    # Without metadata, ledger 10's first entry verifies as MAC; BookKeeper keeps one type per ledger, so an entry
    # that only a weaker type (CRC32C) verifies is not accepted, whether in the same file or another bookie's.
    digest = {(10, 0): "MAC", (10, 1): "CRC32C", (10, 2): "MAC"}
    g.write_entry_log(tmp_path / "0.log", [(10, i, g.plain(i)) for i in range(3)], digests=digest)
    g.ledger_list(tmp_path / "l.txt", {10: TC}, meta=False)
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10")
    assert result.exit_code == 3 and ledger(out, 10)["missing"] == [[1, 1]], out
    assert any(x["entryId"] == 1 and x["form"] == "bad-digest" for x in ledger(out, 10)["examples"])
    (tmp_path / "b").mkdir()
    g.write_entry_log(tmp_path / "b" / "0.log", [(10, 0, g.plain(0)), (10, 2, g.plain(2))], digests={10: "MAC"})
    g.write_entry_log(tmp_path / "b" / "1.log", [(10, 1, g.plain(1))], digests={10: "CRC32C"})
    result, out = scan(tmp_path / "b", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10")
    assert result.exit_code == 3, out
    assert any("ledger 10 " in r and "MAC" in r and "CRC32C" in r for r in out["reasons"]), out["reasons"]
    g.write_entry_log(tmp_path / "b" / "1.log", [(10, 1, g.plain(1))], digests={10: "MAC"})
    result, out = scan(tmp_path / "b", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10")
    assert result.exit_code == 0, out


def test_a_list_without_meta_is_refused_with_the_fix(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (11, 0, g.batched(2))])
    g.ledger_list(tmp_path / "l.txt", {10: TC, 11: g.ACK_ML}, meta=False)
    result = runner.invoke(app, ["scan", str(tmp_path / "0.log"), "--ledgers", str(tmp_path / "l.txt")])
    assert result.exit_code == 3
    assert "listledgers -meta" in result.stderr and "--txn-ledgers" in result.stderr
    assert "Traceback" not in result.output
    # Naming the transaction ledgers is the other fix; the list still says which ledgers are live.
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10,11")
    assert result.exit_code == 1 and out["liveBatchedEntries"] == 1 and out["txnLedgersNamed"] == [10, 11]


def test_a_transaction_ledger_left_out_of_txn_ledgers_still_counts(tmp_path):
    # A list without -meta cannot tell ledger 11 apart; the operator named only 10. Ledger 11's entry is a PIP-160
    # batch that decodes as a pending-ack log's: that is evidence, as it is without any list, never skipped unread.
    ack = g.raw_batch([bytes([0x08, 0x00, 0x10, 0x01, 0x18, 0x01])])
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (11, 0, ack), (12, 0, g.pulsar_message(0))])
    g.ledger_list(tmp_path / "l.txt", {10: TC, 11: g.ACK_ML, 12: g.MSG_ML}, meta=False)
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10")
    assert result.exit_code == 1 and out["verdict"] == "batched" and out["liveBatchedEntries"] == 1, out
    assert ledger(out, 11)["transactionLedger"] is True and ledger(out, 11)["live"] is True
    assert ledger(out, 12)["transactionLedger"] is None  # a message's 0E 01 proves nothing either way
    g.write_entry_log(tmp_path / "1.log", [(10, 0, g.plain(0)), (12, 0, g.pulsar_message(0))])
    result, out = scan(tmp_path / "1.log", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10")
    assert result.exit_code == 0, out


def test_no_ledger_list_at_all_is_never_clean(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(10, i, g.plain(i)) for i in range(3)])
    result, out = scan(tmp_path / "0.log")
    assert result.exit_code == 3 and out["verdict"] == "incomplete" and not out["ledgerListGiven"]
    result, out = scan(tmp_path / "0.log", "--txn-ledgers", "10")
    assert result.exit_code == 3 and out["verdict"] == "incomplete"


def test_dumps_without_any_transaction_ledger_entry_say_so(tmp_path):
    # Only a message ledger's entries (skipped by id) and one open transaction ledger with nothing in the dumps:
    # no evidence at all. Exit 3 naming the judged ledgers, not "nothing readable" about files that were read.
    g.write_entry_log(tmp_path / "0.log", [(12, i, g.pulsar_message(i)) for i in range(5)])
    g.ledger_list(tmp_path / "l.txt", {10: TC, 12: g.MSG_ML}, last={10: None, 12: 4})
    result = runner.invoke(app, ["scan", str(tmp_path / "0.log"), "--ledgers", str(tmp_path / "l.txt")])
    assert result.exit_code == 3 and "no entry of any of the 1 transaction ledgers" in result.stderr, result.output
    assert "ensembles" in result.stderr and "Traceback" not in result.output


def test_entries_missing_from_every_dump_are_incomplete(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(10, i, g.plain(i)) for i in (0, 1, 2)])
    g.ledger_list(tmp_path / "l.txt", {10: TC, 11: g.ACK_ML}, last={10: 5, 11: 0})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3
    assert ledger(out, 10)["missing"] == [[3, 5]] and ledger(out, 10)["expectedEntries"] == 6
    assert ledger(out, 11)["foundEntries"] == 0 and ledger(out, 11)["missing"] == [[0, 0]]  # not in any dump
    assert any("entries 3-5 are in no dump" in r for r in out["reasons"])


def test_entries_past_a_closed_ledgers_last_entry_are_not_part_of_it(tmp_path):
    # Entry 2 reached a bookie but was never confirmed: recovery closed the ledger at 1, and no reader ever reads it.
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (10, 1, g.plain(1)), (10, 2, g.batched(1))])
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 1})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 0 and out["verdict"] == "clean", out
    assert ledger(out, 10)["batchedEntries"] == 0 and ledger(out, 10)["foundEntries"] == 2
    assert any("past lastEntryId 1" in n and "ledger 10" in n for n in out["notes"]), out["notes"]
    # A damaged copy past the end is not part of the ledger either, but a failed digest may hide another ledger's
    # entry (the header is what failed): that still blocks clean.
    g.write_entry_log(tmp_path / "1.log", [(10, 0, g.plain(0)), (10, 1, g.plain(1)), (10, 2, g.batched(1))],
                      corrupt={(10, 2)})
    result, out = scan(tmp_path / "1.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3, out


def test_open_ledgers_must_be_contiguous(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(10, i, g.plain(i)) for i in (0, 1, 3)])
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: None})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and ledger(out, 10)["missing"] == [[2, 2]]
    assert ledger(out, 10)["state"] == "OPEN" and ledger(out, 10)["expectedEntries"] is None


def test_ledgers_named_with_txn_ledgers_must_be_contiguous(tmp_path):
    # A list without -meta gives no lastEntryId: a named ledger's entries 0..the highest found must all be there.
    g.write_entry_log(tmp_path / "0.log", [(10, i, g.plain(i)) for i in (0, 1, 3)])
    g.ledger_list(tmp_path / "l.txt", {10: TC}, meta=False)
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10")
    assert result.exit_code == 3 and ledger(out, 10)["missing"] == [[2, 2]] and ledger(out, 10)["expectedEntries"] is None
    assert any("entries 2 are in no dump" in r for r in out["reasons"]), out["reasons"]
    g.write_entry_log(tmp_path / "1.log", [(10, 2, g.plain(2))])
    result, out = scan(tmp_path / "0.log", tmp_path / "1.log", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "10")
    assert result.exit_code == 0, out


def test_replicas_count_once_and_any_batched_copy_wins(tmp_path):
    entries = [(10, i, g.plain(i)) for i in range(4)]
    g.write_entry_log(tmp_path / "b1.log", entries[:3])  # bookies hold overlapping copies (ensemble striping)
    g.write_entry_log(tmp_path / "b2.log", entries[1:])
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 3})
    result, out = scan(tmp_path / "b1.log", tmp_path / "b2.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 0, out
    assert ledger(out, 10)["foundEntries"] == 4 and ledger(out, 10)["verifiedEntries"] == 4
    g.write_entry_log(tmp_path / "b3.log", [(10, 1, g.batched(1))])  # a third bookie's copy of entry 1 is batched
    result, out = scan(tmp_path / "b1.log", tmp_path / "b2.log", tmp_path / "b3.log", "--ledgers",
                       tmp_path / "l.txt")
    assert result.exit_code == 1 and ledger(out, 10)["batchedEntries"] == 1 and ledger(out, 10)["foundEntries"] == 4


def test_a_damaged_replica_blocks_clean_even_beside_a_good_one(tmp_path):
    # Bookie 1's copy of entry 2 fails its digest. The digest covers the header, so the flipped bits may be in the
    # ids: the copy may be another ledger's entry. Coverage is complete, but clean would not be a proof.
    entries = [(10, i, g.plain(i)) for i in range(4)]
    g.write_entry_log(tmp_path / "b1.log", entries, corrupt={(10, 2)})
    g.write_entry_log(tmp_path / "b2.log", entries)
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 3})
    result, out = scan(tmp_path / "b1.log", tmp_path / "b2.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and out["verdict"] == "incomplete", out
    tc = ledger(out, 10)
    assert tc["foundEntries"] == 4 and tc["missing"] == [] and tc["failedCopies"] == 1
    assert any(r.startswith("ledger 10 ") and "a copy of entries 2 failed its digest" in r and "b1.log@" in r
               for r in out["reasons"]), out["reasons"]


def test_hex_ledger_ids_are_never_guessed(tmp_path):
    entries = [(26, 0, g.plain(0)), (26, 1, g.plain(1))]
    (tmp_path / "d.txt").write_text(g.readledger_hex(entries, id_format=lambda lid: format(lid, "x")))
    g.ledger_list(tmp_path / "l.txt", {26: TC}, last={26: 1})
    result, out = scan(tmp_path / "d.txt", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and "not decimal" in out["unreadableLocations"][0]["detail"]
    assert ledger(out, 26)["missing"] == [[0, 1]]
    # The list itself was decimal; with both in hex, everything lines up.
    lines = (tmp_path / "l.txt").read_text().replace("ledgerID: 26", "ledgerID: 1a")
    (tmp_path / "lh.txt").write_text(lines)
    result, out = scan(tmp_path / "d.txt", "--ledgers", tmp_path / "lh.txt", "--ledger-id-format", "hex")
    assert result.exit_code == 0, out


def test_418_console_without_ids_is_never_attributed(tmp_path):
    entries = [(10, 0, g.plain(0)), (10, 1, g.batched(1))]
    (tmp_path / "d.txt").write_text(g.readledger_hex(entries, "4.18", ids=False))
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 1})
    result, out = scan(tmp_path / "d.txt", "--ledgers", tmp_path / "l.txt", "--format", "readledger-hex")
    assert result.exit_code == 3
    assert out["unreadable"] == 2 and "%X" in out["unreadableLocations"][0]["detail"]


def test_both_pending_ack_naming_schemes_are_transaction_ledgers(tmp_path):
    # Subscription "billing/eu": 4.x puts it raw into the topic name (the managed ledger encodes `/` once);
    # Pulsar 5.0 URL-encodes it in the topic name first, so the managed-ledger name holds %252F.
    old = "public/default/persistent/orders-billing%2Feu__transaction_pending_ack"
    new = "public/default/persistent/orders-billing%252Feu__transaction_pending_ack"
    ack = g.raw_batch([bytes([0x08, 0x00, 0x10, 0x01, 0x18, 0x01])])  # pending_ack_op=ACK, txn ids
    g.write_entry_log(tmp_path / "0.log", [(20, 0, ack), (21, 0, ack)])
    g.ledger_list(tmp_path / "l.txt", {20: old, 21: new}, last={20: 0, 21: 0})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 1 and out["liveBatchedEntries"] == 2
    assert ledger(out, 20)["transactionLedger"] and ledger(out, 21)["transactionLedger"]


@pytest.mark.parametrize("version", g.VERSIONS)
def test_a_fixture_per_bookkeeper_version(tmp_path, version):
    """readledger (hex and string), readledger -bookie and readlog as each version prints them."""
    entries = [(10, 0, g.plain(0)), (10, 1, g.batched(2)), (10, 2, b"")]
    dumps = {"hex.txt": g.readledger_hex(entries, version).encode(),
             "string.txt": g.readledger_string(entries, version),
             "bookie.txt": g.readledger_bookie(entries[:2], version).encode(),
             "readlog.txt": g.readlog(entries[:2], version).encode()}
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 2})
    g.ledger_list(tmp_path / "l1.txt", {10: TC}, last={10: 1})
    expect = {"hex.txt": "readledger-hex", "string.txt": "readledger-string", "bookie.txt": "readledger-bookie",
              "readlog.txt": "readlog"}
    from txnadmin.scan import detect

    for name, data in dumps.items():
        (tmp_path / name).write_bytes(data)
        assert detect(str(tmp_path / name)).name == expect[name], (version, name)
        lst = tmp_path / ("l.txt" if name in ("hex.txt", "string.txt") else "l1.txt")
        result, out = scan(tmp_path / name, "--ledgers", lst)
        assert result.exit_code == 1, (version, name, out)
        tc = ledger(out, 10)
        assert tc["batchedEntries"] == 1 and tc["missing"] == [], (version, name, tc)
        if name == "bookie.txt":
            assert tc["verifiedEntries"] == 2  # the raw stored entry keeps its digest: checked
        else:
            assert tc["verifiedEntries"] == 0 and tc["uncheckedEntries"] == tc["foundEntries"]
            assert tc["unchecked"] == ([[0, 2]] if name in ("hex.txt", "string.txt") else [[0, 1]])


def test_a_damaged_bookie_dump_fails_its_digest(tmp_path):
    (tmp_path / "b.txt").write_text(g.readledger_bookie([(10, 0, g.plain(0))], corrupt=True))
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 0})
    result, out = scan(tmp_path / "b.txt", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and ledger(out, 10)["examples"][0]["form"] == "bad-digest"


@pytest.mark.parametrize("version", ["4.17", "4.18"])
def test_a_bookie_dump_whose_stored_header_names_another_entry_is_not_that_entry(tmp_path, version):
    # `readledger -bookie` prints the ids it asked for; the stored entry carries its own. Entry 0's bytes (a valid
    # digest) under the header of entry 1 must not cover entry 1, as BookKeeper's client would not accept them.
    one = g.readledger_bookie([(10, 0, g.plain(0))], version)
    other = one.replace("Eid=0", "Eid=1").replace("entryId=0", "entryId=1")
    (tmp_path / "b.txt").write_text(one + other)
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 1})
    result, out = scan(tmp_path / "b.txt", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and ledger(out, 10)["missing"] == [[1, 1]], out
    assert any("stored header" in x["detail"] for x in ledger(out, 10)["examples"]), ledger(out, 10)["examples"]


def test_hex_dump_shorter_than_its_entry_size_is_unreadable(tmp_path):
    text = g.readledger_hex([(10, 0, g.batched(3))])
    (tmp_path / "d.txt").write_text("\n".join(text.splitlines()[:-1]) + "\n")  # last hex row lost
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 0})
    result, out = scan(tmp_path / "d.txt", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and "EntrySize" in ledger(out, 10)["examples"][0]["detail"]


def test_downgrade_verify_passes_incomplete_through_as_exit_3(tmp_path):
    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "1"]).exit_code == 0
    state = tmp_path / "s.json"
    started = runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state", str(state)])
    assert started.exit_code == 0, started.output
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0))])
    result = runner.invoke(app, ["downgrade", "verify", "-u", f"local:{d}", "--dumps", str(tmp_path / "0.log"),
                                 "--state", str(state), "--engine", "python", "-o", "json"])
    # Without a ledger list the scan cannot prove clean: exit 3 ("cannot tell"), not 1 ("batched").
    assert result.exit_code == 3, result.output
    out = json.loads(result.stdout)
    assert out["verdict"] == "incomplete" and "listledgers -meta" in out["reasons"][0]
    assert json.loads(state.read_text())["verification"]["verdict"] == "incomplete"


def _coordinator_ledgers(engine_dir) -> list[int]:
    """Coordinator 0's live ledgers, as the engine lists them (what `downgrade verify` holds a list to)."""
    stats = runner.invoke(app, ["-u", f"local:{engine_dir}", "transactions", "coordinator-internal-stats", "-c", "0"])
    assert stats.exit_code == 0, stats.output
    return [l["ledgerId"] for l in
            json.loads(stats.stdout)["transactionLogStats"]["managedLedgerInternalStats"]["ledgers"]]


def test_downgrade_verify_takes_the_fixes_the_scan_names(tmp_path):
    """The scan refuses a list without -meta naming --txn-ledgers; verify must accept that fix (and the dump
    options), pass batched/clean through as 1/0, and a bad flag value is a usage error (2), not "cannot tell"."""
    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "1"]).exit_code == 0
    state = tmp_path / "s.json"
    assert runner.invoke(app, ["downgrade", "start", "--yes", "-u", f"local:{d}", "--state", str(state)]).exit_code == 0
    # The lists hold the engine's own coordinator ledgers too: verify refuses a list that lacks this target's.
    ours = _coordinator_ledgers(d)
    assert not set(ours) & {10, 11, 26}, ours  # a fresh engine's first ledgers: apart from the made-up ones
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (11, 0, g.batched(1))])
    g.ledger_list(tmp_path / "l.txt", {10: TC, 11: g.ACK_ML, **{lid: g.TC_ML.format(0) for lid in ours}}, meta=False)
    base = ["downgrade", "verify", "-u", f"local:{d}", "--dumps", str(tmp_path / "0.log"), "--ledgers",
            str(tmp_path / "l.txt"), "--state", str(state), "--engine", "python"]
    refused = runner.invoke(app, base)
    assert refused.exit_code == 3 and "--txn-ledgers" in refused.stderr
    named = runner.invoke(app, [*base, "--txn-ledgers", ",".join(map(str, [10, 11, *ours])), "-o", "json"])
    assert named.exit_code == 1 and json.loads(named.stdout)["verdict"] == "batched", named.output
    hexdump = tmp_path / "d.txt"
    hexdump.write_text(g.readledger_hex([(26, 0, g.plain(0))], id_format=lambda lid: format(lid, "x")))
    g.ledger_list(tmp_path / "h.txt", {26: TC, **{lid: g.TC_ML.format(0) for lid in ours}}, last={26: 0},
                  id_format=lambda lid: format(lid, "x"))
    clean = runner.invoke(app, ["downgrade", "verify", "-u", f"local:{d}", "--dumps", str(hexdump), "--ledgers",
                                str(tmp_path / "h.txt"), "--state", str(state), "--engine", "python",
                                "--ledger-id-format", "hex", "--format", "readledger-hex"])
    assert clean.exit_code == 0, clean.output
    for bad in (["--engine", "gpu"], ["--txn-ledgers", "ten"], ["--format", "tape"], ["--ledger-id-format", "oct"]):
        result = runner.invoke(app, [*base[:-2], *bad])
        assert result.exit_code == 2 and "Traceback" not in result.output, (bad, result.output)


def _run_on_a_terminal(args: list[str]) -> tuple[int, bytes]:
    import os
    import sys

    from pty_helpers import run_on_terminal

    return run_on_terminal([sys.executable, "-m", "txnadmin.cli.main", *args],
                           dict(os.environ, COLUMNS="120", TERM="xterm"))


def test_progress_bar_on_a_terminal_quiet_when_piped(tmp_path):
    import subprocess
    import sys

    for n in range(3):
        g.write_entry_log(tmp_path / f"{n}.log", [(10, n * 100 + i, g.plain(i)) for i in range(100)])
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 299})
    args = ["scan", str(tmp_path / "0.log"), str(tmp_path / "1.log"), str(tmp_path / "2.log"), "--ledgers",
            str(tmp_path / "l.txt"), "--engine", "python"]
    code, out = _run_on_a_terminal(args)
    assert code == 0
    assert b"3/3 files" in out and b"scanning" in out  # the bar drew files and bytes done
    piped = subprocess.run([sys.executable, "-m", "txnadmin.cli.main", *args], capture_output=True)
    assert piped.returncode == 0 and b"scanning" not in piped.stdout + piped.stderr
    assert b"verdict: clean" in piped.stdout


@pytest.mark.slow
@pytest.mark.spark
def test_progress_bar_with_the_spark_engine(tmp_path):
    """Long scans are the Spark ones (`auto` picks Spark for big inputs): the bar shows files and bytes there too.
    (Quiet when piped is decided before the engine is chosen: the python engine's test above shows it, without a
    second JVM start here.)"""
    (tmp_path / "d").mkdir()
    for n in range(3):
        g.write_entry_log(tmp_path / "d" / f"{n}.log", [(10, n * 100 + i, g.plain(i)) for i in range(100)])
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: 299})
    args = ["scan", str(tmp_path / "d"), "--ledgers", str(tmp_path / "l.txt"), "--engine", "spark", "--master", "local[1]"]
    code, out = _run_on_a_terminal(args)
    assert code == 0, out[-2000:]
    assert b"3/3 files" in out and b"scanning" in out, out[-2000:]
    assert b"verdict: clean" in re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", out), out[-2000:]  # without its colours


def test_bad_flag_values_are_usage_errors(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0))])
    for args in (["--txn-ledgers", "ten"], ["--ledger-id-format", "octal"], ["--engine", "gpu"]):
        result = runner.invoke(app, ["scan", str(tmp_path / "0.log"), *args])
        assert result.exit_code == 2 and "Traceback" not in result.output, (args, result.output)


def test_a_damaged_ledger_id_cannot_hide_an_entry_of_an_open_ledger(tmp_path):
    # Entry 2 of open ledger 10 has a flipped bit in its stored ledger id: it claims ledger 11, which is not live.
    # Coverage of an open ledger ends at the highest entry found, so only the failed digest gives it away.
    g.write_entry_log(tmp_path / "0.log", [(10, i, g.plain(i)) for i in range(3)], corrupt_header={(10, 2)})
    g.ledger_list(tmp_path / "l.txt", {10: TC}, last={10: None})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3 and out["verdict"] == "incomplete"
    assert any("ledger 11 is not in the list" in r and "digest" in r for r in out["reasons"]), out["reasons"]


def test_an_entry_moved_into_a_skipped_ledger_is_caught(tmp_path):
    # Entry 2 of open TC ledger 10 claims ledger 11 (a live message ledger, skipped by id) after a flipped bit.
    entries = [(10, i, g.plain(i)) for i in range(3)] + [(11, 0, g.pulsar_message(0))]
    g.ledger_list(tmp_path / "l.txt", {10: TC, 11: g.MSG_ML}, last={10: None, 11: 0})
    # A finished (rotated) file ends with its ledgers map: the bytes per ledger no longer add up.
    g.write_entry_log(tmp_path / "0.log", entries, corrupt_header={(10, 2)})
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 3
    assert any(r.startswith("ledger 10 ") and "ledgers map gives ledger 10" in r for r in out["reasons"]), out
    assert any(r.startswith("ledger 11 is not a transaction ledger") for r in out["reasons"]), out["reasons"]
    # The file still being written has no map: skipped ledgers are not read by default (the documented limit) ...
    g.write_entry_log(tmp_path / "1.log", entries, corrupt_header={(10, 2)}, finished=False)
    result, out = scan(tmp_path / "1.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 0
    # ... and --verify-all-digests reads them too.
    result, out = scan(tmp_path / "1.log", "--ledgers", tmp_path / "l.txt", "--verify-all-digests")
    assert result.exit_code == 3
    assert any("ledger 11 is not a transaction ledger" in r for r in out["reasons"]), out["reasons"]


LIST_STYLES = [("4.14", "pulsar"), ("4.17", "bk"), ("4.18", "4.18")]


@pytest.mark.parametrize("version, prefix", LIST_STYLES)
@pytest.mark.parametrize("command", ["listledgers", "ledgermetadata"])
def test_a_ledger_list_per_bookkeeper_version(tmp_path, version, prefix, command):
    """`listledgers -meta` and `ledgermetadata` as each version logs them; 4.18 (slog) carries the id and the
    metadata as event attributes, printed only by a %X layout: `log entry {ledgerId=10, metadata=LedgerMetadata{…}}`."""
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0)), (10, 1, g.batched(2)), (12, 0, g.pulsar_message(0))])
    g.write_entry_log(tmp_path / "1.log", [(11, 0, g.plain(0)), (11, 1, g.plain(1)), (12, 1, g.pulsar_message(1))])
    g.ledger_list(tmp_path / "l.txt", {10: TC, 11: g.ACK_ML, 12: g.MSG_ML}, last={10: 1, 11: 1, 12: 1},
                  prefix=prefix, command=command)
    result, out = scan(tmp_path / "0.log", tmp_path / "1.log", "--ledgers", tmp_path / "l.txt")
    assert result.exit_code == 1 and out["liveBatchedEntries"] == 1, (version, result.output)
    assert ledger(out, 10)["expectedEntries"] == 2 and ledger(out, 11)["transactionLedger"]
    assert not any(l["ledgerId"] == 12 and l["transactionLedger"] for l in out["ledgers"])  # messages never count
    result, out = scan(tmp_path / "1.log", "--ledgers", tmp_path / "l.txt", "--txn-ledgers", "11")
    assert result.exit_code == 3 and ledger(out, 10)["missing"] == [[0, 1]]  # listed, in no dump: not clean
    g.ledger_list(tmp_path / "l11.txt", {11: g.ACK_ML, 12: g.MSG_ML}, last={11: 1, 12: 1}, prefix=prefix,
                  command=command)
    result, out = scan(tmp_path / "1.log", "--ledgers", tmp_path / "l11.txt")
    assert result.exit_code == 0 and out["verdict"] == "clean", (version, out)


def test_418_ledger_list_with_hex_ids_and_without_meta(tmp_path):
    g.write_entry_log(tmp_path / "0.log", [(26, 0, g.batched(1))])
    g.ledger_list(tmp_path / "l.txt", {26: TC}, last={26: 0}, prefix="4.18", id_format=lambda lid: format(lid, "x"))
    result, out = scan(tmp_path / "0.log", "--ledgers", tmp_path / "l.txt", "--ledger-id-format", "hex")
    assert result.exit_code == 1 and ledger(out, 26)["expectedEntries"] == 1
    g.ledger_list(tmp_path / "m.txt", {26: TC}, prefix="4.18", meta=False)
    result = runner.invoke(app, ["scan", str(tmp_path / "0.log"), "--ledgers", str(tmp_path / "m.txt")])
    assert result.exit_code == 3 and "listledgers -meta" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["listledgers", "ledgermetadata"])
def test_418_console_ledger_list_without_ids_is_refused(tmp_path, command):
    # The default 4.18 console layout has no %X: every line is a bare `log entry`. Not one ledger can be named, and
    # a list that names only some ledgers would make the others look trimmed: refused, naming the fix.
    g.write_entry_log(tmp_path / "0.log", [(10, 0, g.plain(0))])
    g.ledger_list(tmp_path / "l.txt", {10: TC, 11: g.ACK_ML}, last={10: 0, 11: 0}, prefix="4.18-console",
                  command=command)
    result = runner.invoke(app, ["scan", str(tmp_path / "0.log"), "--ledgers", str(tmp_path / "l.txt")])
    assert result.exit_code == 3 and "%X" in result.stderr and "Traceback" not in result.output, result.output
    # One id-less event among named ledgers is refused too: it is a live ledger the scan could not judge.
    g.ledger_list(tmp_path / "m.txt", {10: TC}, last={10: 0}, prefix="4.18", command=command)
    text = (tmp_path / "m.txt").read_text() + (tmp_path / "l.txt").read_text().splitlines()[-1] + "\n"
    (tmp_path / "m.txt").write_text(text)
    result = runner.invoke(app, ["scan", str(tmp_path / "0.log"), "--ledgers", str(tmp_path / "m.txt")])
    assert result.exit_code == 3 and "%X" in result.stderr, result.output
