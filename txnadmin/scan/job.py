"""The scan's verdict, shared by both engines: which live transaction ledgers still hold batched entries."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from .formats import REGISTRY, Finding, ReadPlan, ScanInput, detect
from .ledgers import LiveLedger, read_ledger_list
from .tally import LedgerTally, RangeSet, Tally

# Where `--engine auto` hands a local scan to Spark (local[*]), from bench/scan.py on 2 cores: Spark costs a fixed
# ~13 s (JVM, session, workers) and then splits the work over the cores. With a list the in-process scan reads
# ~0.6 GB/s (it skips other ledgers by id), so Spark only pays off past ~16 GiB; without one it reads and verifies
# every entry at ~0.13 GB/s, and Spark breaks even around 3-4 GiB.
SPARK_THRESHOLD_BYTES = {True: 16 << 30, False: 4 << 30}


class ScanInputError(Exception):
    """Nothing could be judged: a missing path, an unknown format, an unreadable or blind ledger list, no Java."""


class ScanUsageError(ScanInputError):
    """A flag's value is wrong (exit 2, not 3)."""


@dataclass
class ScanResult:
    verdict: str  # "clean" | "batched" | "incomplete"
    engine: str
    live_batched_entries: int
    ledgers: list[dict]
    dead_ledgers: list[dict]
    unreadable: list[dict]  # located damage whose ledger no dump states (first 100)
    unreadable_count: int
    inputs: list[dict]
    ledger_list_given: bool
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why the verdict is not clean (besides batched entries)
    txn_ledgers_named: list[int] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"clean": 0, "batched": 1}.get(self.verdict, 3)

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict, "engine": self.engine, "liveBatchedEntries": self.live_batched_entries,
            "reasons": self.reasons, "ledgers": self.ledgers, "trimmedLedgers": self.dead_ledgers,
            "unreadable": self.unreadable_count, "unreadableLocations": self.unreadable[:100],
            "inputs": self.inputs, "ledgerListGiven": self.ledger_list_given,
            "txnLedgersNamed": self.txn_ledgers_named, "notes": self.notes,
        }


DUMP_LEDGER_LIST = "ledgers.txt"  # `engine dump` writes DIR/ledgers.txt beside DIR/ledgers/ (its entry logs)


def dump_ledger_lists(paths: Iterable[str]) -> list[Path]:
    """The ledger lists `engine dump` wrote, one per dump directory given as an input (nothing deeper: a list found
    further down belongs to some other dump, and is only ever used when named with --ledgers)."""
    found = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and (path / DUMP_LEDGER_LIST).is_file() and (path / "ledgers").is_dir():
            found.append(path / DUMP_LEDGER_LIST)
    return sorted(set(found), key=lambda p: os.path.realpath(p))


def collect_inputs(paths: Iterable[str], fmt: str = "auto",
                   lists: Iterable[Path] = ()) -> tuple[list[ScanInput], list[str]]:
    """Expand directories; detect each file's format. Unknown files inside directories are skipped with a note;
    ``lists`` (ledger lists that came with the dumps) are left out without one. A file named twice (overlapping
    inputs, a link) is read once."""
    if fmt != "auto" and fmt not in REGISTRY:
        raise ScanUsageError(f"--format {fmt!r}: unknown (known: {', '.join(sorted(REGISTRY))})")
    inputs, notes = [], []
    left_out = {os.path.realpath(p) for p in lists}
    seen = set(left_out)
    repeated = 0
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ScanInputError(f"{raw}: no such file or directory")
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            real = os.path.realpath(file)
            if real in seen:
                repeated += real not in left_out
                continue
            seen.add(real)
            try:
                chosen = REGISTRY[fmt] if fmt != "auto" else detect(str(file))
            except OSError as exc:
                raise ScanInputError(f"{file}: cannot read ({exc.strerror or exc})") from None
            if chosen is None and path.is_dir() and _named_like_an_entry_log(file):
                chosen = REGISTRY["entrylog"]  # its header is damaged: read it, so the damage is located, not skipped
            if chosen is None:
                if path.is_dir():
                    notes.append(f"skipped {file}: not a dump format txnadmin knows")
                    continue
                raise ScanInputError(f"{file}: not a known dump format (use --format; known: {', '.join(sorted(REGISTRY))})")
            # Absolute, as Spark's executors need it; both engines report the same path.
            inputs.append(ScanInput(os.path.abspath(file), chosen.name, file.stat().st_size))
    if repeated:
        notes.append(f"overlapping inputs: each file was read once ({repeated} repeats left out)")
    if not inputs:
        raise ScanInputError("no dump files found in " + ", ".join(paths))
    return inputs, notes


ENTRY_LOG_NAME = re.compile(r"[0-9a-fA-F]{1,16}\.log")


def _named_like_an_entry_log(file: Path) -> bool:
    """A bookie names its entry logs `<hex id>.log`; so does RocksDB its write-ahead logs (`000004.log`), but those
    sit next to RocksDB's `CURRENT` file (DbLedgerStorage's `ledgers/` and `locations/`)."""
    return bool(ENTRY_LOG_NAME.fullmatch(file.name)) and not (file.parent / "CURRENT").exists()


def _dump_list_to_use(lists: list[Path], inputs: list[ScanInput], notes: list[str]) -> Optional[Path]:
    """The ledger list `engine dump` wrote with the logs being scanned: used when it is the only one and every input
    lies in its dump (it says which ledgers were live when those logs were copied, and of nothing else)."""
    if not lists:
        return None
    if len(lists) > 1:
        notes.append(f"not used: {', '.join(map(str, lists))}: one ledger list per dump, and several dumps were given; "
                     "name the one that covers every input with --ledgers")
        return None
    dump = os.path.realpath(lists[0].parent)
    outside = [i.path for i in inputs if os.path.commonpath([dump, os.path.realpath(i.path)]) != dump]
    if outside:
        notes.append(f"not used: {lists[0]}: it lists the ledgers of that dump only, and {outside[0]} lies outside "
                     "it; name a list covering every input with --ledgers")
        return None
    notes.append(f"ledger list: {lists[0]} (written by `engine dump` with these entry logs; --ledgers overrides)")
    return lists[0]


def read_plan(live: Optional[dict[int, LiveLedger]], named: frozenset = frozenset(),
              id_format: str = "long", verify_all: bool = False) -> ReadPlan:
    """Skip live ledgers that are not transaction ledgers (messages, cursors) by id; carry each ledger's digest.

    Ledgers absent from the live list are still read, so trimmed ones can be reported apart.
    """
    if live is None:
        return ReadPlan(frozenset(), {}, id_format, verify_all)
    # Only a ledger whose metadata says what it is may be skipped: one listed without metadata is read like a
    # ledger of a scan without a list (a batch that decodes makes it a transaction ledger).
    skip = frozenset(l.ledger_id for l in live.values()
                     if l.has_metadata and not l.transaction_ledger and l.ledger_id not in named)
    kinds = {l.ledger_id: (l.digest_type, l.password) for l in live.values() if l.digest_type}
    return ReadPlan(skip, kinds, id_format, verify_all)


def _example_order(f: dict) -> tuple:
    return (f["file"], f["offset"], f["entryId"])


def _where(f: dict) -> str:
    entry = f" entry {f['entryId']}" if f["entryId"] >= 0 else ""
    return f"{f['file']}@{f['offset']}{entry}: {f['detail']}"


def _fmt_ranges(ranges: list[list[int]], limit: int = 8) -> str:
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges[:limit])
    return text + (f" and {len(ranges) - limit} more ranges" if len(ranges) > limit else "")


def _suspect(lid: int, t: LedgerTally, what: str, reasons: list[str]) -> None:
    """Damage outside the judged ledgers still counts: the digest covers the header, so a copy that fails it may
    be a transaction ledger's entry whose ledger id is the damaged part."""
    if not (t.failed or t.unplaced):
        return
    first = next((x for x in sorted(t.examples, key=_example_order) if x["form"] != "batched"), None)
    at = f": {_where(first)}" if first else ""
    reasons.append(f"ledger {lid} {what}, but {len(t.failed) + t.unplaced} of its entries failed their digest or "
                   f"were unreadable (a damaged header can hide a transaction ledger's entry){at}")


def judged_ledgers(live: Optional[dict[int, LiveLedger]], named: frozenset = frozenset()) -> set[int]:
    """The ledgers the scan holds to full coverage: those named with --txn-ledgers and the live ones whose
    metadata names a transaction log or pending-ack store."""
    judged: set[int] = set(named)
    if live is not None:
        judged |= {lid for lid, l in live.items() if l.transaction_ledger}
    return judged


def judge(tally: Tally, live: Optional[dict[int, LiveLedger]], engine: str, inputs: list[ScanInput],
          notes: list[str], named: frozenset = frozenset()) -> ScanResult:
    """The verdict: batched > incomplete > clean, from the merged tally and the ledger list.

    A live transaction ledger must be covered entry by entry: 0..lastEntryId for a closed ledger, 0..the highest
    entry found for an open or operator-named one. Anything missing, unreadable or failing its digest there makes
    the verdict incomplete; no ledger list at all does too.
    """
    reasons: list[str] = []
    tally.damage = sorted(tally.damage, key=_example_order)[:100]  # the same few whichever engine collected them
    if live is None:
        reasons.append("no ledger list (--ledgers): the scan cannot tell which ledgers are live transaction ledgers "
                       "or whether any is missing from the dumps; take `bookkeeper shell listledgers -meta` after "
                       "copying the dumps and pass it with --ledgers")
    judged = judged_ledgers(live, named)
    ledgers, dead = [], []
    live_batched = 0
    for lid in sorted(set(tally.ledgers) | judged):
        t = tally.ledgers.get(lid) or LedgerTally()
        info = live.get(lid) if live is not None else None
        is_live = None if live is None else info is not None
        txn: Optional[bool]
        if lid in judged:
            txn = True
        elif live is not None and info is not None and info.has_metadata:
            txn = info.transaction_ledger
        else:
            txn = True if t.kinds else None  # unlisted: only a decoding batch says "transaction ledger"
        record = {"ledgerId": lid, "managedLedger": info.managed_ledger if info else None, "live": is_live,
                  "transactionLedger": txn, "state": info.state if info else None,
                  "digestType": info.digest_type if info else None}
        if is_live is False and lid not in named:
            record.update(entries=len(RangeSet(t.batched.to_json() + t.good.to_json())),
                          batchedEntries=len(t.batched))
            dead.append(record)  # trimmed by the broker, still in entry logs until bookie GC
            _suspect(lid, t, "is not in the list", reasons)
            continue
        if live is not None and lid not in judged:
            _suspect(lid, t, "is not a transaction ledger", reasons)
        last = info.last_entry_id if info is not None and info.closed else None
        found = RangeSet(t.batched.to_json() + t.good.to_json())
        batched = t.batched
        problems: list[str] = []
        expected = None
        missing: list[list[int]] = []
        if lid in judged:
            if last is not None:
                expected = last + 1
                beyond = found.clip(last + 1, 1 << 62)
                if beyond:  # written to a bookie, never confirmed: recovery closed the ledger before them
                    notes.append(f"ledger {lid}: entries past lastEntryId {last} are not part of the ledger "
                                 f"(never confirmed; no reader reads them): {_fmt_ranges(beyond.to_json())}")
                found, batched = found.clip(0, last), batched.clip(0, last)
                missing = found.missing(0, last) if last >= 0 else []
            else:
                top = max((x for x in (found.max(), t.failed.max()) if x is not None), default=None)
                missing = found.missing(0, top) if top is not None else []
                if top is None:
                    notes.append(f"ledger {lid}: open or named ledger with no entries in the dumps")
            if missing:
                gaps = RangeSet(missing)
                absent = gaps.minus(t.failed)  # no copy at all
                damaged = gaps.minus(absent)  # only copies that failed their digest or could not be read
                if damaged:
                    first = next((x for x in sorted(t.examples, key=_example_order)
                                  if x["form"] != "batched" and damaged.clip(x["entryId"], x["entryId"])), None)
                    at = f" (first: {_where(first)})" if first else ""
                    problems.append(f"entries {_fmt_ranges(damaged.to_json())} failed their digest or were "
                                    f"unreadable in every copy{at}")
                if absent:
                    problems.append(f"entries {_fmt_ranges(absent.to_json())} are in no dump")
            # A copy that failed its digest although the entry has a good one (or lies past the end): the digest
            # covers the header, so the damage may be in the ids, and the copy another ledger's entry.
            stray = t.failed.minus(RangeSet(missing))
            if stray:
                first = next((x for x in sorted(t.examples, key=_example_order)
                              if x["form"] != "batched" and stray.clip(x["entryId"], x["entryId"])), None)
                at = f" (first: {_where(first)})" if first else ""
                problems.append(f"a copy of entries {_fmt_ranges(stray.to_json())} failed its digest or was unreadable, "
                                f"although the entry has a good copy or is past the end: a damaged header can "
                                f"hide another ledger's entry; repair or remove that copy{at}")
            if len(t.types) > 1:
                problems.append(f"copies verify under different digest types ({', '.join(sorted(t.types))}), but "
                                "BookKeeper keeps one per ledger: some copies are not this ledger's entries as "
                                "written (the type is detected per file when the list does not name it)")
            if t.unplaced:
                first = next((x for x in sorted(t.examples, key=_example_order) if x["entryId"] < 0), None)
                at = f" (first: {_where(first)})" if first else ""
                problems.append(f"{t.unplaced} unreadable spots without an entry id{at}")
            for p in problems:
                reasons.append(f"ledger {lid} ({record['managedLedger'] or 'named'}): {p}")
        nbatched = len(batched) if txn else 0
        unchecked = found.minus(t.verified)  # found, but in a format (or digest type) that cannot be verified
        record.update(
            expectedEntries=expected, foundEntries=len(found), entries=len(found), missing=missing[:100],
            batchedEntries=len(batched), verifiedEntries=len(t.verified.clip(0, last if last is not None else 1 << 62)),
            uncheckedEntries=len(unchecked), unchecked=unchecked.to_json()[:100], failedCopies=len(t.failed),
            problems=problems,
            examples=sorted(t.examples, key=_example_order)[:20])
        ledgers.append(record)
        if txn:
            live_batched += nbatched
    if tally.damage_count:
        reasons.append(f"{tally.damage_count} unreadable spots whose ledger the dump does not state, first: "
                       f"{_where(tally.damage[0])}" if tally.damage else f"{tally.damage_count} unreadable spots")
    if not tally.ledgers and not tally.damage_count:
        if not judged:
            raise ScanInputError("nothing readable in the inputs (no entries)")
        # Files were read, but every entry in them belongs to a ledger passed over by id: no entry of any judged
        # ledger is in the dumps. Vacuous coverage of open ledgers is no proof of anything here.
        raise ScanInputError(
            f"no entry of any of the {len(judged)} transaction ledgers in the dumps (first: {min(judged)}; the "
            "dumps hold only other ledgers' entries or none): cannot tell; copy the entry logs of the bookies in "
            "those ledgers' ensembles (see `ensembles` in the list)")
    if not tally.ledgers and not judged:
        where = "; ".join(_where(u) for u in tally.damage[:3])
        raise ScanInputError(f"nothing readable in the inputs ({where})")
    verdict = "batched" if live_batched else ("incomplete" if reasons else "clean")
    return ScanResult(verdict, engine, live_batched, ledgers, dead, tally.damage, tally.damage_count,
                      [{"path": i.path, "format": i.format, "bytes": i.size} for i in inputs], live is not None,
                      notes, reasons, sorted(named))


def scan_in_process(inputs: list[ScanInput], plan: ReadPlan,
                    progress: Optional[Callable[[int, int, int, int], None]] = None,
                    on_finding: Optional[Callable[[Finding], None]] = None) -> Tally:
    tally = Tally()
    total = sum(i.size for i in inputs)
    done = 0
    for n, item in enumerate(inputs, 1):
        for finding in REGISTRY[item.format].findings(item.path, plan):
            tally.add(finding)
            if on_finding:
                on_finding(finding)
        done += item.size
        if progress:
            progress(n, len(inputs), done, total)
    return tally


def java_available() -> bool:
    import shutil

    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and Path(home, "bin", "java").exists()))


def parse_txn_ledgers(text: Optional[str], id_format: str = "long") -> frozenset:
    """`--txn-ledgers 10,11`: ledger ids the operator names as transaction ledgers."""
    from .formats import LedgerIdError, parse_ledger_id

    if not text:
        return frozenset()
    out = set()
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            out.add(parse_ledger_id(part.strip(), id_format))
        except LedgerIdError as exc:
            raise ScanUsageError(f"--txn-ledgers: {exc}") from None
    return frozenset(out)


def check_options(fmt: str = "auto", engine: str = "auto", ledger_id_format: str = "long") -> None:
    """The scan's flag values, checked before anything is read (ScanUsageError: exit 2)."""
    if engine not in ("auto", "spark", "python"):
        raise ScanUsageError(f"--engine {engine!r}: use auto, spark or python")
    if ledger_id_format not in ("long", "hex"):
        raise ScanUsageError(f"--ledger-id-format {ledger_id_format!r}: use long or hex (UUIDs are recognised)")
    if fmt != "auto" and fmt not in REGISTRY:
        raise ScanUsageError(f"--format {fmt!r}: unknown (known: {', '.join(sorted(REGISTRY))})")


def read_live_list(ledgers_file: Path, id_format: str = "long", named: frozenset = frozenset()) -> dict[int, LiveLedger]:
    """The live ledger list as the scan judges by it; ScanInputError when it is unreadable or cannot tell
    transaction ledgers apart (no metadata and none named with --txn-ledgers)."""
    from .ledgers import LedgerListError

    try:
        live = read_ledger_list(ledgers_file, id_format)
    except LedgerListError as exc:
        raise ScanInputError(str(exc)) from None
    blind = sorted(lid for lid, l in live.items() if not l.has_metadata and lid not in named)
    if blind and not named:
        raise ScanInputError(
            f"{ledgers_file}: {len(blind)} of {len(live)} ledgers have no metadata (first: {blind[0]}), so "
            "transaction ledgers cannot be told apart; take the list with `bookkeeper shell listledgers -meta`, "
            "or name the transaction ledgers with --txn-ledgers ID,...")
    return live


def run_scan(paths: Iterable[str], ledgers_file: Optional[Path] = None, fmt: str = "auto", engine: str = "auto",
             master: Optional[str] = None, report: Optional[Path] = None,
             progress: Optional[Callable[[int, int, int, int], None]] = None, txn_ledgers: Iterable[int] = (),
             ledger_id_format: str = "long", verify_all_digests: bool = False, verbose: bool = False,
             dump_list: bool = True) -> ScanResult:
    """Scan ``paths`` and judge them by the ledger list: ``ledgers_file``, else (``dump_list``) the one `engine dump`
    wrote with them. ``verbose`` lets Spark's own logging and the JVM's start-up notes through."""
    check_options(fmt, engine, ledger_id_format)
    named = frozenset(txn_ledgers)
    paths = list(paths)
    lists = dump_ledger_lists(paths) if dump_list else []
    inputs, notes = collect_inputs(paths, fmt, lists)
    if ledgers_file is None:
        ledgers_file = _dump_list_to_use(lists, inputs, notes)
    else:
        notes.extend(f"not used: {p} (--ledgers {ledgers_file} was given)" for p in lists
                     if os.path.realpath(p) != os.path.realpath(ledgers_file))
    live = read_live_list(ledgers_file, ledger_id_format, named) if ledgers_file else None
    plan = read_plan(live, named, ledger_id_format, verify_all_digests)
    if engine == "auto":
        big = sum(i.size for i in inputs) >= SPARK_THRESHOLD_BYTES[live is not None]
        engine = "spark" if master or big else "python"
    if engine == "spark":
        if not java_available():
            raise ScanInputError("Spark needs Java 17: install a JDK 17 and put java on PATH or set JAVA_HOME "
                                 "(or use --engine python)")
        from .spark import scan_with_spark

        tally = scan_with_spark(inputs, plan, master, report, progress, verbose)
        return judge(tally, live, f"spark ({master or 'local[*]'})", inputs, notes, named)
    writer = _ReportWriter(report) if report else None
    try:
        tally = scan_in_process(inputs, plan, progress, writer.write if writer else None)
    except BaseException:
        if writer:
            writer.abort()
        raise
    if writer:
        writer.close()
    return judge(tally, live, "python (in-process)", inputs, notes, named)


class _ReportWriter:
    """Per-entry findings as JSON lines (``.jsonl``/``.json``) or Parquet (``.parquet``), written atomically."""

    COLUMNS = ("file", "offset", "ledgerId", "entryId", "form", "detail", "first8", "digest", "kind", "digestType")

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.parquet = self.path.suffix == ".parquet"
        if self.parquet:
            self.rows: dict[str, list] = {c: [] for c in self.COLUMNS}
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

    def abort(self) -> None:
        if not self.parquet:
            self.fh.close()
        self.tmp.unlink(missing_ok=True)
