"""`bookie-rocksdb` (with --bookie-dir): RocksDB databases an older BookKeeper cannot open; the conf files too."""

from __future__ import annotations

from ..knowledge import ROCKSDB_FORMAT_6, ROCKSDB_NEW_CHECKSUMS, TABLE_SECTION, ref
from ..report import Finding, unknown
from ..survey import Survey

NAME = "bookie-rocksdb"
SUMMARY = "(with --bookie-dir) RocksDB databases an older BookKeeper cannot open; the conf files too"


def check(s: Survey, t: dict) -> list[Finding]:
    name = NAME
    files = s.bookie
    if files is None:
        return []
    if files.error is not None:
        return [unknown(name, str(files.root), f"cannot read: {files.error}",
                        "run doctor where the bookie's files are readable")]
    out: list[Finding] = []
    configured: dict[str, dict[str, str]] = {}
    for conf in files.confs:
        if conf.error is not None:
            out.append(unknown(name, str(conf.path), f"cannot read: {conf.error}", "check the file's permissions"))
            continue
        table = conf.sections.get(TABLE_SECTION, {})
        configured[conf.path.name] = {k: table[k] for k in ("checksum", "format_version") if k in table}
    if not files.databases:
        out.append(unknown(name, str(files.root), "no RocksDB database (a directory with CURRENT and OPTIONS-*) found",
                           "point --bookie-dir at the bookie's ledger directory (its current/ledgers and "
                           "current/locations hold the databases)"))
    for db, latest in sorted(files.databases.items()):
        if latest.error is not None:
            out.append(unknown(name, str(db), f"{latest.path.name}: cannot read ({latest.error})",
                               "check the file's permissions"))
            continue
        options = latest.sections
        table = options.get(TABLE_SECTION, {})
        evidence = {"database": str(db), "optionsFile": latest.path.name,
                    "writtenBy": options.get("Version", {}).get("rocksdb_version"),
                    "checksum": table.get("checksum"), "format_version": table.get("format_version"),
                    "confFiles": configured}
        checksum = table.get("checksum")
        try:
            fmt = int(table.get("format_version", "0"))
        except ValueError:
            fmt = 0
        needs = []
        if checksum in ROCKSDB_NEW_CHECKSUMS:
            needs.append((ROCKSDB_NEW_CHECKSUMS[checksum], f"checksum {checksum}"))
        if fmt >= 6:
            needs.append((ROCKSDB_FORMAT_6, f"format_version={fmt}"))
        if needs:
            since = max(v for v, _ in needs)
            what = " and ".join(w for _, w in needs)
            out.append(Finding(
                name, "warning", str(db), dict(evidence, readableFromRocksDB=since),
                f"the existing files use {what}, which RocksDB before {since} cannot read (an older "
                "bookie fails to open the database, e.g. 'unknown checksum type 4'); the *_rocksdb.conf files only "
                "govern files written from now on, so changing them alone does not make the existing ones readable",
                f"before downgrading BookKeeper, check that its RocksDB is {since} or newer; otherwise set "
                "checksum=kxxHash and format_version=5 in the *_rocksdb.conf files (BookKeeper 4.16+ reads them; "
                "apache/bookkeeper#3793), have the bookie rewrite its databases (a full compaction), and run doctor "
                "again until the OPTIONS files say so",
                [ref(22051)]))
        else:
            out.append(Finding(name, "info", str(db), evidence,
                               "the existing files use no checksum or format an older RocksDB lacks", "nothing to do",
                               [ref(22051)]))
    return out
