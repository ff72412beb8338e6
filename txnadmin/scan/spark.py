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
import os
import sys
from pathlib import Path
from typing import Optional

from .formats import REGISTRY, ReadPlan, ScanInput
from .tally import Tally

QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
REPORT_SCHEMA = ("file string, offset long, ledgerId long, entryId long, form string, detail string, "
                 "first8 string, digest string, kind string")


def spark_session(master: Optional[str] = None):
    """One session per process; Python workers run this interpreter (so they can import txnadmin)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.appName("txnadmin-scan").master(master or "local[*]")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={QUIET_LOG4J}")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def file_groups(inputs: list[ScanInput], count: int) -> list[list[tuple[str, str]]]:
    """Greedy balance by size: the lightest group takes the next largest file."""
    groups: list[list[tuple[str, str]]] = [[] for _ in range(max(1, min(count, len(inputs))))]
    sizes = [0] * len(groups)
    for item in sorted(inputs, key=lambda i: -i.size):
        k = sizes.index(min(sizes))
        groups[k].append((str(Path(item.path).resolve()), item.format))
        sizes[k] += item.size
    return [g for g in groups if g]


def _fold(plan_json: str, rows: bool):
    """The mapPartitions body: every finding into one tally, plus the findings themselves for a report."""

    def fold(groups):
        from .formats import ReadPlan
        from .tally import Tally

        plan = ReadPlan.from_json(json.loads(plan_json))
        tally = Tally()
        for group in groups:
            for path, fmt in group:
                for f in REGISTRY[fmt].findings(path, plan):
                    tally.add(f)
                    if rows:
                        yield ("f", (f.file, f.offset, f.ledger_id, f.entry_id, f.form, f.detail, f.first8,
                                     f.digest, f.kind))
        yield ("t", tally.to_json())

    return fold


def scan_with_spark(inputs: list[ScanInput], plan: ReadPlan, master: Optional[str], report: Optional[Path]) -> Tally:
    spark = spark_session(master)
    sc = spark.sparkContext
    groups = file_groups(inputs, 2 * sc.defaultParallelism)
    out = sc.parallelize(groups, len(groups)).mapPartitions(_fold(json.dumps(plan.to_json()), report is not None))
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
