"""The scan's verdict, shared by both engines: which live transaction ledgers still hold batched entries."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from .formats import REGISTRY, Finding, detect
from .ledgers import LiveLedger, read_ledger_list

SPARK_THRESHOLD_BYTES = 256 * 1024 * 1024
NOTABLE = ("batched", "prefix-batched", "suspicious", "unreadable")


class ScanInputError(Exception):
    """Nothing could be judged: a missing path, an unknown format, an unreadable ledger list, no Java."""


@dataclass
class ScanInput:
    path: str
    format: str
    size: int


@dataclass
class ScanResult:
    verdict: str  # "clean" | "batched"
    engine: str
    live_batched_entries: int
    ledgers: list[dict]
    dead_ledgers: list[dict]
    suspicious: list[dict]
    unreadable: list[dict]
    inputs: list[dict]
    ledger_list_given: bool
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict, "engine": self.engine, "liveBatchedEntries": self.live_batched_entries,
            "ledgers": self.ledgers, "trimmedLedgers": self.dead_ledgers,
            "suspiciousEntries": len(self.suspicious), "unreadable": len(self.unreadable),
            "suspicious": self.suspicious[:100], "unreadableLocations": self.unreadable[:100],
            "inputs": self.inputs, "ledgerListGiven": self.ledger_list_given, "notes": self.notes,
        }


def collect_inputs(paths: Iterable[str], fmt: str = "auto") -> tuple[list[ScanInput], list[str]]:
    """Expand directories; detect each file's format. Unknown files inside directories are skipped with a note."""
    if fmt != "auto" and fmt not in REGISTRY:
        raise ScanInputError(f"--format {fmt!r}: unknown (known: {', '.join(sorted(REGISTRY))})")
    inputs, notes = [], []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ScanInputError(f"{raw}: no such file or directory")
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            try:
                chosen = REGISTRY[fmt] if fmt != "auto" else detect(str(file))
            except OSError as exc:
                raise ScanInputError(f"{file}: cannot read ({exc.strerror or exc})") from None
            if chosen is None:
                if path.is_dir():
                    notes.append(f"skipped {file}: not a dump format txnadmin knows")
                    continue
                raise ScanInputError(f"{file}: not a known dump format (use --format; known: {', '.join(sorted(REGISTRY))})")
            inputs.append(ScanInput(str(file), chosen.name, file.stat().st_size))
    if not inputs:
        raise ScanInputError("no dump files found in " + ", ".join(paths))
    return inputs, notes


def skipped_ledgers(live: Optional[dict[int, LiveLedger]]) -> set[int]:
    """Live ledgers that are not transaction ledgers (messages, cursors): readers skip them by id.

    Ledgers absent from the live list are still read, so trimmed ones can be reported apart.
    """
    if live is None:
        return set()
    return {l.ledger_id for l in live.values() if not l.transaction_ledger}


def judge(counts: dict[tuple[int, str], int], notable: list[Finding], live: Optional[dict[int, LiveLedger]],
          engine: str, inputs: list[ScanInput], notes: list[str]) -> ScanResult:
    per_ledger: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (ledger, form), n in counts.items():
        if ledger >= 0:
            per_ledger[ledger][form] += n
    unreadable = [f.to_json() for f in notable if f.form == "unreadable"]
    ledgers, dead, suspicious = [], [], []
    live_batched = 0
    for ledger_id in sorted(per_ledger):
        forms = per_ledger[ledger_id]
        batched = forms.get("batched", 0) + forms.get("prefix-batched", 0)
        info = live.get(ledger_id) if live is not None else None
        if live is not None:
            is_live = info is not None
            txn = info.transaction_ledger if info else None
            managed = info.managed_ledger if info else None
        else:
            # Without a ledger list, a ledger is judged a transaction ledger when it holds a decodable batch.
            is_live, txn, managed = None, (True if batched else None), None
        record = {"ledgerId": ledger_id, "managedLedger": managed, "live": is_live, "transactionLedger": txn,
                  "entries": sum(forms.values()), "batchedEntries": batched,
                  "suspiciousEntries": forms.get("suspicious", 0), "unreadableEntries": forms.get("unreadable", 0)}
        if is_live is False:
            dead.append(record)  # trimmed by the broker, still in entry logs until bookie GC
            continue
        ledgers.append(record)
        if txn:
            live_batched += batched
            suspicious += [f.to_json() for f in notable if f.ledger_id == ledger_id and f.form == "suspicious"]
    if live is None:
        notes.append("no --ledgers list: liveness is unknown, and only ledgers holding decodable batches are "
                     "treated as transaction ledgers (a trimmed ledger awaiting bookie GC may be counted)")
    readable = sum(n for (_, form), n in counts.items() if form != "unreadable")
    if readable == 0:
        where = "; ".join(f"{u['file']}@{u['offset']}: {u['detail']}" for u in unreadable[:3])
        raise ScanInputError(f"nothing readable in the inputs ({where or 'no entries'})")
    return ScanResult("batched" if live_batched else "clean", engine, live_batched, ledgers, dead, suspicious,
                      unreadable, [{"path": i.path, "format": i.format, "bytes": i.size} for i in inputs],
                      live is not None, notes)


def scan_in_process(inputs: list[ScanInput], skip: set[int],
                    progress: Optional[Callable[[int, int], None]] = None,
                    on_finding: Optional[Callable[[Finding], None]] = None):
    counts: dict[tuple[int, str], int] = defaultdict(int)
    notable: list[Finding] = []
    skip = frozenset(skip)
    total = sum(i.size for i in inputs)
    done = 0
    for item in inputs:
        for finding in REGISTRY[item.format].read(item.path, skip):
            counts[(finding.ledger_id, finding.form)] += 1
            if finding.form in NOTABLE:
                notable.append(finding)
            if on_finding:
                on_finding(finding)
        done += item.size
        if progress:
            progress(done, total)
    return counts, notable


def java_available() -> bool:
    import shutil

    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and Path(home, "bin", "java").exists()))


def run_scan(paths: Iterable[str], ledgers_file: Optional[Path] = None, fmt: str = "auto", engine: str = "auto",
             master: Optional[str] = None, report: Optional[Path] = None,
             progress: Optional[Callable[[int, int], None]] = None) -> ScanResult:
    from .ledgers import LedgerListError

    paths = list(paths)
    inputs, notes = collect_inputs(paths, fmt)
    try:
        live = read_ledger_list(ledgers_file) if ledgers_file else None
    except LedgerListError as exc:
        raise ScanInputError(str(exc)) from None
    skip = skipped_ledgers(live)
    if engine not in ("auto", "spark", "python"):
        raise ScanInputError(f"--engine {engine!r}: use auto, spark or python")
    if engine == "auto":
        engine = "spark" if master or sum(i.size for i in inputs) >= SPARK_THRESHOLD_BYTES else "python"
    if engine == "spark":
        if not java_available():
            raise ScanInputError("Spark needs Java 17: install a JDK 17 and put java on PATH or set JAVA_HOME "
                                 "(or use --engine python)")
        from .spark import scan_with_spark

        counts, notable = scan_with_spark(inputs, skip, master, report)
        return judge(counts, notable, live, f"spark ({master or 'local[*]'})", inputs, notes)
    writer = _ReportWriter(report) if report else None
    try:
        counts, notable = scan_in_process(inputs, skip, progress, writer.write if writer else None)
    finally:
        if writer:
            writer.close()
    return judge(counts, notable, live, "python (in-process)", inputs, notes)


class _ReportWriter:
    """Per-entry findings as JSON lines (``.jsonl``/``.json``) or Parquet (``.parquet``), written atomically."""

    COLUMNS = ("file", "offset", "ledgerId", "entryId", "form", "detail", "first8")

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.parquet = self.path.suffix == ".parquet"
        if self.parquet:
            self.rows = {c: [] for c in self.COLUMNS}
        else:
            self.fh = open(self.tmp, "w")

    def write(self, finding: Finding) -> None:
        data = finding.to_json()
        if self.parquet:
            for c in self.COLUMNS:
                self.rows[c].append(data[c])
        else:
            import json

            self.fh.write(json.dumps(data) + "\n")

    def close(self) -> None:
        if self.parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table(self.rows), self.tmp)
        else:
            self.fh.close()
        os.replace(self.tmp, self.path)
