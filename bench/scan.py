"""The scan's targets (issue #15), measured in one run: whole processes, scaling in task time, a real cluster.

    python bench/scan.py [--gib 1.0] [--files 8] [--dir DIR] [--no-cluster] [--write-docs]

Generates entry logs of 1 KiB entries (2 transaction ledgers among 50), then times whole processes: bare Spark
(start + a trivial job), `txnadmin scan --engine python` and `--engine spark` (local[2]), with the ledger list and
without (every entry read and verified), and the Spark scan on a standalone master with two one-core workers
started from the installed pyspark. Scaling local[1] → local[2] is measured from Spark's own stage and task
metrics (REST API), median of 3 runs after a warm-up. Prints the table and the targets, met or not.
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

import google_crc32c
from _docs import replace_section
from rich.console import Console
from rich.table import Table

ENTRY = 1024


def generate(directory: Path, total_bytes: int, files: int) -> list[Path]:
    import dumpgen as g

    directory.mkdir(parents=True, exist_ok=True)
    batched = g.batched(8)
    message = g.pulsar_message(1)
    def pad(p):
        return p + bytes(ENTRY - len(p)) if len(p) < ENTRY else p
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


CLI = [sys.executable, "-m", "txnadmin.cli.main", "scan"]


def process(args: list[str], env: dict | None = None) -> tuple[float, dict]:
    """One whole process, wall clock: start, imports, session, scan, exit."""
    t = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, PYSPARK_PYTHON=sys.executable,
                                                                        **(env or {})))
    secs = time.perf_counter() - t
    if out.returncode not in (0, 1, 3) or not out.stdout.strip().startswith("{"):
        raise SystemExit(f"{args}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return secs, json.loads(out.stdout)


BARE_SPARK = ("from txnadmin.scan.spark import spark_session\n"
              "import sys; spark_session(sys.argv[1]).range(1).count(); print('{}')\n")

TASK_TIME = """
import json, sys, time, urllib.request
from pathlib import Path
from pyspark.sql import SparkSession
from txnadmin.scan.job import collect_inputs, read_plan
from txnadmin.scan.ledgers import read_ledger_list
from txnadmin.scan.spark import scan_with_spark, spark_session
master, directory, port = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
SparkSession.builder.master(master).config("spark.ui.enabled", "true").config("spark.ui.port", port).getOrCreate()
spark = spark_session(master)
inputs, _ = collect_inputs([str(directory)])
plan = read_plan(read_ledger_list(directory.parent / "ledgers.txt"))
base = f"http://127.0.0.1:{port}/api/v1/applications"
app = json.load(urllib.request.urlopen(base))[0]["id"]
def stamp(text):
    from datetime import datetime
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
runs = []
for _ in range(4):  # the first warms the Python workers and is dropped
    seen = {s["stageId"] for s in json.load(urllib.request.urlopen(f"{base}/{app}/stages"))}
    scan_with_spark(inputs, plan, master, None)
    time.sleep(0.5)
    stages = [s for s in json.load(urllib.request.urlopen(f"{base}/{app}/stages?status=complete"))
              if s["stageId"] not in seen]
    span = max(stamp(s["completionTime"]) for s in stages) - min(stamp(s["firstTaskLaunchedTime"]) for s in stages)
    runs.append({"span": span, "taskTime": sum(s["executorRunTime"] for s in stages) / 1000})
print(json.dumps(runs[1:]))
"""


def task_time(directory: Path, master: str) -> list[dict]:
    from txnadmin.server.run import free_port

    out = subprocess.run([sys.executable, "-c", TASK_TIME, master, str(directory), str(free_port())],
                         capture_output=True, text=True, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


class Standalone:
    """A Spark standalone master and two one-core workers on 127.0.0.1, from the installed pyspark."""

    def __init__(self, workdir: Path):
        import pyspark

        from txnadmin.server.run import free_port

        self.home = Path(pyspark.__file__).parent
        self.env = dict(os.environ, SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1",
                        PYSPARK_PYTHON=sys.executable, SPARK_LOG_DIR=str(workdir / "logs"),
                        SPARK_WORKER_DIR=str(workdir / "work"))
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        cls = str(self.home / "bin" / "spark-class")
        quiet = dict(env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs = [subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                        "--port", str(self.port), "--webui-port", str(free_port())], **quiet)]
        self._wait(self.port)
        for _ in range(2):
            self.procs.append(subprocess.Popen([cls, "org.apache.spark.deploy.worker.Worker", self.url, "--host",
                                                "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port",
                                                str(free_port())], **quiet))

    def _wait(self, port: int) -> None:
        import socket

        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("standalone master did not start")

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--no-cluster", action="store_true", help="skip the standalone-cluster run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp) / "current"
        paths = generate(directory, int(args.gib * (1 << 30)), args.files)
        ledgers = str(directory.parent / "ledgers.txt")
        mb = sum(p.stat().st_size for p in paths) / 1e6
        rows = []
        cold = timed(lambda: subprocess.run(["cat", *map(str, paths)], stdout=subprocess.DEVNULL, check=True))
        rows.append(("cat (page cache)", cold, ""))
        rows.append(("naive per-record Python loop, in this process", timed(lambda: naive(paths)), ""))
        # Whole processes, interleaved in rounds so the shared machine's load falls on all of them alike;
        # the median of each is reported.
        variants = {"with ledger list": ["--ledgers", ledgers], "no ledger list (every entry read)": []}
        times: dict[str, list[float]] = {}
        outputs: dict[str, dict] = {}
        for _ in range(args.rounds):
            times.setdefault("bare", []).append(process([sys.executable, "-c", BARE_SPARK, "local[2]"])[0])
            for label, extra in variants.items():
                for engine, more in (("python", []), ("spark", ["--master", "local[2]"])):
                    secs, out = process(CLI + [str(directory), *extra, "--engine", engine, *more, "-o", "json"])
                    times.setdefault(f"{engine} {label}", []).append(secs)
                    out.pop("engine")
                    outputs[f"{engine} {label}"] = out
        bare = median(times["bare"])
        rows.append(("bare Spark local[2]: start + trivial job", bare, f"median of {args.rounds}"))
        results = {}
        for label in variants:
            py, sp = median(times[f"python {label}"]), median(times[f"spark {label}"])
            same = "same report" if outputs[f"python {label}"] == outputs[f"spark {label}"] else "REPORTS DIFFER"
            rows.append((f"txnadmin scan --engine python, {label}", py,
                         f"{outputs[f'python {label}']['verdict']}, median of {args.rounds}"))
            rows.append((f"txnadmin scan --engine spark local[2], {label}", sp,
                         f"{outputs[f'spark {label}']['verdict']}, {same}, median of {args.rounds}"))
            results[label] = (py, sp)
        if not args.no_cluster:
            cluster = Standalone(Path(tmp))
            try:
                time.sleep(3)  # let both workers register
                cl, cl_out = process(CLI + [str(directory), "--ledgers", ledgers, "--master", cluster.url,
                                            "-o", "json"])
                rows.append(("txnadmin scan on a standalone cluster (master + 2 one-core workers)", cl,
                             cl_out["verdict"]))
            finally:
                cluster.close()
        scaling = {m: task_time(directory, m) for m in ("local[1]", "local[2]")}
    table = Table(title=f"Scan over {mb:,.0f} MB of entry logs (1 KiB entries), whole processes")
    for col in ("what", "seconds", "MB/s", "note"):
        table.add_column(col, justify="right")
    lines = []
    for name, secs, note in rows:
        row = (name, f"{secs:0.2f}", f"{mb / secs:0.0f}", note)
        table.add_row(*row)
        lines.append(row)
    console.print(table)
    targets = []
    for label, (py, sp) in results.items():
        budget = bare + 1.5 * py + 3
        targets.append((f"Spark scan ≤ bare Spark + 1.5 × in-process + 3 s ({label})", f"{sp:0.1f} s",
                        f"≤ {budget:0.1f} s", "met" if sp <= budget else "NOT met"))
    spans = {m: median([r["span"] for r in runs]) for m, runs in scaling.items()}
    task = {m: median([r["taskTime"] for r in runs]) for m, runs in scaling.items()}
    ratio = spans["local[1]"] / spans["local[2]"]
    targets.append(("local[2] throughput ≥ 1.5 × local[1] (scan stage, task metrics, median of 3)",
                    f"{ratio:0.2f}×", "≥ 1.50×", "met" if ratio >= 1.5 else "NOT met"))
    t2 = Table(title="Targets")
    for col in ("target", "measured", "needed", "result"):
        t2.add_column(col)
    for row in targets:
        t2.add_row(*row)
    console.print(t2)
    detail = [f"{m}: stage span {spans[m]:0.2f} s ({mb / spans[m]:0.0f} MB/s), executor run time {task[m]:0.2f} s"
              for m in spans]
    for line in detail:
        console.print(line)
    if args.write_docs:
        write_docs(lines, targets, detail, mb)


def write_docs(rows, targets, detail, mb) -> None:
    header = "## Scan"
    body = [header, "", f"`python bench/scan.py --write-docs` over {mb:,.0f} MB of generated entry logs (1 KiB "
            "entries, 8 files, 2 of 50 ledgers are transaction ledgers), in one run on the shared 2-core machine. "
            "Every row is a whole process (interpreter start, imports, Spark session, scan, exit) except the two "
            "reference loops.", "", "| what | seconds | MB/s | note |", "|---|---|---|---|"]
    body += ["| " + " | ".join(r) + " |" for r in rows]
    body += ["", "| target | measured | needed | result |", "|---|---|---|---|"]
    body += ["| " + " | ".join(r) + " |" for r in targets]
    body += [""] + [f"- {line}" for line in detail]
    replace_section(header, "\n".join(body) + "\n")


if __name__ == "__main__":
    main()
