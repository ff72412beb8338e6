"""metadata.db integrity: checked on every open, and a recovery that keeps the data.

The entry logs are the data: every entry ever acknowledged is there, framed and checksummed, with its ledger and
entry id. metadata.db is the index over them plus the engine's "ZooKeeper" (ledger metadata, managed-ledger and
cursor state in ``kv``). A damaged metadata.db must therefore never be written to (SQLite would happily extend the
damage) nor silently re-created (that forgets every ledger). :func:`check` runs SQLite's ``quick_check`` on open;
:func:`recover` keeps the damaged file, salvages every row SQLite can still read, and rebuilds the index tables
(``entries``, ``logs``, ``log_usage``) from the entry logs themselves.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from pathlib import Path

from . import entrylog
from ._errors import EngineLockedError, StorageCorruptError

DB_NAME = "metadata.db"
LEDGERS_DIR = Path("ledgers") / "current"
# Tables whose rows cannot be derived from the entry logs, salvaged row by row; the key orders rows both ways so a
# damaged page in the middle costs only the rows on it.
SALVAGED = {"ledgers": "ledger_id", "counters": "name", "kv": "key"}


def advice(directory: Path) -> str:
    return (f"the entry logs in {directory / LEDGERS_DIR} still hold every entry; stop anything using the engine, "
            f"keep a copy (cp -a {directory} {directory}.bak) and run `txnadmin engine recover {directory}` "
            "(docs/engine-storage.md, 'A damaged metadata.db')")


def damaged(directory: Path, detail: str) -> StorageCorruptError:
    detail = " ".join(str(detail).split())[:200]
    return StorageCorruptError(f"{directory / DB_NAME}: damaged ({detail}); the engine will not open it — "
                               + advice(directory))


def has_entry_logs(directory: Path) -> bool:
    log_dir = directory / LEDGERS_DIR
    return log_dir.is_dir() and any(entrylog.parse_log_file_name(p.name) is not None for p in log_dir.iterdir())


def check(directory: Path, conn: sqlite3.Connection) -> None:
    """Raise :class:`StorageCorruptError` with recovery steps unless SQLite finds the database sound.

    An empty metadata.db beside entry logs counts as damaged: re-creating it would forget every ledger.
    """
    path = directory / DB_NAME
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if size == 0:
        if has_entry_logs(directory):
            raise damaged(directory, "empty file beside existing entry logs")
        return
    try:
        rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.DatabaseError as exc:
        raise damaged(directory, str(exc)) from None
    problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
    if problems:
        raise damaged(directory, "; ".join(problems))


def _salvage(conn: sqlite3.Connection, table: str, key: str) -> tuple[list[tuple], bool]:
    """Every readable row of ``table``: forward until the first error, then backward until one. Complete when
    neither direction fails."""
    rows: dict = {}
    complete = True
    for order in ("ASC", "DESC"):
        try:
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY {key} {order}"):  # noqa: S608 — fixed names
                rows[row[0]] = row
        except sqlite3.DatabaseError:
            complete = False
        if complete:
            break
    return list(rows.values()), complete


def recover(directory: Path | str, schema: str, force: bool = False) -> dict:
    """Rebuild ``directory/metadata.db``, keeping the damaged file beside it. Returns a report: what was salvaged,
    what was rebuilt from the entry logs, and what is lost (``lost`` empty means nothing is).

    A metadata.db that passes the same check as every open is left alone (``{"sound": True}``) unless ``force``:
    a rebuild keeps only what can be salvaged or re-derived, which is never more than a sound file already holds."""
    directory = Path(directory)
    db_path = directory / DB_NAME
    if not db_path.exists():
        raise StorageCorruptError(f"{db_path}: missing; nothing to recover from (a new engine starts empty)")
    lock_fd = os.open(directory / "storage.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EngineLockedError(f"{directory}: in use by another process; stop it before recovering") from None
        if not force and _sound(directory):
            return {"directory": str(directory), "sound": True}
        return _recover_locked(directory, schema)
    finally:
        os.close(lock_fd)


def _sound(directory: Path) -> bool:
    try:
        conn = sqlite3.connect(f"file:{directory / DB_NAME}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        check(directory, conn)
        return True
    except StorageCorruptError:
        return False
    finally:
        conn.close()


def _recover_locked(directory: Path, schema: str) -> dict:
    db_path = directory / DB_NAME
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kept = directory / f"{DB_NAME}.damaged-{stamp}"
    for suffix in ("", "-wal", "-shm"):
        if (directory / (DB_NAME + suffix)).exists():
            os.replace(directory / (DB_NAME + suffix), directory / (kept.name + suffix))
    report: dict = {"directory": str(directory), "damagedCopy": str(kept), "salvaged": {}, "lost": [],
                    "rebuiltFromEntryLogs": {}, "ledgersWithoutMetadata": []}
    salvaged: dict[str, list[tuple]] = {}
    try:
        old = sqlite3.connect(f"file:{kept}?mode=ro", uri=True)
        for table, key in SALVAGED.items():
            rows, complete = _salvage(old, table, key)
            salvaged[table] = rows
            report["salvaged"][table] = len(rows)
            if not complete:
                report["lost"].append(f"{table}: rows on damaged pages")
        old.close()
    except sqlite3.DatabaseError as exc:
        report["lost"].append(f"every table: SQLite cannot read the damaged file ({exc})")
        salvaged = {t: [] for t in SALVAGED}
    if not salvaged.get("kv"):
        report["lost"].append("kv: managed-ledger and cursor metadata (restore metadata.db from a backup to get "
                              "them back; the entries themselves are intact)")

    tmp = directory / f"{DB_NAME}.rebuilding"
    tmp.unlink(missing_ok=True)
    new = sqlite3.connect(tmp, isolation_level=None)
    try:
        new.executescript(schema)
        new.execute("BEGIN")
        new.executemany("INSERT OR REPLACE INTO ledgers VALUES (?, ?, ?, ?, ?, ?)", salvaged.get("ledgers", []))
        new.executemany("INSERT OR REPLACE INTO counters VALUES (?, ?)", salvaged.get("counters", []))
        new.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", salvaged.get("kv", []))
        known = {row[0]: row for row in salvaged.get("ledgers", [])}
        ledgers_complete = not any(item.startswith(("ledgers", "every")) for item in report["lost"])
        entries, logs, max_entry = _reindex(directory, new, known, ledgers_complete)
        report["rebuiltFromEntryLogs"] = {"entries": entries, "entryLogs": logs}
        for ledger_id, (last, length) in sorted(max_entry.items()):
            if ledger_id in known:
                state, last_known = known[ledger_id][1], known[ledger_id][2]
                if state == "OPEN" and last > last_known:
                    new.execute("UPDATE ledgers SET last_entry_id = ?, length = ? WHERE ledger_id = ?",
                                (last, length, ledger_id))
            else:
                # Its row sat on a damaged page: the entries say which ledger and how far; its custom metadata
                # (which managed ledger owns it) is gone, so it is closed as found.
                new.execute("INSERT INTO ledgers VALUES (?, 'CLOSED', ?, ?, '{}', ?)",
                            (ledger_id, last, length, int(time.time() * 1000)))
                report["ledgersWithoutMetadata"].append(ledger_id)
        top_ledger = max([0, *known, *max_entry])
        top_log = new.execute("SELECT COALESCE(MAX(log_id), -1) FROM logs").fetchone()[0]
        new.execute("INSERT INTO counters VALUES ('next_ledger_id', ?) ON CONFLICT(name) DO UPDATE SET "
                    "value = MAX(value, excluded.value)", (top_ledger + 1,))
        new.execute("INSERT INTO counters VALUES ('next_log_id', ?) ON CONFLICT(name) DO UPDATE SET "
                    "value = MAX(value, excluded.value)", (top_log + 1,))
        new.execute("INSERT OR IGNORE INTO counters VALUES ('schema_version', 1)")
        new.execute("COMMIT")
        if new.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise StorageCorruptError(f"{tmp}: the rebuilt database fails its own check; nothing was replaced")
    finally:
        new.close()
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, db_path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    if report["ledgersWithoutMetadata"]:
        report["lost"].append(f"custom metadata of {len(report['ledgersWithoutMetadata'])} ledgers (kept CLOSED)")
    return report


def _reindex(directory: Path, db: sqlite3.Connection, known: dict, ledgers_complete: bool):
    """Index every verified record of every entry log; returns (entries, logs, {ledger: (last entry, length)})."""
    log_dir = directory / LEDGERS_DIR
    count = 0
    max_entry: dict[int, tuple[int, int]] = {}
    logs = sorted((log_id, p) for p in log_dir.iterdir() if (log_id := entrylog.parse_log_file_name(p.name)) is not None)
    for log_id, path in logs:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            try:
                header = entrylog.decode_header(os.pread(fd, entrylog.HEADER_SIZE, 0))
            except ValueError:
                continue  # not a log we can read; it stays on disk untouched
            end = header.ledgers_map_offset if header.finished else size
            scan = entrylog.scan_records(fd, entrylog.HEADER_SIZE, end)
            usage: dict[int, int] = {}
            rows = []
            for loc in scan.records:
                if ledgers_complete and loc.ledger_id not in known:
                    continue  # a deleted ledger's bytes, awaiting compaction: not data
                stored = entrylog.decode_stored_entry(os.pread(fd, loc.size, loc.offset + 4))
                rows.append((loc.ledger_id, loc.entry_id, log_id, loc.offset, loc.size))
                usage[loc.ledger_id] = usage.get(loc.ledger_id, 0) + loc.size + 4
                last = max_entry.get(loc.ledger_id, (-1, 0))
                if loc.entry_id > last[0]:
                    max_entry[loc.ledger_id] = (loc.entry_id, stored.ledger_length)
            db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?)", rows)
            db.executemany("INSERT OR REPLACE INTO log_usage VALUES (?, ?, ?)",
                           [(log_id, ledger, used) for ledger, used in usage.items()])
            db.execute("INSERT OR REPLACE INTO logs VALUES (?, ?, ?)",
                       (log_id, 1 if header.finished else 0, scan.end if not header.finished else end))
            count += len(rows)
        finally:
            os.close(fd)
    return count, len(logs), max_entry
