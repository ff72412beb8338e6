"""The Spark path: a Python data source that yields Arrow batches of small columns per file group.

Only this module imports pyspark. Files are grouped into a few partitions per core (a partition
costs tens of milliseconds, one per small file would dominate); each partition runs the same
readers as the in-process scan, on the executors, and never ships payloads.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .formats import REGISTRY, Finding
from .job import NOTABLE, ScanInput

QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
SCHEMA = ("file string, offset long, ledgerId long, entryId long, form string, detail string, first8 string, "
          "count long")
BATCH_ROWS = 8192


class FileGroup(InputPartition):
    def __init__(self, files: list[tuple[str, str]]):
        super().__init__(files)
        self.files = files


class DumpReader(DataSourceReader):
    def __init__(self, options: dict):
        self.files = json.loads(options["files"])
        self.skip = json.loads(options.get("skip", "[]"))
        self.partition_count = int(options.get("partitions", "4"))
        # Summary mode: plain/empty entries are counted per ledger inside the partition, so only counts and
        # notable findings cross into the JVM; the per-entry report needs every row.
        self.summary = options.get("summary", "true") == "true"

    def partitions(self):
        groups: list[list] = [[] for _ in range(max(1, min(self.partition_count, len(self.files))))]
        sizes = [0] * len(groups)
        for path, fmt, size in sorted(self.files, key=lambda f: -f[2]):
            i = sizes.index(min(sizes))  # greedy: the lightest group takes the next largest file
            groups[i].append((path, fmt))
            sizes[i] += size
        return [FileGroup(g) for g in groups if g]

    def read(self, partition: FileGroup):
        import pyarrow as pa

        from .job import NOTABLE

        skip = frozenset(self.skip)
        cols = {k: [] for k in ("file", "offset", "ledgerId", "entryId", "form", "detail", "first8", "count")}
        tallies: dict[tuple[str, int, str], int] = {}

        def add(f: Finding, count: int) -> None:
            for key, value in (("file", f.file), ("offset", f.offset), ("ledgerId", f.ledger_id),
                               ("entryId", f.entry_id), ("form", f.form), ("detail", f.detail),
                               ("first8", f.first8), ("count", count)):
                cols[key].append(value)

        for path, fmt in partition.files:
            for f in REGISTRY[fmt].read(path, skip):
                if self.summary and f.form not in NOTABLE:
                    key = (f.file, f.ledger_id, f.form)
                    tallies[key] = tallies.get(key, 0) + 1
                    continue
                add(f, 1)
                if len(cols["file"]) >= BATCH_ROWS:
                    yield _batch(pa, cols)
                    cols = {k: [] for k in cols}
        for (file, ledger, form), n in tallies.items():
            add(Finding(file, -1, ledger, -1, form, "", ""), n)
        if cols["file"]:
            yield _batch(pa, cols)


def _batch(pa, cols):
    return pa.RecordBatch.from_pydict({
        "file": pa.array(cols["file"], pa.string()), "offset": pa.array(cols["offset"], pa.int64()),
        "ledgerId": pa.array(cols["ledgerId"], pa.int64()), "entryId": pa.array(cols["entryId"], pa.int64()),
        "form": pa.array(cols["form"], pa.string()), "detail": pa.array(cols["detail"], pa.string()),
        "first8": pa.array(cols["first8"], pa.string()), "count": pa.array(cols["count"], pa.int64()),
    })


class DumpDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "txnadmin_dumps"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema):
        return DumpReader(self.options)


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
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH_ROWS))
               .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(DumpDataSource)
    return spark


def scan_with_spark(inputs: list[ScanInput], skip: set[int], master: Optional[str],
                    report: Optional[Path]):
    from pyspark.sql import functions as F

    spark = spark_session(master)
    parallelism = spark.sparkContext.defaultParallelism
    df = (spark.read.format(DumpDataSource.name())
          .option("files", json.dumps([(str(Path(i.path).resolve()), i.format, i.size) for i in inputs]))
          .option("skip", json.dumps(sorted(skip)))
          .option("partitions", str(max(1, 2 * parallelism)))
          .option("summary", "false" if report else "true")
          .load())
    counts: dict[tuple[int, str], int] = defaultdict(int)
    notable: list[Finding] = []
    if report:
        fmt = "parquet" if str(report).endswith(".parquet") else "json"
        df.drop("count").write.mode("overwrite").format(fmt).save(str(report))
        rows = df.groupBy("ledgerId", "form").agg(F.sum("count").alias("n")).collect()
        for row in rows:
            counts[(row["ledgerId"], row["form"])] += row["n"]
        picked = df.filter(F.col("form").isin(*NOTABLE)).limit(100_000).collect()
    else:
        picked = []
        for row in df.collect():  # one pass: per-ledger counts plus the few notable entries
            counts[(row["ledgerId"], row["form"])] += row["count"]
            if row["form"] in NOTABLE:
                picked.append(row)
    notable = [Finding(r["file"], r["offset"], r["ledgerId"], r["entryId"], r["form"], r["detail"], r["first8"])
               for r in picked]
    return counts, notable
