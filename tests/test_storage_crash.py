"""Crash test: a real child process appends under load and is SIGKILLed at random moments, over and over.

After every kill the parent reopens the directory and checks: every acknowledged entry reads back byte-identical;
anything beyond the acknowledged entries is exactly what the child would have written; no damaged record is
served or left behind; closes and deletes that returned stay done; and appending continues.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from txnadmin.engine.storage import EntryNotFoundError, LedgerStorage, entrylog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from storage_crash_child import payload

RUNS = 22
LOG_LIMIT = 96 * 1024  # small, so kills land during rotation too


def run_child(directory: Path, seed: int, kill_after: float, out: Path) -> None:
    with open(out, "wb") as stdout:
        proc = subprocess.Popen([sys.executable, str(HERE / "storage_crash_child.py"), str(directory), str(seed),
                                 str(LOG_LIMIT)], stdout=stdout, stderr=subprocess.PIPE)
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
    # the child never exits on its own; anything else is a crash of its own we must see
    assert proc.returncode == -signal.SIGKILL, stderr.decode()[-2000:]


def parse(out: Path) -> list[tuple[str, int, int]]:
    events = []
    for line in out.read_bytes().split(b"\n")[:-1]:  # a line cut by the kill has no newline
        parts = line.decode().split()
        if parts[0] == "READY":
            continue
        events.append((parts[0], int(parts[1]), int(parts[2]) if len(parts) > 2 else -1))
    return events


def check_entry_logs(files: list[Path]) -> None:
    """Every record left on disk is whole and CRC-correct, up to the ledgers map or the end of the file."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            header = entrylog.decode_header(os.pread(fd, entrylog.HEADER_SIZE, 0))
            end = header.ledgers_map_offset if header.finished else size
            scan = entrylog.scan_records(fd, entrylog.HEADER_SIZE, end)
            assert scan.end == end, f"{path.name}: {scan.stop_reason}"
        finally:
            os.close(fd)


@pytest.mark.slow
def test_sigkill_under_load_never_loses_or_invents_entries(tmp_path):
    directory = tmp_path / "storage"
    rnd = random.Random(int(os.environ.get("STORAGE_CRASH_SEED", "20261122")))
    acked: dict[int, int] = {}  # ledger -> highest acknowledged entry
    closed: set[int] = set()
    deleted: set[int] = set()
    maybe_deleted: set[int] = set()
    total_acks = 0
    for run in range(RUNS):
        out = tmp_path / f"run{run}.out"
        # every fourth kill comes early, while the child is still opening (recovering) the directory
        run_child(directory, run, rnd.uniform(0.02, 0.15) if run % 4 == 3 else rnd.uniform(0.15, 0.8), out)
        for kind, ledger, entry in parse(out):
            if kind == "A":
                acked[ledger] = max(acked.get(ledger, -1), entry)
                total_acks += 1
            elif kind == "C":
                closed.add(ledger)
            elif kind == "d":
                maybe_deleted.add(ledger)
            elif kind == "D":
                deleted.add(ledger)

        with LedgerStorage.open(directory, entry_log_size_limit=LOG_LIMIT) as st:
            live = {meta.ledger_id: meta for meta in st.list_ledgers()}
            assert not deleted & live.keys(), "a delete that returned came back"
            for ledger in acked.keys() - maybe_deleted:
                assert ledger in live, f"run {run}: ledger {ledger} with acknowledged entries vanished"
            for ledger in closed - deleted:
                if ledger in live:
                    assert live[ledger].state == "CLOSED"
            for ledger, meta in live.items():
                assert meta.last_entry_id >= acked.get(ledger, -1), f"run {run}: ledger {ledger} lost acked entries"
                if meta.last_entry_id >= 0:
                    got = st.read_entries(ledger, 0, meta.last_entry_id)
                    for entry_id, data in enumerate(got):
                        assert data == payload(ledger, entry_id), f"run {run}: ledger {ledger} entry {entry_id}"
                    assert meta.length == sum(map(len, got))
                with pytest.raises(EntryNotFoundError):
                    st.read_entry(ledger, meta.last_entry_id + 1)
            check_entry_logs(st.entry_log_files())
            # appending continues after recovery, with the next id
            for ledger, meta in live.items():
                if meta.state == "OPEN":
                    assert st.add_entry(ledger, payload(ledger, meta.last_entry_id + 1)) == meta.last_entry_id + 1
    # the kills must have landed while the child was busy, or this test proves nothing
    assert total_acks > RUNS * 20
    assert deleted and closed
