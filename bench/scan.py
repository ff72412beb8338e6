"""How fast the scan reads entry logs, against the I/O floor, in one run.

    python bench/scan.py [--gib 1.0] [--files 8] [--dir DIR] [--write-docs]

Generates entry logs of 1 KiB entries (a few transaction ledgers among many message ledgers), then
times: `cat` with a cold page cache (files evicted with posix_fadvise DONTNEED) and a warm one, a naive
per-record Python loop, txnadmin's in-process path, and the Spark path on local[1] and local[2]
(each in its own process; session start reported apart). Prints MB/s and ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import google_crc32c  # noqa: E402
from _docs import replace_section  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

ENTRY = 1024


def generate(directory: Path, total_bytes: int, files: int) -> list[Path]:
    import dumpgen as g

    directory.mkdir(parents=True, exist_ok=True)
    batched = g.batched(8)
    message = g.pulsar_message(1)
    pad = lambda p: p + bytes(ENTRY - len(p)) if len(p) < ENTRY else p  # noqa: E731
    payloads = [pad(batched), pad(message)]
    per_file = total_bytes // files
    paths = []
    entry_ids: dict[int, int] = {}
    for n in range(files):
        path = directory / f"{n:x}.log"
        with open(path, "wb") as fh:
            fh.write(b"BKLO" + struct.pack(">i", 1) + bytes(1016))
            written, chunk = 1024, bytearray()
            i = 0
            while written < per_file:
                ledger = 100 + (i % 50)  # ledgers 100..101 are transaction ledgers, the rest messages
                payload = payloads[0] if ledger < 102 else payloads[1]
                eid = entry_ids.get(ledger, 0)
                entry_ids[ledger] = eid + 1
                head = struct.pack(">qqqq", ledger, eid, eid - 1, (eid + 1) * ENTRY)
                record = head + struct.pack(">I", google_crc32c.value(head + payload)) + payload
                chunk += struct.pack(">i", len(record)) + record
                written += 4 + len(record)
                i += 1
                if len(chunk) > 8 << 20:
                    fh.write(chunk)
                    chunk = bytearray()
            fh.write(chunk)
        paths.append(path)
    ledgers = {100: "pulsar/system/persistent/__transaction_log_0", 101: "pulsar/system/persistent/__transaction_log_1"}
    ledgers.update({lid: f"public/default/persistent/topic-{lid}" for lid in range(102, 150)})
    g.ledger_list(directory.parent / "ledgers.txt", ledgers)
    return paths


def evict(paths) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd) if False else None
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def naive(paths) -> int:
    """The obvious loop: read each record's header and payload, check the prefix."""
    found = 0
    for p in paths:
        with open(p, "rb") as fh:
            fh.seek(1024)
            while True:
                head = fh.read(4)
                if len(head) < 4:
                    break
                (size,) = struct.unpack(">i", head)
                record = fh.read(size)
                if record[36:40] == b"\x0e\x01\x00\x01":
                    found += 1
    return found


def spark_run(directory: Path, master: str) -> dict:
    code = (
        "import json, sys, time\n"
        "t = time.perf_counter()\n"
        "from txnadmin.scan.spark import spark_session\n"
        f"spark = spark_session({master!r}); spark.range(1).count()\n"
        "start = time.perf_counter() - t\n"
        "from txnadmin.scan import run_scan\n"
        "t = time.perf_counter()\n"
        f"r = run_scan([{str(directory)!r}], {str(directory.parent / 'ledgers.txt')!r}, engine='spark', master={master!r})\n"
        "print(json.dumps({'session': start, 'scan': time.perf_counter() - t, 'batched': r.live_batched_entries}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp) / "current"
        paths = generate(directory, int(args.gib * (1 << 30)), args.files)
        size = sum(p.stat().st_size for p in paths)
        mb = size / 1e6
        rows = []
        evict(paths)
        cold = timed(lambda: subprocess.run(["cat", *map(str, paths)], stdout=subprocess.DEVNULL, check=True))
        warm = timed(lambda: subprocess.run(["cat", *map(str, paths)], stdout=subprocess.DEVNULL, check=True))
        rows.append(("cat, cold page cache", cold))
        rows.append(("cat, warm page cache", warm))
        evict(paths)
        rows.append(("naive per-record Python loop (cold)", timed(lambda: naive(paths))))
        from txnadmin.scan import run_scan

        evict(paths)
        rows.append(("txnadmin in-process (cold)", timed(lambda: run_scan([str(directory)], directory.parent / "ledgers.txt",
                                                                          engine="python"))))
        spark_rows = []
        for master in ("local[1]", "local[2]"):
            evict(paths)
            r = spark_run(directory, master)
            rows.append((f"txnadmin Spark {master} (cold)", r["scan"]))
            spark_rows.append((master, r["session"]))
    table = Table(title=f"Scan throughput over {mb:,.0f} MB of entry logs (1 KiB entries)")
    for col in ("path", "seconds", "MB/s", "vs cold cat"):
        table.add_column(col, justify="right")
    lines = []
    for name, secs in rows:
        row = (name, f"{secs:0.2f}", f"{mb / secs:0.0f}", f"{cold / secs:0.0%}")
        table.add_row(*row)
        lines.append(row)
    console = Console()
    console.print(table)
    for master, secs in spark_rows:
        console.print(f"Spark session start ({master}, not included above): {secs:0.1f} s")
    if args.write_docs:
        write_docs(lines, spark_rows, mb)


def write_docs(rows, spark_rows, mb) -> None:
    header = "## Scan"
    body = [header, "", f"`python bench/scan.py --write-docs` over {mb:,.0f} MB of generated entry logs (1 KiB entries, "
            "8 files), all paths in one run on a 2-core machine; \"cold\" means the files were evicted from the page "
            "cache with `posix_fadvise(DONTNEED)` first.", "",
            "| path | seconds | MB/s | vs cold cat |", "|---|---|---|---|"]
    body += ["| " + " | ".join(r) + " |" for r in rows]
    body += [""] + [f"Spark session start ({m}), not included above: {s:0.1f} s" for m, s in spark_rows]
    replace_section(header, "\n".join(body) + "\n")


if __name__ == "__main__":
    main()
