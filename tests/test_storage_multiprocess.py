"""One writer process per directory, any number of read-only processes beside it (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from txnadmin.engine.storage import EngineLockedError, LedgerStorage, entrylog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from storage_crash_child import payload

ROOT = HERE.parent


def test_reader_sees_every_acknowledged_entry_of_a_live_writer_process(tmp_path):
    directory = tmp_path / "s"
    writer = subprocess.Popen([sys.executable, str(HERE / "storage_crash_child.py"), str(directory), "1",
                               str(1 << 20)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert writer.stdout.readline() == b"READY\n"
        with pytest.raises(EngineLockedError) as info:
            LedgerStorage.open(directory)
        assert str(info.value) == (f"{directory}: already open for writing by process {writer.pid}; "
                                   "stop it or open read-only")
        with LedgerStorage.open(directory, read_only=True) as reader:
            checked = 0
            while checked < 300:
                fields = writer.stdout.readline().decode().split()
                if fields[0] != "A":
                    continue  # the child's closes and deletes of scratch ledgers
                ledger, entry = int(fields[1]), int(fields[2])
                # the index is committed before the ack, so an acknowledged entry is readable at once
                assert reader.read_entry(ledger, entry) == payload(ledger, entry)
                assert reader.ledger_metadata(ledger).last_entry_id >= entry
                checked += 1
            assert {m.ledger_id for m in reader.list_ledgers()} >= {ledger}
            # a dump taken beside the busy writer is a consistent set of whole, CRC-correct entry logs
            summary = reader.export(tmp_path / "dump")
        listed = [int(line.split(": ")[1]) for line in (tmp_path / "dump" / "ledgers.txt").read_text().splitlines()
                  if line.startswith("ledgerID: ")]
        assert ledger in listed and summary["ledgers"] == len(listed)
        dumped: dict[int, set[int]] = {}
        for path in sorted((tmp_path / "dump" / "ledgers" / "current").glob("*.log")):
            for _, stored in entrylog.iter_entries(path):
                assert stored.payload == payload(stored.ledger_id, stored.entry_id)
                dumped.setdefault(stored.ledger_id, set()).add(stored.entry_id)
            data = path.read_bytes()
            header = entrylog.decode_header(data)
            end = header.ledgers_map_offset if header.finished else len(data)
            fd = os.open(path, os.O_RDONLY)
            try:
                assert entrylog.scan_records(fd, entrylog.HEADER_SIZE, end).end == end
            finally:
                os.close(fd)
        assert set(range(entry + 1)) <= dumped[ledger]
    finally:
        writer.kill()
        writer.communicate()
    # the lock dies with its holder
    with LedgerStorage.open(directory) as st:
        assert st.ledger_metadata(ledger).last_entry_id >= entry


READER = """
import json, sys
from txnadmin.engine.storage import LedgerStorage, EngineLockedError
directory = sys.argv[1]
try:
    LedgerStorage.open(directory)
    print(json.dumps({"locked": False}))
except EngineLockedError as exc:
    with LedgerStorage.open(directory, read_only=True) as ro:
        ledgers = {str(m.ledger_id): [e.decode() for e in ro.read_entries(m.ledger_id, 0, m.last_entry_id)]
                   for m in ro.list_ledgers()}
        print(json.dumps({"locked": True, "error": str(exc), "ledgers": ledgers,
                          "meta": ro.meta_get("owner").decode()}))
"""


def test_read_only_process_beside_a_writer_in_this_process(tmp_path):
    directory = tmp_path / "s"
    with LedgerStorage.open(directory) as st:
        ledger = st.create_ledger({})
        for i in range(20):
            st.add_entry(ledger, f"entry {i}".encode())
        st.meta_put("owner", b"test")
        done = subprocess.run([sys.executable, "-c", READER, str(directory)], capture_output=True, cwd=ROOT,
                              timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        seen = json.loads(done.stdout)
        assert seen["locked"] is True
        assert "already open for writing by process" in seen["error"] and str(directory) in seen["error"]
        assert seen["ledgers"] == {str(ledger): [f"entry {i}" for i in range(20)]}
        assert seen["meta"] == "test"
        # the writer keeps working after a reader has come and gone
        assert st.add_entry(ledger, b"entry 20") == 20
