"""The Spark path: file groups folded into per-ledger tallies on the executors, merged on the driver.

Only this module imports pyspark. Files are grouped into a few partitions per core (greedy by size: a partition
per small file would cost more than the work); each partition runs the same readers and the same tally fold as
the in-process scan, on the executors, and sends back one small tally (entry ids as ranges), never payloads.

Why an RDD and not a Python data source: planning a `pyspark.sql.datasource` read starts a Python process on the
driver to pickle the source and ask it for its schema and partitions, and Arrow-converts every batch; measured on
the 2-core bench machine that cost ~5 s per scan against ~1 s for `parallelize(groups).mapPartitions(fold)`,
with the same readers (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

from .formats import REGISTRY, ReadPlan, ScanInput
from .tally import Tally

log = logging.getLogger(__name__)
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
REPORT_SCHEMA = ("file string, offset long, ledgerId long, entryId long, form string, detail string, "
                 "first8 string, digest string, kind string, digestType string")


# What the JVM says on every start that no operator can act on: the JVM's own note on the vector module Spark 4
# loads, and Spark's shell-style hint about log levels (it prints both to stderr, outside log4j's reach).
JVM_NOISE = (b"WARNING: Using incubator modules:", b"Setting default log level to ",
             b"To adjust logging level use sc.setLogLevel(")


def spark_session(master: Optional[str] = None, verbose: bool = False):
    """One session per process; Python workers run this interpreter (so they can import txnadmin).

    Quiet unless ``verbose``: only errors are logged, and the JVM's start-up notes (JVM_NOISE) are dropped from
    its stderr; everything else it writes there still reaches ours."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.appName("txnadmin-scan").master(master or "local[*]")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable))
    if verbose:
        return builder.getOrCreate()
    builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={QUIET_LOG4J}")
    spark = _without_jvm_noise(builder.getOrCreate)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _without_jvm_noise(start: Callable):
    """Run ``start`` (which may launch the JVM) with stderr's descriptor on a pipe: the JVM inherits that pipe for its
    whole life, and a thread forwards each line but JVM_NOISE to the real stderr. Ours is put back at once."""
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    real = os.dup(2)
    threading.Thread(target=_forward, args=(read_end, real), name="txnadmin-spark-stderr", daemon=True).start()
    os.dup2(write_end, 2)
    try:
        return start()
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)
        os.close(write_end)  # the JVM keeps its copy; the pipe ends when it exits


def _forward(read_end: int, real: int) -> None:
    with os.fdopen(read_end, "rb") as pipe, os.fdopen(real, "wb", buffering=0) as out:
        for line in pipe:
            if not line.startswith(JVM_NOISE):
                out.write(line)


def file_groups(inputs: list[ScanInput], count: int) -> list[list[tuple[str, str, int]]]:
    """Greedy balance by size: the lightest group takes the next largest file. Each file is (path, format, bytes)."""
    groups: list[list[tuple[str, str, int]]] = [[] for _ in range(max(1, min(count, len(inputs))))]
    sizes = [0] * len(groups)
    for item in sorted(inputs, key=lambda i: -i.size):
        k = sizes.index(min(sizes))
        groups[k].append((os.path.abspath(item.path), item.format, item.size))
        sizes[k] += item.size
    return [g for g in groups if g]


def _fold(plan_json: str, rows: bool, files_done=None, bytes_done=None):
    """The mapPartitions body: every finding into one tally, plus the findings themselves for a report.

    ``files_done``/``bytes_done`` are accumulators for the driver's progress bar: Spark merges them on the
    driver as each task ends, so the bar moves a partition at a time.
    """

    def fold(groups):
        from .formats import ReadPlan
        from .tally import Tally

        plan = ReadPlan.from_json(json.loads(plan_json))
        tally = Tally()
        for group in groups:
            for path, fmt, size in group:
                for f in REGISTRY[fmt].findings(path, plan):
                    tally.add(f)
                    if rows:
                        yield ("f", (f.file, f.offset, f.ledger_id, f.entry_id, f.form, f.detail, f.first8,
                                     f.digest, f.kind, f.digest_type))
                if files_done is not None:
                    files_done.add(1)
                    bytes_done.add(size)
        yield ("t", tally.to_json())

    return fold


class _Progress:
    """Polls the accumulators from a driver thread while the job runs and reports (files, bytes) done."""

    def __init__(self, sc, inputs: list[ScanInput], callback: Optional[Callable[[int, int, int, int], None]]):
        self.callback = callback
        self.files = sc.accumulator(0) if callback else None
        self.bytes = sc.accumulator(0) if callback else None
        self.total_files, self.total_bytes = len(inputs), sum(i.size for i in inputs)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="scan-progress", daemon=True)

    def _report(self) -> None:
        if self.callback is None or self.files is None or self.bytes is None:
            return
        # A retried task adds its files again: never show more than there is.
        self.callback(min(self.files.value, self.total_files), self.total_files,
                      min(self.bytes.value, self.total_bytes), self.total_bytes)

    def _poll(self) -> None:
        while not self.stop.wait(0.25):
            try:
                self._report()
            except Exception:  # a drawing failure must not cost the scan: logged, not raised
                log.warning("scan progress display failed", exc_info=True)
                return

    def __enter__(self) -> "_Progress":
        if self.callback:
            self._report()
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        if exc[0] is None:
            self._report()


def scan_with_spark(inputs: list[ScanInput], plan: ReadPlan, master: Optional[str], report: Optional[Path],
                    progress: Optional[Callable[[int, int, int, int], None]] = None, verbose: bool = False) -> Tally:
    spark = spark_session(master, verbose)
    sc = spark.sparkContext
    groups = file_groups(inputs, 2 * sc.defaultParallelism)
    with _Progress(sc, inputs, progress) as shown:
        return _run(spark, groups, plan, report, shown)


def _run(spark, groups, plan: ReadPlan, report: Optional[Path], shown: _Progress) -> Tally:
    sc = spark.sparkContext
    out = sc.parallelize(groups, len(groups)).mapPartitions(
        _fold(json.dumps(plan.to_json()), report is not None, shown.files, shown.bytes))
    if report is not None:
        out = out.cache()  # read the dumps once for both the report and the tallies
        fmt = "parquet" if str(report).endswith(".parquet") else "json"
        rows = out.filter(lambda kv: kv[0] == "f").map(lambda kv: kv[1])
        spark.createDataFrame(rows, REPORT_SCHEMA).write.mode("overwrite").format(fmt).save(str(report))
        tallies = out.filter(lambda kv: kv[0] == "t").map(lambda kv: kv[1]).collect()
        out.unpersist()
    else:
        tallies = [value for _, value in out.collect()]
    tally = Tally()
    for text in tallies:
        tally.merge(Tally.from_json(text))
    return tally
