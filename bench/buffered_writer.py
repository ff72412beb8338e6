"""Batched vs unbatched transaction-log writes on real engine storage.

    python bench/buffered_writer.py [--quick] [--seconds 3] [--appenders 1,16,256] [--write-docs]

Each appender is a thread that writes one coordinator record and waits for its durable ack before
the next, as transactions do. Both modes run in this process, on the same disk, back to back.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _docs import replace_section

from txnadmin.codec import TransactionMetadataEntry, TxnOp
from txnadmin.engine.buffered_writer import BufferedWriter, BufferedWriterConfig
from txnadmin.engine.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from txnadmin.engine.storage import LedgerStorage
from txnadmin.names import transaction_log_name


def record(seq: int) -> bytes:
    return TransactionMetadataEntry(metadata_op=TxnOp.NEW, txnid_most_bits=0, txnid_least_bits=seq, timeout_ms=60000,
                                    start_time=1700000000000, last_modification_time=1700000000000,
                                    max_local_txn_id=seq, owner="bench").SerializeToString()


def run(batched: bool, appenders: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        storage = LedgerStorage.open(tmp)
        ml = ManagedLedgerFactory(storage).open(transaction_log_name(0),
                                                ManagedLedgerConfig(max_entries_per_ledger=10**9))
        config = BufferedWriterConfig(enabled=batched, max_records=512, max_size=4 * 1024 * 1024, max_delay_ms=1)
        writer = BufferedWriter(ml, config, name="bench")
        latencies: list[list[float]] = [[] for _ in range(appenders)]
        stop = time.monotonic() + seconds

        def appender(i: int) -> None:
            seq = i * 10_000_000
            out = latencies[i]
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                writer.add_sync(record(seq))
                out.append(time.perf_counter() - t0)
                seq += 1

        threads = [threading.Thread(target=appender, args=(i,)) for i in range(appenders)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        writer.close()
        entries = ml.internal_stats()["numberOfEntries"]
        ml.close()
        storage.close()
    all_lat = sorted(x for lst in latencies for x in lst)
    records = len(all_lat)
    return {
        "records": records, "entries": entries, "recordsPerEntry": records / entries if entries else 0.0,
        "recordsPerSecond": records / elapsed,
        "p50ms": statistics.median(all_lat) * 1000 if all_lat else 0.0,
        "p99ms": all_lat[int(len(all_lat) * 0.99) - 1] * 1000 if all_lat else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="Length of each run.")
    parser.add_argument("--quick", action="store_true", help="Half-second runs: a smoke check, not a measurement.")
    parser.add_argument("--appenders", default="1,16,256")
    parser.add_argument("--write-docs", action="store_true", help="Record the table in docs/benchmarks.md.")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 0.5
    table = Table(title=f"Buffered writer: unbatched vs batched ({args.seconds:g} s per run, max delay 1 ms)")
    for col in ("appenders", "mode", "entries", "records/entry", "durable records/s", "p50 ms", "p99 ms",
                "speed-up"):
        table.add_column(col, justify="right")
    rows = []
    for n in [int(x) for x in args.appenders.split(",")]:
        plain = run(False, n, args.seconds)
        batched = run(True, n, args.seconds)
        ratio = batched["recordsPerSecond"] / plain["recordsPerSecond"] if plain["recordsPerSecond"] else 0
        for mode, r, speed in (("unbatched", plain, ""), ("batched", batched, f"{ratio:0.1f}×")):
            row = (str(n), mode, str(r["entries"]), f"{r['recordsPerEntry']:0.1f}", f"{r['recordsPerSecond']:0.0f}",
                   f"{r['p50ms']:0.2f}", f"{r['p99ms']:0.2f}", speed)
            table.add_row(*row)
            rows.append(row)
    Console(width=max(Console().width, 110)).print(table)
    if args.write_docs:
        write_docs(rows, args.seconds)


def write_docs(rows, seconds: float) -> None:
    header = "## Buffered writer"
    lines = [header, "",
             f"`python bench/buffered_writer.py --seconds {seconds:g}`: each appender thread writes one coordinator "
             "record and waits for its durable ack; unbatched and batched runs in the same process, same disk.", "",
             "| appenders | mode | entries | records/entry | durable records/s | p50 ms | p99 ms | speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    replace_section(header, "\n".join(lines) + "\n\n")  # the blank line keeps the next section apart


if __name__ == "__main__":
    main()
