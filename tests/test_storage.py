"""Ledger storage API: ledgers, entries, metadata store, restarts, read-only, delete vs compaction, export."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from txnadmin.engine import storage as storage_pkg
from txnadmin.engine.storage import (
    EngineLockedError,
    EntryNotFoundError,
    LedgerClosedError,
    LedgerMetadata,
    LedgerNotFoundError,
    LedgerStorage,
    StorageError,
    StorageReadOnlyError,
    entrylog,
)


@pytest.fixture
def st(tmp_path):
    storage = LedgerStorage.open(tmp_path / "s", entry_log_size_limit=32 * 1024)
    yield storage
    storage.close()


def test_public_surface_is_what_all_says():
    for name in storage_pkg.__all__:
        assert hasattr(storage_pkg, name), name
    assert {"LedgerStorage", "LedgerMetadata", "StorageError", "EngineLockedError",
            "LedgerNotFoundError"} <= set(storage_pkg.__all__)


def test_entries_round_trip_with_ids_from_zero(st):
    ledger = st.create_ledger({"application": "pulsar"})
    payloads = [bytes([i]) * i for i in range(50)] + [b""]
    assert [st.add_entry(ledger, p) for p in payloads] == list(range(51))
    assert st.read_entries(ledger, 0, 50) == payloads
    assert st.read_entries(ledger, 10, 12) == payloads[10:13]
    assert st.read_entry(ledger, 50) == b""
    meta = st.ledger_metadata(ledger)
    assert (meta.state, meta.last_entry_id, meta.length) == ("OPEN", 50, sum(map(len, payloads)))
    assert meta.custom_metadata == {"application": "pulsar"}


def test_missing_ledger_and_entry_are_named(st):
    ledger = st.create_ledger({})
    st.add_entry(ledger, b"a")
    with pytest.raises(EntryNotFoundError, match=f"ledger {ledger}: no entry 1"):
        st.read_entry(ledger, 1)
    with pytest.raises(LedgerNotFoundError, match="ledger 999"):
        st.read_entry(999, 0)
    with pytest.raises(LedgerNotFoundError, match="ledger 999"):
        st.ledger_metadata(999)
    with pytest.raises(LedgerNotFoundError, match="ledger 999"):
        st.add_entry(999, b"x")
    with pytest.raises(StorageError, match="bad entry range"):
        st.read_entries(ledger, 1, 0)
    with pytest.raises(StorageError, match="payload must be bytes"):
        st.add_entry(ledger, "text")


def test_close_fixes_last_entry_and_refuses_adds(st):
    ledger = st.create_ledger({})
    for _i in range(3):
        st.add_entry(ledger, b"abc")
    meta = st.close_ledger(ledger)
    assert (meta.state, meta.last_entry_id, meta.length) == ("CLOSED", 2, 9)
    with pytest.raises(LedgerClosedError, match=f"ledger {ledger}: closed"):
        st.add_entry(ledger, b"more")
    assert st.close_ledger(ledger) == meta


def test_async_callbacks_in_submission_order_on_one_thread(st):
    a, b = st.create_ledger({}), st.create_ledger({})
    st.close_ledger(b)
    seen, threads, done = [], set(), threading.Event()

    def callback_for(tag):
        def callback(entry_id, error):
            seen.append((tag, entry_id, type(error).__name__ if error else None))
            threads.add(threading.current_thread().name)
            if tag == 999:
                done.set()
        return callback

    for i in range(1000):
        # every 100th add goes to the closed ledger and must fail, in its place
        target = b if i % 100 == 50 else a
        st.add_entry_async(target, f"entry {i}".encode(), callback_for(i))
    done.wait(30)
    assert [tag for tag, _, _ in seen] == list(range(1000))
    failures = [(tag, entry_id, err) for tag, entry_id, err in seen if err]
    assert failures == [(i, None, "LedgerClosedError") for i in range(50, 1000, 100)]
    assert [entry_id for _, entry_id, err in seen if not err] == list(range(990))
    assert len(threads) == 1 and threading.current_thread().name not in threads
    assert st.read_entry(a, 989) == b"entry 999"


def test_a_failing_callback_is_logged_and_the_next_ones_still_run(st, caplog):
    ledger = st.create_ledger({})
    seen, done = [], threading.Event()

    def boom(entry_id, error):
        raise ValueError("caller bug")

    def last(entry_id, error):
        seen.append((entry_id, error))
        done.set()

    st.add_entry_async(ledger, b"first", boom)
    st.add_entry_async(ledger, b"second", last)
    assert done.wait(30) and seen == [(1, None)]
    (logged,) = [r for r in caplog.records if r.name.startswith("txnadmin.engine.storage")]
    assert logged.levelname == "ERROR" and f"callback of ledger {ledger} entry 0 failed" in logged.getMessage()
    assert str(logged.exc_info[1]) == "caller bug"


def test_concurrent_adders_share_fsyncs(st):
    ledgers = [st.create_ledger({}) for _ in range(20)]
    before = st.stats()

    def adder(ledger):
        for _i in range(40):
            st.add_entry(ledger, os.urandom(64))

    threads = [threading.Thread(target=adder, args=(ledger,)) for ledger in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = st.stats()
    entries = after["entriesWritten"] - before["entriesWritten"]
    assert entries == 800
    # group commit: with 20 threads waiting, one fsync covers many adds
    assert after["syncs"] - before["syncs"] < entries / 2
    for ledger in ledgers:
        assert st.ledger_metadata(ledger).last_entry_id == 39


def test_ids_and_counters_survive_restart_and_are_never_reused(tmp_path):
    d = tmp_path / "s"
    with LedgerStorage.open(d) as st:
        ids = [st.create_ledger({}) for _ in range(3)]
        st.add_entry(ids[0], b"kept")
        st.delete_ledger(ids[2])
        assert [st.next_counter("txn"), st.next_counter("txn")] == [0, 1]
    with LedgerStorage.open(d) as st:
        new = st.create_ledger({})
        assert new > ids[2]  # the deleted highest id is not handed out again
        assert st.next_counter("txn") == 2
        assert st.read_entry(ids[0], 0) == b"kept"
        assert st.add_entry(ids[0], b"next") == 1
        assert [m.ledger_id for m in st.list_ledgers()] == [ids[0], ids[1], new]


def test_metadata_store(tmp_path):
    d = tmp_path / "s"
    with LedgerStorage.open(d) as st:
        assert st.meta_get("managed-ledgers/a") is None
        st.meta_put("managed-ledgers/a", b"\x00one")
        st.meta_put_many({"managed-ledgers/b": b"two", "cursors/a/c": b"3", "gone": b"x"})
        st.meta_put_many({"gone": None, "managed-ledgers/a": b"uno"})
        st.meta_delete("cursors/a/c")
        st.meta_delete("never-there")
        with pytest.raises(StorageError, match="value must be bytes"):
            st.meta_put_many({"ok": b"1", "bad": "str"})
        assert st.meta_get("ok") is None  # nothing half-written
    with LedgerStorage.open(d) as st:
        assert st.meta_list("managed-ledgers/") == ["managed-ledgers/a", "managed-ledgers/b"]
        assert st.meta_list("") == ["managed-ledgers/a", "managed-ledgers/b"]
        assert st.meta_get("managed-ledgers/a") == b"uno"
        assert st.meta_get("gone") is None and st.meta_get("cursors/a/c") is None


def test_meta_list_is_exactly_the_prefix(tmp_path):
    keys = ["t/ns/persistent/a", "t/ns/persistent/a/cursors/x", "t/ns/persistent/a0", "t/ns/persistent/a/",
            "t/ns/persistent/b", "t/ns/persistent/aé", "t/ns/persistent/a\U0010ffff", "t/ns/persistent/", "t/ns/q"]
    with LedgerStorage.open(tmp_path / "s") as st:
        st.meta_put_many({k: b"v" for k in keys})
        for prefix in ["t/ns/persistent/a", "t/ns/persistent/a/", "t/ns/persistent/", "t/ns/persistent/a\U0010ffff",
                       "t/", "é", "t/ns/persistent/aé"]:
            assert st.meta_list(prefix) == sorted(k for k in keys if k.startswith(prefix)), prefix


def test_second_writer_in_same_process_is_refused(tmp_path, st):
    with pytest.raises(EngineLockedError, match=rf"{re.escape(str(st.directory))}: already open for writing by "
                                                rf"process {os.getpid()}"):
        LedgerStorage.open(st.directory)


def test_read_only_refuses_every_write(tmp_path):
    d = tmp_path / "s"
    with LedgerStorage.open(d) as st:
        ledger = st.create_ledger({})
        st.add_entry(ledger, b"x")
        st.meta_put("k", b"v")
    with LedgerStorage.open(d, read_only=True) as ro:
        assert ro.read_entry(ledger, 0) == b"x"
        assert ro.meta_get("k") == b"v"
        writes = [lambda: ro.create_ledger({}), lambda: ro.add_entry(ledger, b"y"),
                  lambda: ro.close_ledger(ledger), lambda: ro.delete_ledger(ledger), lambda: ro.compact(),
                  lambda: ro.meta_put("k", b"w"), lambda: ro.meta_delete("k"), lambda: ro.next_counter("n")]
        for write in writes:
            with pytest.raises(StorageReadOnlyError, match="opened read-only, cannot"):
                write()
        with pytest.raises(StorageReadOnlyError):
            ro.add_entry_async(ledger, b"y", lambda e, x: None)
        # a reader does not take the writer lock
        with LedgerStorage.open(d) as st:
            st.add_entry(ledger, b"y")
        assert ro.read_entry(ledger, 1) == b"y"


def test_read_only_on_a_missing_storage_is_a_clear_error(tmp_path):
    with pytest.raises(StorageError, match="no ledger storage here"):
        LedgerStorage.open(tmp_path / "nothing", read_only=True)
    assert not (tmp_path / "nothing").exists()
    with pytest.raises(StorageError, match="entry_log_size_limit 10"):
        LedgerStorage.open(tmp_path / "s", entry_log_size_limit=10)


def test_delete_leaves_garbage_until_compaction(st):
    keep, drop = st.create_ledger({}), st.create_ledger({})
    kept = []
    for i in range(300):
        kept.append(os.urandom(100 + i % 50))
        st.add_entry(keep, kept[-1])
        st.add_entry(drop, os.urandom(200))
    st.close_ledger(drop)
    files_before = st.entry_log_files()
    bytes_before = sum(p.stat().st_size for p in files_before)
    assert st.garbage_bytes() == 0
    st.delete_ledger(drop)
    with pytest.raises(LedgerNotFoundError):
        st.read_entry(drop, 0)
    assert drop not in [m.ledger_id for m in st.list_ledgers()]
    # deleted from metadata and index, but its bytes are still in the entry logs
    garbage = st.garbage_bytes()
    assert garbage == 300 * (4 + entrylog.PAYLOAD_OFFSET + 200)
    assert st.entry_log_files() == files_before
    on_disk = [e.ledger_id for p in files_before for _, e in entrylog.iter_entries(p)]
    assert on_disk.count(drop) == 300

    result = st.compact()
    assert result["bytesReclaimed"] >= garbage
    assert result["filesRewritten"] + result["filesRemoved"] >= 1
    assert st.garbage_bytes() == 0
    files_after = st.entry_log_files()
    # what is left is the live data plus headers and ledgers maps (compaction finished the current log first)
    assert sum(p.stat().st_size for p in files_after) <= bytes_before - garbage + 2 * entrylog.HEADER_SIZE
    assert not [p for p in files_before if p.exists() and p not in files_after]
    on_disk = [e.ledger_id for p in files_after for _, e in entrylog.iter_entries(p)]
    assert drop not in on_disk and on_disk.count(keep) == 300
    assert st.read_entries(keep, 0, 299) == kept
    assert st.add_entry(keep, b"after") == 300
    assert st.compact() == {"filesRewritten": 0, "filesRemoved": 0, "bytesReclaimed": 0}


def test_compaction_survives_restart(tmp_path):
    d = tmp_path / "s"
    with LedgerStorage.open(d, entry_log_size_limit=8192) as st:
        keep, drop = st.create_ledger({}), st.create_ledger({})
        for i in range(100):
            st.add_entry(keep, b"k%d" % i)
            st.add_entry(drop, b"d" * 100)
        st.delete_ledger(drop)
        st.compact()
    with LedgerStorage.open(d, entry_log_size_limit=8192) as st:
        assert st.read_entries(keep, 0, 99) == [b"k%d" % i for i in range(100)]
        assert st.garbage_bytes() == 0
        names = sorted(p.name for p in (d / "ledgers" / "current").iterdir())
        assert names == sorted(p.name for p in st.entry_log_files())


def test_rotation_finishes_files_with_a_ledgers_map(tmp_path):
    with LedgerStorage.open(tmp_path / "s", entry_log_size_limit=4096) as st:
        a, b = st.create_ledger({}), st.create_ledger({})
        for i in range(200):
            st.add_entry(a if i % 3 else b, os.urandom(90))
        files = st.entry_log_files()
    assert len(files) > 3
    assert [entrylog.parse_log_file_name(p.name) for p in files] == sorted(
        entrylog.parse_log_file_name(p.name) for p in files)
    for path in files[:-1]:
        data = path.read_bytes()
        header = entrylog.decode_header(data)
        assert header.finished and header.version == 1
        assert header.ledgers_map_offset <= 4096 + 4 + entrylog.PAYLOAD_OFFSET + 90
        ledgers_map = entrylog.decode_ledgers_map(data[header.ledgers_map_offset:])
        assert len(ledgers_map) == header.ledger_count
    assert not entrylog.decode_header(files[-1].read_bytes()).finished


def test_torn_tail_is_cut_on_reopen(tmp_path):
    d = tmp_path / "s"
    with LedgerStorage.open(d) as st:
        ledger = st.create_ledger({})
        for i in range(5):
            st.add_entry(ledger, b"entry %d" % i)
        current = st.entry_log_files()[-1]
    good_size = current.stat().st_size
    # a record whose CRC does not match, then half a record: what a crash mid-write leaves
    bad = bytearray(entrylog.encode_record(ledger, 5, 4, 100, b"never acknowledged"))
    bad[-1] ^= 0xFF
    half = entrylog.encode_record(ledger, 6, 4, 120, b"cut short")[:20]
    with open(current, "ab") as f:
        f.write(bytes(bad) + half)
    with LedgerStorage.open(d) as st:
        assert current.stat().st_size == good_size
        assert st.ledger_metadata(ledger).last_entry_id == 4
        with pytest.raises(EntryNotFoundError):
            st.read_entry(ledger, 5)
        assert st.add_entry(ledger, b"entry 5") == 5
        assert st.read_entries(ledger, 0, 5) == [b"entry %d" % i for i in range(6)]


def test_unindexed_but_whole_records_are_recovered(tmp_path):
    """A crash between write and index commit leaves whole records the index does not know: they are kept."""
    d = tmp_path / "s"
    with LedgerStorage.open(d) as st:
        ledger = st.create_ledger({})
        st.add_entry(ledger, b"zero")
        current = st.entry_log_files()[-1]
    with open(current, "ab") as f:
        f.write(entrylog.encode_record(ledger, 1, 0, 8, b"one!"))
    with LedgerStorage.open(d) as st:
        meta = st.ledger_metadata(ledger)
        assert (meta.last_entry_id, meta.length) == (1, 8)
        assert st.read_entry(ledger, 1) == b"one!"


def test_corrupted_indexed_entry_is_never_served(tmp_path):
    d = tmp_path / "s"
    with LedgerStorage.open(d) as st:
        ledger = st.create_ledger({})
        st.add_entry(ledger, b"precious payload")
        current = st.entry_log_files()[-1]
    data = bytearray(current.read_bytes())
    data[data.index(b"precious")] ^= 0x01
    current.write_bytes(bytes(data))
    with LedgerStorage.open(d, read_only=True) as ro:
        with pytest.raises(StorageError, match="CRC32C mismatch"):
            ro.read_entry(ledger, 0)


def test_bookkeeper_metadata_string():
    custom = {"application": "pulsar", "component": "managed-ledger",
              "pulsar/managed-ledger": "pulsar/system/persistent/__transaction_log_1"}
    closed = LedgerMetadata(13, "CLOSED", 2, 63, custom, 0).to_bookkeeper_string()
    assert closed == (
        "LedgerMetadata{formatVersion=3, ensembleSize=1, writeQuorumSize=1, ackQuorumSize=1, state=CLOSED, "
        "length=63, lastEntryId=2, digestType=CRC32C, password=base64:, ensembles={0=[127.0.0.1:3181]}, "
        "customMetadata={application=base64:cHVsc2Fy, component=base64:bWFuYWdlZC1sZWRnZXI=, "
        "pulsar/managed-ledger=base64:cHVsc2FyL3N5c3RlbS9wZXJzaXN0ZW50L19fdHJhbnNhY3Rpb25fbG9nXzE=}}")
    opened = LedgerMetadata(14, "OPEN", 5, 99, {}, 0).to_bookkeeper_string()
    assert "state=OPEN, digestType" in opened and "lastEntryId" not in opened and "length=" not in opened
    assert opened.endswith("customMetadata={}}")


def test_export_is_a_bookie_dump(tmp_path):
    d = tmp_path / "s"
    with LedgerStorage.open(d, entry_log_size_limit=4096) as st:
        tc = st.create_ledger({"application": "pulsar", "component": "managed-ledger",
                               "pulsar/managed-ledger": "pulsar/system/persistent/__transaction_log_0"})
        gone = st.create_ledger({})
        for _i in range(60):
            st.add_entry(tc, b"\x0e\x01\x00\x01" + bytes(60))
            st.add_entry(gone, b"x" * 30)
        st.close_ledger(tc)
        st.delete_ledger(gone)
        still_open = st.create_ledger({"pulsar/cursor": "c"})
        st.add_entry(still_open, b"latest")
        summary = st.export(tmp_path / "dump")
        files = st.entry_log_files()
    dump = tmp_path / "dump"
    assert summary["ledgers"] == 2
    assert sorted(summary["entryLogs"]) == sorted(p.name for p in files)
    listing = (dump / "ledgers.txt").read_text().splitlines()
    assert listing[0] == f"ledgerID: {tc}"
    assert listing[1].startswith("LedgerMetadata{") and "state=CLOSED, length=3840, lastEntryId=59" in listing[1]
    assert "pulsar/managed-ledger=base64:" + base64.b64encode(
        b"pulsar/system/persistent/__transaction_log_0").decode() in listing[1]
    assert listing[2] == f"ledgerID: {still_open}" and "state=OPEN" in listing[3]
    assert len(listing) == 4  # the deleted ledger is not listed...
    entries = [e for p in sorted((dump / "ledgers" / "current").glob("*.log"))
               for _, e in entrylog.iter_entries(p)]
    # ...but its bytes are in the copied entry logs, exactly like on a bookie before GC
    assert sum(e.ledger_id == gone for e in entries) == 60
    assert sum(e.ledger_id == tc for e in entries) == 60
    assert [e.payload for e in entries if e.ledger_id == still_open] == [b"latest"]


def test_foreign_entry_logs_are_never_adopted_or_deleted(tmp_path):
    with LedgerStorage.open(tmp_path / "s") as st:
        st.add_entry(st.create_ledger({}), b"x")
        st.export(tmp_path / "dump")
    copied = sorted((tmp_path / "dump" / "ledgers" / "current").iterdir())
    with pytest.raises(StorageError, match="has entry logs but no metadata.db"):
        LedgerStorage.open(tmp_path / "dump")
    assert sorted((tmp_path / "dump" / "ledgers" / "current").iterdir()) == copied
    stray = tmp_path / "s" / "ledgers" / "current" / "ff.log"
    stray.write_bytes(entrylog.encode_header())
    with pytest.raises(StorageError, match="ff.log: entry log this storage never created"):
        LedgerStorage.open(tmp_path / "s")
    assert stray.exists()


FILE_SIZE_LIMITED_WRITER = """
import json, resource, signal, sys, threading
from txnadmin.engine.storage import LedgerStorage, StorageError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing us
st = LedgerStorage.open(sys.argv[1], entry_log_size_limit=1 << 30)
ledger = st.create_ledger({})
resource.setrlimit(resource.RLIMIT_FSIZE, (1_500_000, 1_500_000))
results, done = [], threading.Event()
def callback(entry_id, error):
    results.append([entry_id, str(error) if error else None])
    if len(results) == 60:
        done.set()
for i in range(20):
    results.append([st.add_entry(ledger, bytes([i]) * 50_000), None])
for i in range(20, 60):
    st.add_entry_async(ledger, bytes([i]) * 50_000, callback)
done.wait(30)
try:
    st.add_entry(ledger, b"after")
    later = "accepted"
except StorageError as exc:
    later = str(exc)
st.close()
print(json.dumps({"ledger": ledger, "results": results, "later": later}))
"""


def test_a_failing_disk_fails_the_adds_and_stops_writes(tmp_path):
    d = tmp_path / "s"
    done = subprocess.run([sys.executable, "-c", FILE_SIZE_LIMITED_WRITER, str(d)], capture_output=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    out = json.loads(done.stdout)
    ok = [entry for entry, error in out["results"] if error is None]
    failed = [error for entry, error in out["results"] if error is not None]
    assert ok == list(range(len(ok))) and 20 <= len(ok) < 60
    assert len(failed) == 60 - len(ok) and all("write failed" in error for error in failed)
    assert "failed earlier and takes no writes" in out["later"]
    # the writer thread's failure reaches the log once (no logging configured: Python's last-resort stderr handler)
    assert done.stderr.decode().count("write failed") == 1
    assert "takes no more writes until it is reopened" in done.stderr.decode()
    # reopening recovers: acknowledged entries intact, whole records of the failed group kept (they are exactly
    # what was sent), the half-written record cut, appends continue
    with LedgerStorage.open(d) as st:
        ledger = out["ledger"]
        last = st.ledger_metadata(ledger).last_entry_id
        assert len(ok) - 1 <= last < 59
        assert st.read_entries(ledger, 0, last) == [bytes([i]) * 50_000 for i in range(last + 1)]
        assert st.add_entry(ledger, b"next") == last + 1


def test_pipelined_groups_are_indexed_before_they_are_acknowledged(tmp_path):
    """The writer syncs the next group while the indexer commits the last one: still, every add is readable
    through another SQLite connection (what a read-only process uses) by the time its callback runs, also
    across log rotations, and every finished log's indexed end covers all of its records."""
    d = tmp_path / "s"
    unreadable, seen, done = [], [], threading.Event()
    with LedgerStorage.open(d, entry_log_size_limit=4096) as st:
        ledgers = [st.create_ledger({}) for _ in range(8)]

        def callback_for(ledger, payload):
            def callback(entry_id, error):
                try:
                    reader = storage_pkg.LedgerStorage.open(d, read_only=True) if len(seen) % 50 == 0 else st
                    try:
                        if error is not None or reader.read_entry(ledger, entry_id) != payload:
                            unreadable.append((ledger, entry_id, error))
                    finally:
                        if reader is not st:
                            reader.close()
                except Exception as exc:  # noqa: BLE001 - collected, asserted below
                    unreadable.append((ledger, entry_id, exc))
                seen.append(entry_id)
                if len(seen) == 8 * 60:
                    done.set()
            return callback

        def adder(ledger):
            for i in range(60):
                payload = os.urandom(40) + bytes([i])
                st.add_entry_async(ledger, payload, callback_for(ledger, payload))

        threads = [threading.Thread(target=adder, args=(ledger,)) for ledger in ledgers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert done.wait(30)
        assert unreadable == []
        assert len(st.entry_log_files()) > 3
    with LedgerStorage.open(d) as st:  # reopening re-indexes nothing a finished log's data_end left out
        for ledger in ledgers:
            assert st.ledger_metadata(ledger).last_entry_id == 59
            assert len(st.read_entries(ledger, 0, 59)) == 60


def test_a_failing_index_commit_fails_its_group_and_everything_after_in_order(tmp_path, monkeypatch):
    d = tmp_path / "s"
    st = LedgerStorage.open(d)
    ledger = st.create_ledger({})
    for i in range(5):
        st.add_entry(ledger, b"ok %d" % i)
    original = LedgerStorage._commit_index

    def broken(self, db, job):
        raise OSError("disk full")

    monkeypatch.setattr(LedgerStorage, "_commit_index", broken)
    results, done = [], threading.Event()

    def callback_for(i):
        def callback(entry_id, error):
            results.append((i, entry_id, str(error) if error else None))
            if len(results) == 20:
                done.set()
        return callback

    for i in range(20):
        try:
            st.add_entry_async(ledger, b"late %d" % i, callback_for(i))
        except StorageError as exc:  # refused at once once the failure is known: also a failure, in its place
            results.append((i, None, str(exc)))
            if len(results) == 20:
                done.set()
    assert done.wait(30)
    assert [i for i, _, _ in results] == list(range(20))
    assert all(error is not None for _, _, error in results)
    assert "index commit failed (disk full)" in results[0][2]
    with pytest.raises(StorageError, match="failed earlier and takes no writes"):
        st.add_entry(ledger, b"after")
    st.close()
    monkeypatch.setattr(LedgerStorage, "_commit_index", original)
    with LedgerStorage.open(d) as st:  # the synced records were whole: recovery indexes them again
        last = st.ledger_metadata(ledger).last_entry_id
        assert st.read_entries(ledger, 0, 4) == [b"ok %d" % i for i in range(5)]
        assert 4 <= last < 25
        assert st.add_entry(ledger, b"next") == last + 1
