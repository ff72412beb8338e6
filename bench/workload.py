"""The transactional workload as an operator runs it: `txnadmin engine run --rate 0`, batching off vs on.

    python bench/workload.py [--quick] [--seconds 5] [--clients 1,16,64,256] [--curve 1,4] [--delays 5]
                             [--baseline REF] [--brokers 1,3] [--rounds 1] [--write-docs]

For every client count a fresh engine (16 coordinators, as `initialize-transaction-coordinator-metadata` creates by
default; Pulsar standalone creates 1) runs the real CLI in a child process, once with PIP-160
batching off and once on (transaction log and pending-ack stores); the child's CPU time comes from its rusage.
Afterwards the entry logs are read back (read-only storage, every entry CRC-checked and decoded) to count the
transaction-log entries and the records in each batched entry. `--curve` adds runs at the largest client count
with batching on and fewer coordinators: fewer logs share the same load, so each batch holds more records;
`--delays` adds runs there with a longer max delay (16 coordinators), the other knob PIP-160 gives.
`--baseline REF` runs every batching off/on row a second time, right after, with the code of git commit REF
(extracted to a temporary directory), so before and after are measured in the same run on the same machine.
`--brokers 1,3` runs every row once per broker count, side by side (`engine init --brokers N`: one process playing N
brokers, each owning bundles, with its own listener, flags and counters), and adds a table of each count's txn/s
against the first count's. `--rounds R` runs every row R times, the broker counts alternating, and keeps the row with
the median txn/s: on a shared machine one run per row is noise against a ratio of a few percent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _docs import replace_section

from txnadmin.codec import EntryDecodeError, decode_entry
from txnadmin.engine.storage import LedgerStorage

HEADER = "## Transactional workload"


def census(directory: Path) -> dict:
    """Entries and records of the transaction logs and pending-ack stores, read back from the entry logs."""
    out = {"tcEntries": 0, "tcBatched": 0, "tcBatchedRecords": 0, "ackEntries": 0, "ackBatched": 0,
           "ackBatchedRecords": 0}
    storage = LedgerStorage.open(directory, read_only=True)
    try:
        for meta in storage.list_ledgers():
            name = meta.custom_metadata.get("pulsar/managed-ledger", "")
            if "/__transaction_log_" in name:
                kind, prefix = "txn-log", "tc"
            elif name.endswith("__transaction_pending_ack"):
                kind, prefix = "pending-ack", "ack"
            else:
                continue
            if meta.last_entry_id < 0:
                continue
            for payload in storage.read_entries(meta.ledger_id, 0, meta.last_entry_id):
                try:
                    decoded = decode_entry(payload, kind)
                except EntryDecodeError:
                    continue
                out[f"{prefix}Entries"] += 1
                if decoded.batched:
                    out[f"{prefix}Batched"] += 1
                    out[f"{prefix}BatchedRecords"] += len(decoded.records)
    finally:
        storage.close()
    return out


_BASELINE_CPU = [0.0]


def calibrate() -> float:
    """CPU seconds of an `engine run` that does (almost) nothing: interpreter start, imports, opening and closing
    the engine. Subtracted from every run, so CPU per transaction is what the transactions cost."""
    samples = []
    for _ in range(2):
        with tempfile.TemporaryDirectory(prefix="txnadmin-bench-") as tmp:
            engine = Path(tmp) / "engine"
            subprocess.run([sys.executable, "-m", "txnadmin.cli.main", "engine", "init", str(engine)],
                           capture_output=True, cwd=ROOT, check=True)
            _children_usage()
            subprocess.run([sys.executable, "-m", "txnadmin.cli.main", "engine", "run", str(engine), "--rate", "1",
                            "--concurrency", "1", "--duration", "0.01", "-o", "json"],
                           capture_output=True, cwd=ROOT, check=True)
            samples.append(_children_usage())
    _BASELINE_CPU[0] = min(samples)
    return _BASELINE_CPU[0]


def run(batched: bool, clients: int, coordinators: int, seconds: float, delay_ms: int = 1,
        code: Path = ROOT, label: str = "this", brokers: int = 1) -> dict:
    """One row: a fresh engine, `engine run` for ``seconds``, then the census; ``code`` is the source tree to run."""
    flag = "true" if batched else "false"
    with tempfile.TemporaryDirectory(prefix="txnadmin-bench-") as tmp:
        engine = Path(tmp) / "engine"
        several = ["--brokers", str(brokers)] if brokers > 1 else []  # a baseline before --brokers still runs 1
        init = subprocess.run([sys.executable, "-m", "txnadmin.cli.main", "engine", "init", str(engine), *several,
                               "-c", str(coordinators), "--set", f"transactionLogBatchedWriteEnabled={flag}",
                               "--set", f"transactionPendingAckBatchedWriteEnabled={flag}",
                               "--set", f"transactionLogBatchedWriteMaxDelayInMillis={delay_ms}",
                               "--set", f"transactionPendingAckBatchedWriteMaxDelayInMillis={delay_ms}"],
                              capture_output=True, text=True, cwd=code)
        if init.returncode != 0:
            raise SystemExit(f"engine init failed: {init.stderr.strip()}")
        _children_usage()  # leave the init's CPU out
        proc = subprocess.Popen([sys.executable, "-m", "txnadmin.cli.main", "engine", "run", str(engine),
                                 "--rate", "0", "--concurrency", str(clients), "--duration", str(seconds),
                                 "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=code)
        out, err = proc.communicate()
        cpu = max(0.0, _children_usage() - _BASELINE_CPU[0])  # the child's CPU, all threads, user + system
        if proc.returncode != 0:
            raise SystemExit(f"engine run failed: {err.decode().strip()}")
        stats = json.loads(out)
        counted = census(engine)
    tc_batched = counted["tcBatched"]
    ack_batched = counted["ackBatched"]
    return {
        "code": label, "batching": "on" if batched else "off", "clients": clients, "coordinators": coordinators,
        "brokers": brokers,
        "maxDelayMs": delay_ms if batched else None,
        "txnPerSecond": stats["txnPerSecond"], "started": stats["started"], "errors": stats["errors"],
        "cpuMsPerTxn": round(cpu * 1000 / stats["started"], 2) if stats["started"] else None,
        "tcEntries": counted["tcEntries"],
        "tcRecordsPerBatchedEntry": round(counted["tcBatchedRecords"] / tc_batched, 2) if tc_batched else None,
        "ackRecordsPerBatchedEntry": round(counted["ackBatchedRecords"] / ack_batched, 2) if ack_batched else None,
    }


_LAST_CHILD_CPU = [0.0]


def _children_usage() -> float:
    """CPU seconds of the child that just ended (the difference of the cumulated children's rusage)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    spent, _LAST_CHILD_CPU[0] = total - _LAST_CHILD_CPU[0], total
    return spent


COLUMNS = ("code", "batching", "max delay ms", "clients", "coordinators", "brokers", "txn/s", "CPU ms/txn", "txn-log entries",
           "records / batched TC entry", "records / batched pending-ack entry")


def _cells(r: dict) -> list[str]:
    return [r["code"], r["batching"], _fmt(r["maxDelayMs"], "{}"), str(r["clients"]), str(r["coordinators"]),
            str(r["brokers"]), f"{r['txnPerSecond']:,.0f}", str(r["cpuMsPerTxn"]), f"{r['tcEntries']:,}",
            _fmt(r["tcRecordsPerBatchedEntry"]), _fmt(r["ackRecordsPerBatchedEntry"])]


def table(rows: list[dict]) -> Table:
    t = Table(title="txnadmin engine run --rate 0, batching off vs on")
    for col in COLUMNS:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(*_cells(r))
    return t


BROKER_COLUMNS = ("code", "batching", "max delay ms", "clients", "coordinators", "brokers", "txn/s", "vs {first}",
                  "CPU ms/txn", "vs {first} CPU")


def broker_comparison(rows: list[dict], counts: list[int]) -> list[list[str]]:
    """Each row of a broker count other than the first beside the same workload's row at the first count."""
    first = counts[0]
    key = ("code", "batching", "maxDelayMs", "clients", "coordinators")
    at_first = {tuple(r[k] for k in key): r for r in rows if r["brokers"] == first}
    out = []
    for r in rows:
        base = at_first.get(tuple(r[k] for k in key))
        if r["brokers"] == first or base is None:
            continue
        speed = r["txnPerSecond"] / base["txnPerSecond"] if base["txnPerSecond"] else None
        cpu = (r["cpuMsPerTxn"] / base["cpuMsPerTxn"]) if r["cpuMsPerTxn"] and base["cpuMsPerTxn"] else None
        out.append([r["code"], r["batching"], _fmt(r["maxDelayMs"], "{}"), str(r["clients"]), str(r["coordinators"]),
                    f"{r['brokers']} vs {first}", f"{r['txnPerSecond']:,.0f} vs {base['txnPerSecond']:,.0f}",
                    _fmt(speed, "{:.2f}×"), f"{r['cpuMsPerTxn']} vs {base['cpuMsPerTxn']}", _fmt(cpu, "{:.2f}×")])
    return out


def broker_table(compared: list[list[str]], first: int) -> Table:
    t = Table(title=f"the same rows against {first} broker{'' if first == 1 else 's'}, same run")
    for col in BROKER_COLUMNS:
        t.add_column(col.format(first=first), justify="right")
    for cells in compared:
        t.add_row(*cells)
    return t


def _fmt(value, pattern: str = "{:.2f}") -> str:
    return "–" if value is None else pattern.format(value)


def markdown(rows: list[dict], seconds: float, baseline: float, load: tuple[float, float],
             baseline_label: str = "", counts: tuple[int, ...] = (1,), rounds: int = 1) -> str:
    lines = [HEADER, "",
             f"`.venv/bin/python bench/workload.py {' '.join(sys.argv[1:])}` — the real `txnadmin engine "
             "run --rate 0` in a child process per row (fresh engine, default workload: 2 topics, 2 subscriptions, "
             "2 messages and up to 2 acks per transaction, sent and acknowledged together and awaited once before "
             "the commit as with Pulsar's sendAsync / acknowledgeAsync, 10 % aborted), measured "
             f"{time.strftime('%Y-%m-%d')}. Records per batched entry are read back from the entry logs; CPU per "
             f"transaction is the child's user + system time less an idle run's ({baseline:.2f} s). The machine is "
             f"shared: 1-minute load average {load[0]:.1f} before the runs, {load[1]:.1f} after."
             + (f" Rows marked `{baseline_label}` ran the code of commit {baseline_label} (`--baseline`) right after "
                "the `this` row above them, for a before/after comparison at the same moment." if baseline_label
                else ""), "",
             "| " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * (len(COLUMNS) - 1)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    if rounds > 1:
        lines[2] += (f" Each row is the median (by txn/s) of {rounds} runs, the broker counts alternating.")
    compared = broker_comparison(rows, list(counts))
    if compared:
        first = counts[0]
        lines += ["", f"Each row at more brokers against the same workload at {first} broker"
                  f"{'' if first == 1 else 's'}, from the table above (same run):", "",
                  "| " + " | ".join(c.format(first=first) for c in BROKER_COLUMNS) + " |",
                  "|---|" + "---:|" * (len(BROKER_COLUMNS) - 1)]
        lines += ["| " + " | ".join(cells) + " |" for cells in compared]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", default="1,16,64,256")
    parser.add_argument("--curve", default="1,4", help="coordinator counts for extra runs at the largest client "
                                                        "count with batching on ('' for none)")
    parser.add_argument("--delays", default="5", help="max delays (ms) for extra runs at the largest client "
                                                       "count, 16 coordinators, batching on ('' for none)")
    parser.add_argument("--baseline", default="", help="git commit whose code runs each off/on row again, for a "
                                                          "same-run before/after comparison")
    parser.add_argument("--brokers", default="1", help="broker counts (engine init --brokers N) to run every row "
                                                        "with, side by side, e.g. 1,3")
    parser.add_argument("--rounds", type=int, default=1, help="runs per row, broker counts alternating; the row "
                                                               "with the median txn/s is kept")
    parser.add_argument("--quick", action="store_true", help="1-second runs at 1 and 16 clients, a smoke check")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    clients = [1, 16] if args.quick else [int(c) for c in args.clients.split(",") if c]
    curve = [] if args.quick else [int(c) for c in args.curve.split(",") if c]
    delays = [] if args.quick else [int(d) for d in args.delays.split(",") if d]
    counts = [int(b) for b in args.brokers.split(",") if b] or [1]
    rounds = max(1, args.rounds)
    console = Console()
    baseline = calibrate()
    load_before = os.getloadavg()[0]
    rows = []
    baseline_dir = tempfile.TemporaryDirectory(prefix="txnadmin-baseline-") if args.baseline else None
    if baseline_dir is not None:
        archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", baseline_dir.name], input=archive.stdout, check=True)
        label = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()

    def rows_of(batched: bool, count: int, coordinators: int, delay: int = 1, baseline: bool = False) -> None:
        """One workload at every broker count (each ``rounds`` times, alternating), then its baseline rows."""
        codes = [(ROOT, "this")] + ([(Path(baseline_dir.name), label)] if baseline and baseline_dir else [])
        for code, name in codes:
            runs: dict[int, list[dict]] = {b: [] for b in counts}
            for _ in range(rounds):
                for brokers in counts:
                    runs[brokers].append(run(batched, count, coordinators, seconds, delay, code, name, brokers))
                    console.print(runs[brokers][-1])
            for brokers in counts:
                rows.append(sorted(runs[brokers], key=lambda r: r["txnPerSecond"])[(rounds - 1) // 2])

    for count in clients:
        for batched in (False, True):
            rows_of(batched, count, 16, baseline=True)
    for coordinators in curve:
        rows_of(True, max(clients), coordinators)
    for delay in delays:
        rows_of(True, max(clients), 16, delay)
    load_after = os.getloadavg()[0]
    if baseline_dir is not None:
        baseline_dir.cleanup()
    console.print(table(rows))
    if len(counts) > 1:
        console.print(broker_table(broker_comparison(rows, counts), counts[0]))
    console.print(f"CPU baseline of an idle engine run: {baseline:.2f} s (subtracted); "
                  f"1-minute load average {load_before:.1f} before, {load_after:.1f} after")
    if args.write_docs:
        replace_section(HEADER, markdown(rows, seconds, baseline, (load_before, load_after),
                                         label if baseline_dir is not None else "", tuple(counts), rounds))
        console.print(f"recorded in docs/benchmarks.md ({HEADER})")


if __name__ == "__main__":
    main()
