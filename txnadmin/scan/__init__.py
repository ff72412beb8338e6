"""`txnadmin scan`: prove that no batched entries remain in transaction ledgers.

The parsers (one registry of dump formats) run in-process or inside Spark; pyspark is imported only
by :mod:`txnadmin.scan.spark`, when the Spark engine is chosen.
"""

from .formats import REGISTRY, DumpFormat, Finding, ReadPlan, detect, register, unregister
from .job import ScanInputError, ScanResult, ScanUsageError, run_scan
from .ledgers import LiveLedger, read_ledger_list

__all__ = ["REGISTRY", "DumpFormat", "Finding", "LiveLedger", "ReadPlan", "ScanInputError", "ScanResult",
           "ScanUsageError", "detect", "read_ledger_list", "register", "run_scan", "unregister"]
