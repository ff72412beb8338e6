"""Readers never raise: every registered reader, the ledger-list parser and run_scan, on mutated dumps.

Seeds are valid dumps of every format (tests/dumpgen.py); hypothesis mutates them the ways the field found
(bit flips, truncation, spliced garbage, numbers too long for int(), attributes without `=`, non-UTF-8 bytes, bad
base64, negative sizes) and the code must answer with findings or a one-line ScanInputError, never a traceback.
The budget is modest so the suite stays fast.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from txnadmin.scan import REGISTRY, ScanInputError, run_scan
from txnadmin.scan.formats import Finding, ReadPlan
from txnadmin.scan.ledgers import LedgerListError, read_ledger_list

import dumpgen as g

ENTRIES = [(10, 0, g.plain(0)), (10, 1, g.batched(2)), (10, 2, b""), (12, 0, g.pulsar_message(1))]
TC = g.TC_ML.format(1)


def _seeds() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as d:
        g.write_entry_log(Path(d, "0.log"), ENTRIES)
        log = Path(d, "0.log").read_bytes()
        g.write_direct_entry_log(Path(d, "1.log"), ENTRIES, preallocated=64)
        direct = Path(d, "1.log").read_bytes()
        lists = {}
        for name, prefix, command in (("list", "pulsar", "listledgers"), ("list418", "4.18", "listledgers"),
                                      ("meta418", "4.18", "ledgermetadata")):
            g.ledger_list(Path(d, "l.txt"), {10: TC, 12: g.MSG_ML}, last={10: 2, 12: None}, prefix=prefix,
                          command=command)
            lists[name] = Path(d, "l.txt").read_bytes()
    return {
        "entrylog": log,
        "direct": direct,
        "hex417": g.readledger_hex(ENTRIES, "4.17").encode(),
        "hex418": g.readledger_hex(ENTRIES, "4.18").encode(),
        "string": g.readledger_string(ENTRIES),
        "bookie": g.readledger_bookie(ENTRIES[:2]).encode(),
        "bookie418": g.readledger_bookie(ENTRIES[:2], "4.18").encode(),
        "readlog": g.readlog(ENTRIES[:2]).encode(),
        "readlog418": g.readlog(ENTRIES[:2], "4.18").encode(),
        **lists,
    }


SEEDS = _seeds()
NASTY = [b"=", b",", b"{", b"}", b"\xff\xfe", b"9" * 5000, b"-1", b"-99999999999999999999", b"base64:!!!",
         b"Lid=", b"Eid=x", b"-ledgerId=", b"ledgerId=", b"Entry {", b"\n", b"\r", b"|00000000|", b"00000000 ",
         b"--------- ", struct.pack(">i", -5), struct.pack(">i", 0x7FFFFFFF), b"\x00" * 40, b"ByteOffset=",
         b"EntrySize=-3", b"lastEntryId=abc", b"digestType=FOO", b"ledgerID: zz", b"password=base64:%%%",
         b"log entry {ledgerId=", b"LedgerMetadata{", b"ledgerID {", b"}}", b"log entry\n"]


@st.composite
def mutated(draw, seed_names):
    data = bytearray(SEEDS[draw(st.sampled_from(seed_names))])
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "nasty", "dup", "delete"]))
        pos = draw(st.integers(0, max(0, len(data))))
        if op == "flip" and data:
            i = min(pos, len(data) - 1)
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(max_size=24))
        elif op == "nasty":
            data[pos:pos] = draw(st.sampled_from(NASTY))
        elif op == "dup":
            data[pos:pos] = data[max(0, pos - 64):pos]
        else:
            del data[pos:pos + draw(st.integers(1, 64))]
    return bytes(data)


def _write(data: bytes, name: str = "dump") -> str:
    fd, path = tempfile.mkstemp(prefix="fuzz-", suffix=f"-{name}")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


LISTS = ["list", "list418", "meta418"]
DUMPS = [k for k in SEEDS if k not in LISTS]
PLAN = ReadPlan(frozenset({12}), {10: ("CRC32C", b"")})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated(DUMPS), reader=st.sampled_from(sorted(REGISTRY)))
def test_every_reader_returns_findings_and_never_raises(data, reader):
    path = _write(data)
    try:
        for plan in (PLAN, ReadPlan(), ReadPlan(ledger_id_format="hex")):
            for f in REGISTRY[reader].read(path, plan):
                assert isinstance(f, Finding)
                assert f.form in ("batched", "plain", "empty", "unreadable", "bad-digest")
                assert f.ledger_id >= -1 and f.entry_id >= -1
    finally:
        os.unlink(path)


@settings(max_examples=300, deadline=None)
@given(data=mutated(LISTS))
def test_the_ledger_list_parser_raises_only_its_own_error(data):
    path = _write(data, "list")
    try:
        for fmt in ("long", "hex"):
            try:
                read_ledger_list(path, fmt)
            except LedgerListError as exc:
                assert "\n" not in str(exc)
    finally:
        os.unlink(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dump=mutated(DUMPS), lst=mutated(LISTS), named=st.sampled_from([(), (10,), (10, 99)]))
def test_run_scan_gives_a_verdict_or_one_line(dump, lst, named):
    d = tempfile.mkdtemp(prefix="fuzz-scan-")
    try:
        with open(os.path.join(d, "dump"), "wb") as fh:
            fh.write(dump)
        with open(os.path.join(d, "l.txt"), "wb") as fh:
            fh.write(lst)
        for ledgers in (None, os.path.join(d, "l.txt")):
            try:
                result = run_scan([os.path.join(d, "dump")], ledgers, engine="python", txn_ledgers=named)
            except ScanInputError as exc:
                assert "\n" not in str(exc)
                continue
            assert result.verdict in ("clean", "batched", "incomplete")
            if result.verdict == "clean":
                # Clean is a proof: every judged ledger fully found, nothing unplaced.
                assert ledgers and not result.reasons and result.unreadable_count == 0
                assert all(not l["missing"] for l in result.ledgers if l["transactionLedger"])
    finally:
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)
