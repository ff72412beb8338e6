"""Child process of the storage crash test: appends under load and prints every acknowledged entry.

Usage: storage_crash_child.py DIRECTORY SEED ENTRY_LOG_SIZE_LIMIT

stdout lines (each flushed): `READY`, `A <ledger> <entry>` once an add is acknowledged, `c <ledger>` / `C <ledger>`
before / after closing a ledger, `d <ledger>` / `D <ledger>` before / after deleting one. Every entry of every
ledger is `payload(ledger, entry)`. A background thread keeps deleting scratch ledgers and compacting. The parent
SIGKILLs us.
"""

from __future__ import annotations

import random
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from txnadmin.engine.storage import LedgerStorage


def payload(ledger_id: int, entry_id: int) -> bytes:
    """What the child writes at (ledger, entry); the parent recomputes it."""
    rnd = random.Random(ledger_id * 1_000_003 + entry_id)
    size = rnd.randint(0, 20_000) if rnd.random() < 0.02 else rnd.randint(0, 400)
    return rnd.randbytes(size)


_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    directory, seed, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rnd = random.Random(seed)
    st = LedgerStorage.open(directory, entry_log_size_limit=limit)
    ledgers = [m.ledger_id for m in st.list_ledgers() if m.state == "OPEN"]
    ledgers += [st.create_ledger({"run": str(seed)}) for _ in range(2)]
    say("READY")
    # one thread retires ledgers: close the oldest open ones, delete the oldest closed ones, then compact
    retiring = set(ledgers[:max(0, len(ledgers) - 4)])
    writable = [ledger for ledger in ledgers if ledger not in retiring]

    def retire() -> None:
        for ledger in sorted(retiring):
            say(f"c {ledger}")
            st.close_ledger(ledger)
            say(f"C {ledger}")
        closed = [m.ledger_id for m in st.list_ledgers() if m.state == "CLOSED"]
        for ledger in closed[:max(0, len(closed) - 3)]:
            say(f"d {ledger}")
            st.delete_ledger(ledger)
            say(f"D {ledger}")
        st.compact()
        # then keep making garbage and collecting it, so kills often land inside a compaction
        while True:
            scratch = st.create_ledger({"scratch": "yes"})
            for entry in range(rnd.randint(5, 60)):
                st.add_entry(scratch, payload(scratch, entry))
            st.close_ledger(scratch)
            say(f"d {scratch}")
            st.delete_ledger(scratch)
            say(f"D {scratch}")
            st.compact()

    def sync_adder(worker: int) -> None:
        mine = random.Random(seed * 100 + worker)
        while True:
            ledger = mine.choice(writable)
            # the entry id is only known after the add, so the payload is computed from the expected next id
            with locks[ledger]:
                entry = next_ids[ledger]
                entry_id = st.add_entry(ledger, payload(ledger, entry))
                next_ids[ledger] = entry_id + 1
            assert entry_id == entry, (entry_id, entry)
            say(f"A {ledger} {entry_id}")

    locks = {ledger: threading.Lock() for ledger in ledgers}
    next_ids = {ledger: st.ledger_metadata(ledger).last_entry_id + 1 for ledger in ledgers}
    # the main thread submits async bursts to one ledger of its own, many adds per fsync
    own = writable.pop()
    threading.Thread(target=retire, daemon=True).start()
    for worker in range(4):
        threading.Thread(target=sync_adder, args=(worker,), daemon=True).start()
    while True:
        for _ in range(rnd.randint(1, 50)):
            with locks[own]:
                entry = next_ids[own]
                next_ids[own] = entry + 1
                st.add_entry_async(own, payload(own, entry), _ack(own, entry))
        st.flush()


def _ack(ledger: int, expected: int):
    def callback(entry_id, error):
        if error is None:
            assert entry_id == expected, (entry_id, expected)
            say(f"A {ledger} {entry_id}")
    return callback


if __name__ == "__main__":
    main()
