"""The Spark path: a Python data source that yields Arrow batches of small columns per file group.

Only this module imports pyspark. Files are grouped into a few partitions per core (a partition
costs tens of milliseconds, one per small file would dominate); each partition runs the same
readers as the in-process scan, on the executors, and never ships payloads.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .formats import REGISTRY, ReadPlan
from .job import ScanInput
from .tally import Tally

QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
COLUMNS = ("file", "offset", "ledgerId", "entryId", "form", "detail", "first8", "digest", "kind")
SCHEMA = ("file string, offset long, ledgerId long, entryId long, form string, detail string, first8 string, "
          "digest string, kind string, tally string")
BATCH_ROWS = 8192


class FileGroup(InputPartition):
    def __init__(self, files: list[tuple[str, str]]):
        super().__init__(files)
        self.files = files


class DumpReader(DataSourceReader):
    """Each partition folds its files' findings into one tally row (the same fold as the in-process scan).

    With a per-entry report the findings themselves are yielded too (their tally column is null).
    """

    def __init__(self, options: dict):
        self.files = json.loads(options["files"])
        self.plan = json.loads(options.get("plan", "{}"))
        self.partition_count = int(options.get("partitions", "4"))
        self.rows = options.get("rows", "false") == "true"

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

        from .formats import ReadPlan
        from .tally import Tally

        plan = ReadPlan.from_json(self.plan)
        tally = Tally()
        cols: dict[str, list] = {k: [] for k in (*COLUMNS, "tally")}
        for path, fmt in partition.files:
            for f in REGISTRY[fmt].findings(path, plan):
                tally.add(f)
                if not self.rows:
                    continue
                for key, value in f.to_json().items():
                    cols[key].append(value)
                cols["tally"].append(None)
                if len(cols["file"]) >= BATCH_ROWS:
                    yield _batch(pa, cols)
                    cols = {k: [] for k in cols}
        for key in COLUMNS:
            cols[key].append(None)
        cols["tally"].append(tally.to_json())
        yield _batch(pa, cols)


def _batch(pa, cols):
    types = {"offset": pa.int64(), "ledgerId": pa.int64(), "entryId": pa.int64()}
    return pa.RecordBatch.from_pydict({k: pa.array(v, types.get(k, pa.string())) for k, v in cols.items()})


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


def scan_with_spark(inputs: list[ScanInput], plan: ReadPlan, master: Optional[str], report: Optional[Path]) -> Tally:
    from pyspark.sql import functions as F

    spark = spark_session(master)
    parallelism = spark.sparkContext.defaultParallelism
    df = (spark.read.format(DumpDataSource.name())
          .option("files", json.dumps([(str(Path(i.path).resolve()), i.format, i.size) for i in inputs]))
          .option("plan", json.dumps(plan.to_json()))
          .option("partitions", str(max(1, 2 * parallelism)))
          .option("rows", "true" if report else "false")
          .load())
    if report:
        df = df.persist()  # read the dumps once for both the report and the tallies
        fmt = "parquet" if str(report).endswith(".parquet") else "json"
        df.filter(F.col("tally").isNull()).drop("tally").write.mode("overwrite").format(fmt).save(str(report))
        df = df.filter(F.col("tally").isNotNull()).select("tally")
    tally = Tally()
    for row in df.select("tally").collect():
        tally.merge(Tally.from_json(row["tally"]))
    return tally
