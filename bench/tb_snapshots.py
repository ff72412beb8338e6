"""Transaction-buffer snapshots: single vs segmented (PIP-196) vs segmented with on-demand segments,
and recovery reads of namespace snapshot logs with and without the shared reader.

    python bench/tb_snapshots.py [--aborts 1000000] [--namespaces 10] [--topics 1000] [--write-docs]

Part 1 drives one topic's aborted-transaction processor on real engine storage: N aborted
transactions (16 coordinators, marker positions spread over ledgers of 50,000 entries), then one
snapshot update. It reports the bytes that update appends, the snapshot bytes written while the
aborts arrived (segment seals), the time and peak Python memory of recovering the processor in a
fresh engine, the memory it keeps afterwards, and the time of 10,000 abort checks (plus 10,000 for
transactions that were never aborted) in the order a reader meets them. Single is the baseline (Pulsar's default); segmented loads every segment at
recovery, as Pulsar does; on-demand is ours.

Part 2 writes one small snapshot per topic into each namespace's snapshot log (interleaved), then
recovers every topic through a fresh service: one private reader per topic (the baseline, what
brokers did before readers were shared) vs one shared reader per namespace. It counts entries read.
Part 3 does the same through a real engine: one aborted transaction (and snapshot) per topic, then
an engine restart with each reader setting, counting snapshot entries read and timing the open.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _docs import replace_section
from rich.console import Console
from rich.table import Table

from txnadmin.engine.config import EngineConfig
from txnadmin.engine.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from txnadmin.engine.position import Position
from txnadmin.engine.storage import LedgerStorage
from txnadmin.engine.segmented_snapshot_processor import SegmentedSnapshotProcessor
from txnadmin.engine.single_snapshot_processor import SingleSnapshotProcessor
from txnadmin.engine.tb_snapshot import SNAPSHOT_TOPIC, SnapshotService, segment_capacity

TOPIC = "persistent://public/default/payments-with-long-retention"
VARIANTS = {
    "single (baseline)": dict(kind="single"),
    "segmented, all loaded (Pulsar)": dict(kind="segmented", on_demand=False),
    "segmented, on demand (ours)": dict(kind="segmented", on_demand=True),
}


def _service(directory: Path) -> tuple[LedgerStorage, SnapshotService]:
    storage = LedgerStorage.open(directory, entry_log_size_limit=256 * 1024 * 1024)
    return storage, SnapshotService(ManagedLedgerFactory(storage), lambda: ManagedLedgerConfig())


def _processor(service: SnapshotService, spec: dict):
    args = (TOPIC, service, lambda: int(time.time() * 1000))
    if spec["kind"] == "single":
        return SingleSnapshotProcessor(*args)
    capacity = segment_capacity(EngineConfig().transactionBufferSnapshotSegmentSize, TOPIC)
    return SegmentedSnapshotProcessor(*args, capacity=capacity, on_demand=spec["on_demand"], cache_segments=4)


def aborted_workload(n: int, seed: int = 1):
    """(txn, marker position, first message position) in marker order, from 16 coordinators."""
    rng = random.Random(seed)
    seqs = [0] * 16
    out = []
    for i in range(n):
        tc = rng.randrange(16)
        txn = (tc, seqs[tc])
        seqs[tc] += 1
        entry = 3 * i + 2
        marker = Position(10 + entry // 50_000, entry % 50_000)
        first = Position(10 + (entry - 2) // 50_000, (entry - 2) % 50_000)
        out.append((txn, marker, first))
    return out


def run_variant(name: str, spec: dict, work, tmp: Path) -> dict:
    directory = tmp / name.split()[0] / ("od" if spec.get("on_demand") else "all")
    directory.mkdir(parents=True)
    last_marker = work[-1][1]
    mrp = Position(last_marker.ledger_id, last_marker.entry_id)
    storage, service = _service(directory)
    proc = _processor(service, spec)

    def snapshot_position() -> Position:  # the buffer's part: every snapshot says replay resumes after the last marker
        return mrp

    t = time.perf_counter()
    for txn, marker, _ in work:
        proc.put_aborted(txn, marker, snapshot_position)
    build_s = time.perf_counter() - t
    during = proc.bytes_written
    proc.take_snapshot(snapshot_position)
    update_bytes = proc.bytes_written - during
    service.close()
    storage.close()
    del proc
    gc.collect()

    def recover():
        storage, service = _service(directory)
        proc = _processor(service, spec)
        proc.recover(0)
        return storage, service, proc

    t = time.perf_counter()
    storage, service, proc = recover()
    recover_s = time.perf_counter() - t
    rng = random.Random(2)
    # a reader's order: sampled transactions checked at their message positions, front to back
    sample = sorted((work[rng.randrange(len(work))] for _ in range(10_000)), key=lambda w: w[2])
    t = time.perf_counter()
    wrong = sum(1 for txn, _, first in sample if not proc.is_aborted(txn, first))
    wrong += sum(1 for txn, _, first in sample if proc.is_aborted((txn[0], txn[1] + 10**9), first))
    check_s = time.perf_counter() - t
    assert wrong == 0, f"{name}: {wrong} wrong abort checks"
    assert proc.aborted_count() == len(work)
    service.close()
    storage.close()
    del proc, service, storage
    gc.collect()

    tracemalloc.start()
    storage, service, proc = recover()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    service.close()
    storage.close()
    return {"variant": name, "update_bytes": update_bytes, "during_bytes": during, "build_s": build_s,
            "recover_s": recover_s, "peak_mb": peak / 2**20, "kept_mb": current / 2**20, "check_s": check_s}


def shared_reader(namespaces: int, topics: int, tmp: Path) -> list[dict]:
    storage, writer = _service(tmp / "namespaces")
    names = {f"tenant/ns{n}": [f"persistent://tenant/ns{n}/topic-{i}" for i in range(topics)]
             for n in range(namespaces)}
    for i in range(topics):  # interleaved across namespaces and topics, as brokers write them
        for ns, ts in names.items():
            writer.write(ns, SNAPSHOT_TOPIC, ts[i], {"topicName": ts[i], "maxReadPosition":
                                                     {"ledgerId": 7, "entryId": i}, "aborts": [[0, i, 7, i]]})
    writer.close()
    rows = []
    for label, shared in [("one reader per topic (baseline)", False), ("shared per namespace (ours)", True)]:
        service = SnapshotService(ManagedLedgerFactory(storage), lambda: ManagedLedgerConfig(), shared_reader=shared)
        t = time.perf_counter()
        found = 0
        for ns, ts in names.items():
            for topic in ts:
                value = service.read_latest(ns, SNAPSHOT_TOPIC, topic)
                found += value is not None and value["topicName"] == topic
        elapsed = time.perf_counter() - t
        assert found == namespaces * topics
        rows.append({"reader": label, "reads": service.recovery_reads[SNAPSHOT_TOPIC], "seconds": elapsed})
        service.close()
    storage.close()
    return rows


def engine_restart(namespaces: int, topics: int, tmp: Path) -> list[dict]:
    """The same comparison through a real engine restart: every topic recovers its transaction buffer."""
    from txnadmin.engine.engine import Engine

    directory = tmp / "engine"
    config = EngineConfig()
    config.transactionCoordinatorCount = 4
    config.transactionBufferSnapshotMaxTransactionCount = 1  # every topic has a snapshot after its one abort
    config.save(directory)
    engine = Engine(directory, EngineConfig.load(directory), maintenance=False)
    for i in range(topics):
        for n in range(namespaces):
            txn = engine.begin()
            engine.produce(txn, f"persistent://tenant/ns{n}/topic-{i}", b"x")
            engine.abort(txn)
    engine.close()
    rows = []
    for label, shared in [("one reader per topic (baseline)", False), ("shared per namespace (ours)", True)]:
        config = EngineConfig.load(directory)
        config.engineTransactionBufferSharedSnapshotReader = shared
        config.save(directory)
        t = time.perf_counter()
        engine = Engine(directory, EngineConfig.load(directory), maintenance=False)
        elapsed = time.perf_counter() - t
        recovered = sum(t.buffer.processor.aborted_count() for t in engine.topics.values())
        assert recovered == namespaces * topics, recovered
        rows.append({"reader": label, "reads": engine.snapshots.recovery_reads[SNAPSHOT_TOPIC], "seconds": elapsed})
        engine.close()
    return rows


def _tables(title: str, columns: list[str], rows: list[list[str]]) -> tuple[Table, list[str]]:
    """The same rows as a rich table for the terminal and as Markdown lines for docs/benchmarks.md."""
    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    lines = ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]
    for cells in rows:
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    return table, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aborts", type=int, default=1_000_000)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    console = Console(width=170)
    capacity = segment_capacity(EngineConfig().transactionBufferSnapshotSegmentSize, TOPIC)
    with tempfile.TemporaryDirectory() as tmp:
        work = aborted_workload(args.aborts)
        results = []
        for name, spec in VARIANTS.items():
            console.print(f"[dim]{name}: {args.aborts:,} aborted transactions …[/dim]")
            results.append(run_variant(name, spec, work, Path(tmp)))
        del work
        console.print(f"[dim]{args.namespaces} namespaces × {args.topics} topics …[/dim]")
        readers = shared_reader(args.namespaces, args.topics, Path(tmp))
        console.print(f"[dim]engine restart with {args.namespaces} × {args.topics} topics …[/dim]")
        restarts = engine_restart(args.namespaces, args.topics, Path(tmp))

    t1, lines1 = _tables(
        f"{args.aborts:,} aborted transactions on one topic (segment capacity {capacity:,})",
        ["variant", "bytes per snapshot update", "bytes written while aborting", "recovery s", "recovery peak MiB",
         "kept after recovery MiB", "10k abort checks in read order s"],
        [[r["variant"], f"{r['update_bytes']:,}", f"{r['during_bytes']:,}", f"{r['recover_s']:.2f}",
          f"{r['peak_mb']:.1f}", f"{r['kept_mb']:.1f}", f"{r['check_s']:.3f}"] for r in results])
    t2, lines2 = _tables(f"Recovery reads: {args.namespaces} namespaces × {args.topics} topics",
                         ["reader", "entries read", "seconds"],
                         [[r["reader"], f"{r['reads']:,}", f"{r['seconds']:.1f}"] for r in readers])
    t3, lines3 = _tables(f"Engine restart: {args.namespaces} namespaces × {args.topics} topics, each with a snapshot",
                         ["reader", "snapshot entries read", "engine open s"],
                         [[r["reader"], f"{r['reads']:,}", f"{r['seconds']:.1f}"] for r in restarts])
    for table in (t1, t2, t3):
        console.print(table)
    if args.write_docs:
        section = "\n".join([
            "## Transaction-buffer snapshots",
            "",
            f"`python bench/tb_snapshots.py --aborts {args.aborts} --namespaces {args.namespaces} "
            f"--topics {args.topics} --write-docs`, measured {time.strftime('%Y-%m-%d')}.",
            "",
            f"One topic, {args.aborts:,} aborted transactions (segment capacity {capacity:,}):",
            "",
            *lines1,
            "",
            f"Recovery reads through the snapshot service, {args.namespaces} namespaces × {args.topics} topics:",
            "",
            *lines2,
            "",
            f"The same through a real engine restart ({args.namespaces * args.topics:,} topics, one snapshot each):",
            "",
            *lines3,
            "",
        ])
        replace_section("## Transaction-buffer snapshots", section)
        console.print("[green]docs/benchmarks.md updated[/green]")


if __name__ == "__main__":
    main()
