"""The engine's entry logs, parsed by an independent minimal reader written here from the reference
(bookkeeper-formats.md, "Entry logs") — nothing from txnadmin.engine.storage.entrylog is used to read them.
The property test at the end checks the engine's own scanner, which crash recovery relies on."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import google_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from txnadmin.engine.storage import LedgerStorage, entrylog


def read_entry_log(path: Path) -> dict:
    """Parse one DefaultEntryLogger file: 1024-byte header, [int32 N][N bytes] records, ledgers map at the end."""
    data = path.read_bytes()
    assert data[0:4] == b"BKLO"
    version, map_offset, ledger_count = struct.unpack(">iqi", data[4:20])
    assert version == 1
    assert data[20:1024] == bytes(1004)
    data_end = map_offset if map_offset else len(data)
    records, pos = [], 1024
    while pos < data_end:
        (n,) = struct.unpack(">i", data[pos:pos + 4])
        stored = data[pos + 4:pos + 4 + n]
        assert len(stored) == n, f"{path.name}: record at {pos} runs past the data"
        ledger_id, entry_id, lac, length = struct.unpack(">qqqq", stored[:32])
        (digest,) = struct.unpack(">I", stored[32:36])
        payload = stored[36:]
        assert google_crc32c.value(stored[:32] + payload) == digest, f"{path.name}: CRC32C at {pos}"
        records.append({"ledger": ledger_id, "entry": entry_id, "lac": lac, "length": length,
                        "payload": payload, "record_bytes": 4 + n})
        pos += 4 + n
    assert pos == data_end
    ledgers_map = {}
    while pos < len(data):
        (n,) = struct.unpack(">i", data[pos:pos + 4])
        ledger_id, entry_id, count = struct.unpack(">qqi", data[pos + 4:pos + 24])
        assert (ledger_id, entry_id) == (-1, -2)
        assert n == 20 + 16 * count
        for i in range(count):
            lid, size = struct.unpack(">qq", data[pos + 24 + 16 * i:pos + 40 + 16 * i])
            ledgers_map[lid] = size
        pos += 4 + n
    if map_offset:
        assert len(ledgers_map) == ledger_count
    else:
        assert ledger_count == 0
    return {"finished": bool(map_offset), "records": records, "ledgers_map": ledgers_map}


def test_independent_reader_parses_engine_entry_logs(tmp_path):
    rnd = random.Random(7)
    written: dict[int, list[bytes]] = {}
    with LedgerStorage.open(tmp_path / "s", entry_log_size_limit=16 * 1024) as st:
        ledgers = [st.create_ledger({"n": str(i)}) for i in range(4)]
        for ledger in ledgers:
            written[ledger] = []
        for _ in range(600):
            ledger = rnd.choice(ledgers)
            data = rnd.randbytes(rnd.randint(0, 300))
            written[ledger].append(data)
            st.add_entry(ledger, data)
        st.close_ledger(ledgers[0])
        files = st.entry_log_files()

    assert len(files) >= 5
    seen: dict[int, list[dict]] = {ledger: [] for ledger in ledgers}
    interleaved = False
    for path in files:
        assert path.parent.name == "current" and path.parent.parent.name == "ledgers"
        assert path.name == f"{int(path.stem, 16):x}.log"
        log = read_entry_log(path)
        assert log["finished"] == (path != files[-1])
        if log["finished"]:
            per_ledger: dict[int, int] = {}
            for rec in log["records"]:
                per_ledger[rec["ledger"]] = per_ledger.get(rec["ledger"], 0) + rec["record_bytes"]
            # BookKeeper's map counts each ledger's bytes in this file, size prefixes included
            assert log["ledgers_map"] == per_ledger
        interleaved |= len({rec["ledger"] for rec in log["records"]}) > 1
        for rec in log["records"]:
            seen[rec["ledger"]].append(rec)
    assert interleaved, "ledgers should share entry-log files as on a bookie"
    for ledger in ledgers:
        recs = seen[ledger]
        assert [r["entry"] for r in recs] == list(range(len(written[ledger])))
        assert [r["payload"] for r in recs] == written[ledger]
        total = 0
        for rec in recs:
            total += len(rec["payload"])
            assert rec["length"] == total  # ledger length up to and including this entry
            assert -1 <= rec["lac"] < rec["entry"]


records_strategy = st.lists(
    st.tuples(st.integers(0, 2**40), st.integers(0, 2**40), st.binary(max_size=300)), min_size=1, max_size=12)


def _scan_bytes(tmp_path: Path, data: bytes):
    path = tmp_path / "0.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        return entrylog.scan_records(fd, entrylog.HEADER_SIZE, len(data), chunk=64)
    finally:
        os.close(fd)


@settings(max_examples=150, deadline=None)
@given(records=records_strategy, cut=st.integers(0, 10**6), flip=st.one_of(st.none(), st.integers(0, 10**6)))
def test_a_damaged_tail_never_scans_as_data(tmp_path_factory, records, cut, flip):
    tmp_path = tmp_path_factory.mktemp("scan")
    encoded = [entrylog.encode_record(lid, eid, eid - 1, len(p), p) for lid, eid, p in records]
    data = bytearray(entrylog.encode_header() + b"".join(encoded))
    ends = [entrylog.HEADER_SIZE]
    for rec in encoded:
        ends.append(ends[-1] + len(rec))
    damaged_at = len(data)
    if flip is not None:
        pos = entrylog.HEADER_SIZE + flip % (len(data) - entrylog.HEADER_SIZE)
        data[pos] ^= 0x5A
        damaged_at = pos
    cut_at = entrylog.HEADER_SIZE + cut % (len(data) - entrylog.HEADER_SIZE + 1)
    data = bytes(data[:cut_at])
    damaged_at = min(damaged_at, cut_at)
    scan = _scan_bytes(tmp_path, data)
    # exactly the records that lie wholly before the first damage are returned, and nothing else
    whole = [i for i in range(len(encoded)) if ends[i + 1] <= damaged_at]
    assert [(loc.ledger_id, loc.entry_id) for loc in scan.records] == [records[i][:2] for i in whole]
    assert scan.end == ends[len(whole)]


def test_a_ledgers_map_with_a_negative_count_is_its_documented_error():
    """count -2 with the size that matches it (-12) stepped back before the record: struct.error, not ValueError."""
    record = struct.pack(">iqqi", -12, entrylog.LEDGERS_MAP_LEDGER_ID, entrylog.LEDGERS_MAP_ENTRY_ID, -2)
    try:
        entrylog.decode_ledgers_map(record + b"\0" * 64)
    except ValueError as exc:
        assert "negative ledger count -2" in str(exc)
    else:
        raise AssertionError("a negative count was read as a map")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(-3, 3)), max_size=4), st.binary(max_size=64))
def test_any_ledgers_map_bytes_decode_or_raise_value_error(heads, tail):
    data = b"".join(struct.pack(">iqqi", size, entrylog.LEDGERS_MAP_LEDGER_ID, entrylog.LEDGERS_MAP_ENTRY_ID, count)
                    for size, count in heads) + tail
    try:
        entrylog.decode_ledgers_map(data)
    except ValueError:
        pass  # the documented error: anything else (struct.error, a hang) fails the test
