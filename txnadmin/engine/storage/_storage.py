"""LedgerStorage: a single-bookie ledger store in BookKeeper's entry-log format, indexed by SQLite.

Durability strategy (docs/engine-storage.md):
- The entry logs are the source of truth. A writer thread takes every queued add, writes them with one pwrite,
  fdatasyncs once (group commit), then records their index rows in SQLite (synchronous=NORMAL, no fsync) and only
  then acknowledges them.
- SQLite keeps, per entry log, the offset up to which its records are indexed (`logs.data_end`), in the same
  transaction as the index rows. On opening for writing, every unfinished log is scanned from that offset with
  framing and CRC32C checks; good records are indexed, the first damaged record and everything after it is cut off.
- Metadata changes (ledgers, key-value store, log rotation, compaction) commit with synchronous=FULL.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import shutil
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Mapping, overload

from . import _integrity, entrylog
from ._errors import (
    EntryNotFoundError,
    LedgerClosedError,
    LedgerNotFoundError,
    StorageCorruptError,
    StorageError,
    StorageReadOnlyError,
)
from ._lock import take_writer_lock
from ._metadata import LedgerMetadata

log = logging.getLogger(__name__)

AddCallback = Callable[[int | None, BaseException | None], None]

DB_NAME = "metadata.db"
LEDGERS_DIR = Path("ledgers") / "current"
COMPACTING_SUFFIX = ".compacting"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledgers (
    ledger_id INTEGER PRIMARY KEY,
    state TEXT NOT NULL,
    last_entry_id INTEGER NOT NULL,
    length INTEGER NOT NULL,
    custom_metadata TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    ledger_id INTEGER NOT NULL,
    entry_id INTEGER NOT NULL,
    log_id INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    size INTEGER NOT NULL,
    PRIMARY KEY (ledger_id, entry_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS logs (
    log_id INTEGER PRIMARY KEY,
    finished INTEGER NOT NULL,
    data_end INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS log_usage (
    log_id INTEGER NOT NULL,
    ledger_id INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (log_id, ledger_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
"""

_MAX_GROUP_BYTES = 16 << 20
_MAX_GROUP_ENTRIES = 20000
_PIPELINE_MIN_GROUP = 8  # fewer adds than this wait for the previous group's index commit instead of overtaking it
_COUNTER_LEDGER = "next_ledger_id"
_COUNTER_LOG = "next_log_id"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


_datasync = getattr(os, "fdatasync", os.fsync)


@dataclass
class _OpenLedger:
    """Append state of an OPEN ledger in the writer process."""

    next_entry_id: int
    length: int
    durable_last: int
    accepting: bool = True


@dataclass
class _PendingAdd:
    seq: int
    ledger_id: int
    entry_id: int
    record: bytes
    callback: AddCallback | None = None
    done: threading.Event | None = None
    error: BaseException | None = None


@dataclass
class _IndexJob:
    """One written group on its way from the writer (entry log written and synced) to the indexer (SQLite index
    committed, adds acknowledged). ``error`` set: the group was not written; its adds fail, in order."""

    batch: list[_PendingAdd]
    log_id: int = -1
    data_end: int = 0
    rows: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    ledger_ends: dict[int, tuple[int, int]] = field(default_factory=dict)
    usage: dict[int, int] = field(default_factory=dict)
    error: BaseException | None = None


@dataclass
class _CurrentLog:
    log_id: int
    fd: int
    position: int
    usage: dict[int, int] = field(default_factory=dict)


class LedgerStorage:
    """Ledgers in entry logs under ``<dir>/ledgers/current``, metadata and index in ``<dir>/metadata.db``."""

    # -- opening ----------------------------------------------------------------------------

    def __init__(self, directory: Path, read_only: bool, entry_log_size_limit: int):
        self.directory = Path(directory)
        self.read_only = read_only
        self.entry_log_size_limit = entry_log_size_limit
        self._log_dir = self.directory / LEDGERS_DIR
        self._lock_fd: int | None = None
        self._closed = False
        self._db_lock = threading.RLock()  # guards the write connection
        self._db_synchronous: bool | None = None  # the write connection's synchronous=FULL setting, once set
        self._db: sqlite3.Connection | None = None
        self._local = threading.local()
        self._read_conns: list[sqlite3.Connection] = []
        self._read_conns_lock = threading.Lock()
        self._fds: dict[int, int] = {}
        self._retired_fds: list[int] = []
        self._fds_lock = threading.Lock()
        # writer-only state
        self._cond = threading.Condition()
        self._pending: list[_PendingAdd] = []
        self._submitted_seq = 0
        self._durable_seq = 0
        self._failed: BaseException | None = None
        self._stopping = False
        self._open_ledgers: dict[int, _OpenLedger] = {}
        self._io_lock = threading.Lock()  # held while the current log is written, rotated or finished
        self._compact_lock = threading.Lock()
        self._current: _CurrentLog | None = None
        self._writer: threading.Thread | None = None
        # The indexer commits a written group's index rows and acknowledges it while the writer already syncs the
        # next group: the sync and the index commit overlap instead of adding up (see _write_loop).
        self._indexer: threading.Thread | None = None
        self._index_cond = threading.Condition()
        self._index_queue: list[_IndexJob | None] = []  # None: the writer has stopped
        self._index_pushed = 0
        self._index_done = 0
        self._callbacks: queue.SimpleQueue = queue.SimpleQueue()  # replaced by a fresh one at each open()
        self._callback_thread: threading.Thread | None = None
        self._stats = {"entriesWritten": 0, "bytesWritten": 0, "syncs": 0, "metadataCommits": 0}
        # metadata group commit (meta_put_many): one caller commits everything queued, the others wait for it
        self._meta_cond = threading.Condition()
        self._meta_queue: list[tuple[int, dict, dict, bool]] = []  # (ticket, items, versions, sync)
        self._meta_tickets = 0
        self._meta_done = 0
        self._meta_leader = False
        self._meta_errors: dict[int, BaseException] = {}
        self._meta_versions: dict[str, int] = {}  # key → highest version committed (versioned puts only)
        self._meta_version_counter = itertools.count(1)

    @classmethod
    def open(cls, directory: Path | str, *, read_only: bool = False,
             entry_log_size_limit: int = 64 * 1024 * 1024) -> "LedgerStorage":
        """Open (creating when writable) the storage in ``directory``.

        A writer takes an exclusive lock on the directory; read-only opens take none and never change anything.
        """
        if entry_log_size_limit < entrylog.HEADER_SIZE * 2:
            raise StorageError(f"entry_log_size_limit {entry_log_size_limit}: must be at least {entrylog.HEADER_SIZE * 2}")
        directory = Path(directory)
        storage = cls(directory, read_only, entry_log_size_limit)
        try:
            if read_only:
                storage._open_reader()
            else:
                storage._open_writer()
        except BaseException:
            storage._release()
            raise
        return storage

    def _open_reader(self) -> None:
        if not (self.directory / DB_NAME).is_file():
            raise StorageError(f"{self.directory}: no ledger storage here ({DB_NAME} missing)")
        self._db = self._connect()
        _integrity.check(self.directory, self._db)  # a damaged index gives wrong answers, not just fewer
        self._db.execute("PRAGMA query_only=1")

    def _open_writer(self) -> None:
        try:
            self._log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"{self.directory}: cannot create the storage directory ({exc.strerror})") from None
        self._take_lock()
        if not (self.directory / DB_NAME).exists() and any(
                entrylog.parse_log_file_name(p.name) is not None for p in self._log_dir.iterdir()):
            # entry logs without our database (a bookie copy, an export): never adopt or delete them
            raise StorageError(f"{self.directory}: has entry logs but no {DB_NAME}; not an engine storage "
                               "(open a copy read-only with the scan instead)")
        self._db = self._connect()
        _integrity.check(self.directory, self._db)  # never write to (or re-create) a damaged metadata.db
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        with self._txn(full=True) as db:
            db.execute("INSERT OR IGNORE INTO counters VALUES (?, 1)", (_COUNTER_LEDGER,))
            db.execute("INSERT OR IGNORE INTO counters VALUES (?, 0)", (_COUNTER_LOG,))
            db.execute("INSERT OR IGNORE INTO counters VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        self._recover()
        for row in self._db.execute(
                "SELECT ledger_id, last_entry_id, length FROM ledgers WHERE state = 'OPEN'").fetchall():
            self._open_ledgers[row[0]] = _OpenLedger(row[1] + 1, row[2], row[1])
        self._callbacks = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="ledger-storage-writer", daemon=True)
        self._indexer = threading.Thread(target=self._index_loop, name="ledger-storage-indexer", daemon=True)
        self._callback_thread = threading.Thread(target=self._callback_loop, name="ledger-storage-callbacks",
                                                 daemon=True)
        self._writer.start()
        self._indexer.start()
        self._callback_thread.start()

    @staticmethod
    def recover(directory: Path | str, force: bool = False) -> dict:
        """Rebuild a damaged metadata.db from what SQLite can still read and from the entry logs (see _integrity);
        a sound one is left alone unless ``force``."""
        return _integrity.recover(Path(directory), _SCHEMA, force)

    def _take_lock(self) -> None:
        self._lock_fd = take_writer_lock(self.directory)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.directory / DB_NAME, isolation_level=None, check_same_thread=False,
                                   timeout=30.0)
        except sqlite3.Error as exc:
            raise StorageError(f"{self.directory / DB_NAME}: cannot open ({exc})") from None
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def _reader_db(self) -> sqlite3.Connection:
        """A connection for the calling thread, so readers never queue behind the writer's commits."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            self._check_open()
            conn = self._connect()
            conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
            with self._read_conns_lock:
                self._read_conns.append(conn)
        return conn

    class _Txn:
        def __init__(self, storage: "LedgerStorage", full: bool):
            self.storage = storage
            self.full = full

        def __enter__(self) -> sqlite3.Connection:
            self.storage._db_lock.acquire()
            db = self.storage._db
            assert db is not None, "storage is closed"  # set by open() until close()
            try:
                # only when it changes: every statement under the lock is a trip back for the GIL
                if self.storage._db_synchronous != self.full:
                    db.execute(f"PRAGMA synchronous={'FULL' if self.full else 'NORMAL'}")
                    self.storage._db_synchronous = self.full
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                self.storage._db_lock.release()
                raise StorageError(f"{self.storage.directory / DB_NAME}: {exc}") from exc
            return db

        def __exit__(self, exc_type, exc, tb) -> None:
            db = self.storage._db
            assert db is not None, "storage is closed"  # __enter__ found it open and holds the lock
            try:
                if exc_type is None:
                    try:
                        db.execute("COMMIT")
                    except sqlite3.Error as error:
                        if db.in_transaction:
                            db.execute("ROLLBACK")  # never leave a half transaction for the next caller
                        raise StorageError(f"{self.storage.directory / DB_NAME}: {error}") from error
                else:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    if isinstance(exc, sqlite3.Error):
                        raise StorageError(f"{self.storage.directory / DB_NAME}: {exc}") from exc
            finally:
                self.storage._db_lock.release()

    def _txn(self, *, full: bool) -> "LedgerStorage._Txn":
        return LedgerStorage._Txn(self, full)

    # -- recovery ---------------------------------------------------------------------------

    def _recover(self) -> None:
        """Bring the index up to the entry logs after a crash; leave one unfinished log to append to."""
        for path in self._log_dir.iterdir():
            if path.name.endswith(COMPACTING_SUFFIX):
                path.unlink()  # an interrupted compaction's output; its source is still indexed
        db = self._db
        assert db is not None  # recovery runs inside open(), after the connection is made
        known = {row[0]: (bool(row[1]), row[2]) for row in
                 db.execute("SELECT log_id, finished, data_end FROM logs")}
        next_log_id = db.execute("SELECT value FROM counters WHERE name = ?", (_COUNTER_LOG,)).fetchone()[0]
        for path in self._log_dir.iterdir():
            log_id = entrylog.parse_log_file_name(path.name)
            if log_id is not None and log_id not in known:
                if log_id >= next_log_id:
                    raise StorageCorruptError(f"{path}: entry log this storage never created; move it away")
                path.unlink()  # compaction output never committed, or a compacted source not yet removed
        _fsync_dir(self._log_dir)
        unfinished = sorted(log_id for log_id, (finished, _) in known.items() if not finished)
        for log_id, (finished, _) in known.items():
            if finished and not (self._log_dir / entrylog.log_file_name(log_id)).exists():
                raise StorageCorruptError(f"{self._log_dir / entrylog.log_file_name(log_id)}: entry log missing")
        for log_id in unfinished:
            self._recover_log(log_id, known[log_id][1])
        for log_id in unfinished[:-1]:
            self._finish_log(self._current_from_disk(log_id))
        if unfinished:
            self._current = self._current_from_disk(unfinished[-1])
        else:
            self._current = self._new_log()

    def _current_from_disk(self, log_id: int) -> _CurrentLog:
        fd = os.open(self._log_dir / entrylog.log_file_name(log_id), os.O_RDWR)
        position = os.fstat(fd).st_size
        assert self._db is not None  # recovery runs inside open(), after the connection is made
        usage = dict(self._db.execute("SELECT ledger_id, bytes FROM log_usage WHERE log_id = ?", (log_id,)))
        return _CurrentLog(log_id, fd, position, usage)

    def _recover_log(self, log_id: int, indexed_end: int) -> None:
        path = self._log_dir / entrylog.log_file_name(log_id)
        if not path.exists():
            if indexed_end > entrylog.HEADER_SIZE:
                raise StorageCorruptError(f"{path}: entry log missing")
            self._create_log_file(log_id)
            return
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < entrylog.HEADER_SIZE:
                if indexed_end > entrylog.HEADER_SIZE:
                    raise StorageCorruptError(f"{path}: shorter than its indexed data ({size} < {indexed_end})")
                # crashed while the header was written: nothing was ever acknowledged from it
                _pwrite_all(fd, entrylog.encode_header(), 0)
                os.ftruncate(fd, entrylog.HEADER_SIZE)
                os.fsync(fd)
                return
            if size < indexed_end:
                raise StorageCorruptError(f"{path}: shorter than its indexed data ({size} < {indexed_end})")
            try:
                header = entrylog.decode_header(os.pread(fd, entrylog.HEADER_SIZE, 0))
            except ValueError as exc:
                raise StorageCorruptError(f"{path}: {exc}") from None
            if header.finished:
                # crashed after the header was filled in but before the log was marked finished
                _pwrite_all(fd, entrylog.encode_header(), 0)
            scan = entrylog.scan_records(fd, indexed_end, size)
            rows = []
            usage: dict[int, int] = {}
            ledger_ends: dict[int, tuple[int, int]] = {}
            assert self._db is not None  # recovery runs inside open(), after the connection is made
            live = {row[0]: (row[1], row[2], row[3]) for row in
                    self._db.execute("SELECT ledger_id, state, last_entry_id, length FROM ledgers")}
            for loc in scan.records:
                usage[loc.ledger_id] = usage.get(loc.ledger_id, 0) + loc.size + 4
                info = live.get(loc.ledger_id)
                if info is None or info[0] != "OPEN":
                    continue  # a deleted ledger's bytes: garbage, not data
                expected = ledger_ends[loc.ledger_id][0] if loc.ledger_id in ledger_ends else info[1]
                if loc.entry_id != expected + 1:
                    continue  # not the next entry of a live ledger: garbage too
                stored = entrylog.decode_stored_entry(os.pread(fd, loc.size, loc.offset + 4))
                rows.append((loc.ledger_id, loc.entry_id, log_id, loc.offset, loc.size))
                ledger_ends[loc.ledger_id] = (loc.entry_id, stored.ledger_length)
            if scan.end < size:
                os.ftruncate(fd, scan.end)  # the torn tail: never acknowledged, never served
            os.fsync(fd)
            with self._txn(full=True) as db:
                db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?)", rows)
                db.executemany("UPDATE ledgers SET last_entry_id = ?, length = ? WHERE ledger_id = ?",
                               [(last, length, ledger) for ledger, (last, length) in ledger_ends.items()])
                self._add_usage(db, log_id, usage)
                db.execute("UPDATE logs SET data_end = ? WHERE log_id = ?", (scan.end, log_id))
        finally:
            os.close(fd)

    @staticmethod
    def _add_usage(db: sqlite3.Connection, log_id: int, usage: dict[int, int]) -> None:
        db.executemany(
            "INSERT INTO log_usage VALUES (?, ?, ?) "
            "ON CONFLICT (log_id, ledger_id) DO UPDATE SET bytes = bytes + excluded.bytes",
            [(log_id, ledger, nbytes) for ledger, nbytes in usage.items()])

    # -- entry-log files ----------------------------------------------------------------------

    def _create_log_file(self, log_id: int) -> int:
        path = self._log_dir / entrylog.log_file_name(log_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        _pwrite_all(fd, entrylog.encode_header(), 0)
        os.fsync(fd)
        _fsync_dir(self._log_dir)
        return fd

    def _allocate_log_id(self, db: sqlite3.Connection) -> int:
        log_id = db.execute("SELECT value FROM counters WHERE name = ?", (_COUNTER_LOG,)).fetchone()[0]
        db.execute("UPDATE counters SET value = ? WHERE name = ?", (log_id + 1, _COUNTER_LOG))
        return log_id

    def _new_log(self, finish: _CurrentLog | None = None) -> _CurrentLog:
        """Register a new current log (and mark ``finish`` finished in the same transaction), then create it."""
        with self._txn(full=True) as db:
            if finish is not None:
                db.execute("UPDATE logs SET finished = 1, data_end = ? WHERE log_id = ?",
                           (finish.position, finish.log_id))
            log_id = self._allocate_log_id(db)
            db.execute("INSERT INTO logs VALUES (?, 0, ?)", (log_id, entrylog.HEADER_SIZE))
        fd = self._create_log_file(log_id)
        return _CurrentLog(log_id, fd, entrylog.HEADER_SIZE)

    def _write_ledgers_map(self, fd: int, position: int, usage: dict[int, int]) -> None:
        """Append the ledgers map and fill in the header, in BookKeeper's order (map durable before header)."""
        _pwrite_all(fd, entrylog.encode_ledgers_map(usage), position)
        os.fsync(fd)
        _pwrite_all(fd, entrylog.encode_header(position, len(usage))[:entrylog.LEDGERS_MAP_OFFSET_POSITION + 12], 0)
        os.fsync(fd)

    @overload
    def _finish_log(self, current: _CurrentLog, *, start_next: Literal[True]) -> _CurrentLog: ...
    @overload
    def _finish_log(self, current: _CurrentLog, *, start_next: bool = False) -> _CurrentLog | None: ...

    def _finish_log(self, current: _CurrentLog, *, start_next: bool = False) -> _CurrentLog | None:
        """Write the ledgers map of ``current``; mark it finished; optionally start the next log."""
        os.ftruncate(current.fd, current.position)
        self._write_ledgers_map(current.fd, current.position, current.usage)
        os.close(current.fd)
        if start_next:
            return self._new_log(finish=current)
        with self._txn(full=True) as db:
            db.execute("UPDATE logs SET finished = 1, data_end = ? WHERE log_id = ?", (current.position, current.log_id))
        return None

    def _read_fd(self, log_id: int) -> int:
        with self._fds_lock:
            fd = self._fds.get(log_id)
            if fd is None:
                fd = os.open(self._log_dir / entrylog.log_file_name(log_id), os.O_RDONLY)
                self._fds[log_id] = fd
            return fd

    def _retire_fd(self, log_id: int) -> None:
        with self._fds_lock:
            fd = self._fds.pop(log_id, None)
            if fd is not None:
                # another thread may still pread it; closing now could let the number be reused under it
                self._retired_fds.append(fd)

    # -- ledgers ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.directory}: storage is closed")

    def _check_writable(self, what: str) -> None:
        self._check_open()
        if self.read_only:
            raise StorageReadOnlyError(f"{self.directory}: opened read-only, cannot {what}")
        if self._failed is not None:
            raise StorageError(f"{self.directory}: storage failed earlier and takes no writes "
                               f"({self._failed}); reopen it")

    def create_ledger(self, custom_metadata: dict[str, str] | None = None) -> int:
        """Create an OPEN ledger; ids are strictly increasing and never reused, across restarts."""
        self._check_writable("create a ledger")
        custom = dict(custom_metadata or {})
        for key, value in custom.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise StorageError(f"custom metadata {key!r}={value!r}: keys and values must be strings")
        with self._txn(full=True) as db:
            ledger_id = db.execute("SELECT value FROM counters WHERE name = ?", (_COUNTER_LEDGER,)).fetchone()[0]
            db.execute("UPDATE counters SET value = ? WHERE name = ?", (ledger_id + 1, _COUNTER_LEDGER))
            db.execute("INSERT INTO ledgers VALUES (?, 'OPEN', -1, 0, ?, ?)",
                       (ledger_id, json.dumps(custom), _now_ms()))
        with self._cond:
            self._open_ledgers[ledger_id] = _OpenLedger(0, 0, -1)
        return ledger_id

    def _metadata_row(self, db: sqlite3.Connection, ledger_id: int) -> LedgerMetadata:
        row = db.execute("SELECT ledger_id, state, last_entry_id, length, custom_metadata, created_at_ms "
                         "FROM ledgers WHERE ledger_id = ?", (ledger_id,)).fetchone()
        if row is None:
            raise LedgerNotFoundError(f"ledger {ledger_id}: not found in {self.directory}")
        return self._to_metadata(row)

    @staticmethod
    def _to_metadata(row: tuple) -> LedgerMetadata:
        return LedgerMetadata(row[0], row[1], row[2], row[3], json.loads(row[4]), row[5])

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self._metadata_row(self._reader_db(), ledger_id)

    def list_ledgers(self) -> list[LedgerMetadata]:
        rows = self._reader_db().execute(
            "SELECT ledger_id, state, last_entry_id, length, custom_metadata, created_at_ms "
            "FROM ledgers ORDER BY ledger_id").fetchall()
        return [self._to_metadata(row) for row in rows]

    def _stop_accepting(self, ledger_id: int) -> None:
        """Refuse new adds to the ledger and wait until the ones already queued are durable."""
        with self._cond:
            state = self._open_ledgers.get(ledger_id)
            if state is not None:
                state.accepting = False
            target = self._submitted_seq
        self._wait_durable(target)

    def close_ledger(self, ledger_id: int) -> LedgerMetadata:
        """Close the ledger: no more entries, lastEntryId and length fixed. Closing a closed ledger is a no-op."""
        self._check_writable(f"close ledger {ledger_id}")
        self.ledger_metadata(ledger_id)
        self._stop_accepting(ledger_id)
        with self._txn(full=True) as db:
            db.execute("UPDATE ledgers SET state = 'CLOSED' WHERE ledger_id = ?", (ledger_id,))
            meta = self._metadata_row(db, ledger_id)
        with self._cond:
            self._open_ledgers.pop(ledger_id, None)
        return meta

    def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata and index; its bytes stay in the entry logs until compact()."""
        self._check_writable(f"delete ledger {ledger_id}")
        self.ledger_metadata(ledger_id)
        self._stop_accepting(ledger_id)
        with self._txn(full=True) as db:
            db.execute("DELETE FROM entries WHERE ledger_id = ?", (ledger_id,))
            db.execute("DELETE FROM ledgers WHERE ledger_id = ?", (ledger_id,))
        with self._cond:
            self._open_ledgers.pop(ledger_id, None)

    # -- adding -----------------------------------------------------------------------------

    def _enqueue(self, ledger_id: int, payload: bytes, callback: AddCallback | None,
                 done: threading.Event | None) -> _PendingAdd:
        """Queue one add; raise what makes it impossible (closed ledger, read-only, failed storage, bad payload)."""
        self._check_writable(f"add to ledger {ledger_id}")
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise StorageError(f"ledger {ledger_id}: payload must be bytes, not {type(payload).__name__}")
        payload = bytes(payload)
        with self._cond:
            if self._stopping:
                raise StorageError(f"{self.directory}: storage is closing")
            if self._failed is not None:
                raise StorageError(f"{self.directory}: storage failed earlier and takes no writes "
                                   f"({self._failed}); reopen it")
            state = self._open_ledgers.get(ledger_id)
            if state is None or not state.accepting:
                if state is None and not self._ledger_exists(ledger_id):
                    raise LedgerNotFoundError(f"ledger {ledger_id}: not found in {self.directory}")
                raise LedgerClosedError(f"ledger {ledger_id}: closed, cannot add entries")
            entry_id = state.next_entry_id
            state.next_entry_id += 1
            state.length += len(payload)
            record = entrylog.encode_record(ledger_id, entry_id, state.durable_last, state.length, payload)
            self._submitted_seq += 1
            add = _PendingAdd(self._submitted_seq, ledger_id, entry_id, record, callback, done)
            self._pending.append(add)
            self._cond.notify_all()
        return add

    def _ledger_exists(self, ledger_id: int) -> bool:
        return self._reader_db().execute("SELECT 1 FROM ledgers WHERE ledger_id = ?", (ledger_id,)).fetchone() is not None

    def add_entry(self, ledger_id: int, payload: bytes) -> int:
        """Append one entry; returns its id once it is on disk (fsync'd) and readable."""
        done = threading.Event()
        add = self._enqueue(ledger_id, payload, None, done)
        done.wait()
        if add.error is not None:
            raise add.error
        return add.entry_id

    def add_entry_async(self, ledger_id: int, payload: bytes, callback: AddCallback) -> int | None:
        """Queue an append; ``callback(entry_id, None)`` once durable, or ``callback(None, exc)``.

        Returns the entry id the add will have (ids are assigned in submission order, as BookKeeper's pipelined
        adds are), or None when it was refused. Callbacks run on one storage thread, in submission order; an add
        refused for its ledger (closed, deleted, unknown) or a bad payload is reported through its callback too,
        after the callbacks of the adds queued before it. When the storage itself takes no writes (read-only,
        closing, failed) this raises instead.
        """
        try:
            return self._enqueue(ledger_id, payload, callback, None).entry_id
        except StorageError as exc:
            with self._cond:
                if self._writer is not None and self._writer.is_alive() and not self._stopping:
                    self._submitted_seq += 1
                    self._pending.append(_PendingAdd(self._submitted_seq, ledger_id, -1, b"", callback, None, exc))
                    self._cond.notify_all()
                    return None
            raise  # no writer to keep the order (read-only, closing or failed): tell the caller directly

    def _wait_durable(self, target_seq: int) -> None:
        with self._cond:
            while self._durable_seq < target_seq and self._failed is None:
                self._cond.wait()
            if self._durable_seq < target_seq and self._failed is not None:
                raise StorageError(f"{self.directory}: storage failed ({self._failed})")

    def flush(self) -> None:
        """Wait until every add queued so far is durable."""
        with self._cond:
            target = self._submitted_seq
        self._wait_durable(target)

    def _write_loop(self) -> None:
        """Stage one of two: write and sync each group, then hand it to the indexer (stage two).

        An add is acknowledged only once both stages are done for its group, exactly as when one thread did both;
        but while the indexer commits group N's rows to SQLite, the writer already writes and syncs group N+1, so
        under load a group commit costs about one `fdatasync` instead of a sync plus an index commit.
        """
        while True:
            with self._index_cond:
                # At most one group waits for its index commit while the next one is written: when the indexer is
                # the slower stage, adds gather into a bigger next group instead of many tiny syncs.
                while self._index_pushed - self._index_done > 1:
                    self._index_cond.wait()
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    break
                few = len(self._pending) < _PIPELINE_MIN_GROUP
            if few:
                # A handful of adds: writing them ahead of the index commit would be a nearly empty sync, and the
                # appenders of the group being indexed add again as soon as it is acknowledged. Let them gather.
                self._drain_index()
            with self._cond:
                # bound one group so a flood of queued adds is written (and acknowledged) in steps
                count, nbytes = 0, 0
                for add in self._pending:
                    count += 1
                    nbytes += len(add.record)
                    if nbytes >= _MAX_GROUP_BYTES or count >= _MAX_GROUP_ENTRIES:
                        break
                batch, self._pending = self._pending[:count], self._pending[count:]
                failed = self._failed  # the indexer may have failed: nothing more is written then
            if failed is not None:
                job = _IndexJob(batch, error=failed)
            else:
                try:
                    with self._io_lock:
                        job = self._write_batch(batch)
                except BaseException as exc:  # any failure here leaves the tail unknown: stop taking writes
                    job = _IndexJob(batch, error=StorageError(f"{self.directory}: write failed ({exc})"))
                    log.error("%s; this storage takes no more writes until it is reopened", job.error, exc_info=exc)
            if job.error is not None:
                with self._cond:
                    self._failed = self._failed or job.error
                    job.batch += self._pending  # everything queued behind it fails too, after it, in order
                    self._pending = []
                self._push_index(job)
                break
            self._push_index(job)
        self._push_index(None)

    def _push_index(self, job: _IndexJob | None) -> None:
        with self._index_cond:
            self._index_queue.append(job)
            self._index_pushed += 1
            self._index_cond.notify_all()

    def _drain_index(self) -> None:
        """Wait until every group handed to the indexer so far is indexed (before a log is finished: its data_end
        must not be moved by a commit that comes later)."""
        with self._index_cond:
            target = self._index_pushed
            while self._index_done < target:
                self._index_cond.wait()

    def _index_loop(self) -> None:
        """Stage two: commit the index rows of every group written meanwhile in one SQLite transaction, then
        acknowledge their adds in order."""
        while True:
            with self._index_cond:
                while not self._index_queue:
                    self._index_cond.wait()
                items, self._index_queue = self._index_queue, []
            jobs = [job for job in items if job is not None]
            written = [job for job in jobs if job.error is None]
            if written:
                error = self._failed
                if error is None:
                    try:
                        with self._txn(full=False) as db:
                            for job in written:
                                self._commit_index(db, job)
                    except BaseException as exc:
                        error = StorageError(f"{self.directory}: index commit failed ({exc})")
                        log.error("%s; this storage takes no more writes until it is reopened", error, exc_info=exc)
                        with self._cond:
                            self._failed = self._failed or error
                if error is not None:
                    for job in written:
                        job.error = error
            if jobs:
                with self._cond:
                    for job in jobs:
                        for add in job.batch:
                            if job.error is not None:
                                if add.error is None:
                                    add.error = job.error
                                continue
                            if add.error is not None:
                                continue
                            state = self._open_ledgers.get(add.ledger_id)
                            if state is not None and add.entry_id > state.durable_last:
                                state.durable_last = add.entry_id
                    self._durable_seq = jobs[-1].batch[-1].seq
                    self._cond.notify_all()
                for job in jobs:
                    self._hand_off(job.batch)
            with self._index_cond:
                self._index_done += len(items)
                self._index_cond.notify_all()
            if len(jobs) < len(items):
                return  # the writer stopped, and everything it wrote is acknowledged

    def _hand_off(self, adds: list[_PendingAdd]) -> None:
        callbacks = []
        for add in adds:
            if add.done is not None:
                add.done.set()
            elif add.callback is not None:
                callbacks.append(add)
        if callbacks:
            self._callbacks.put(callbacks)  # one hand-off per group, not one per add

    def _commit_index(self, db: sqlite3.Connection, job: _IndexJob) -> None:
        db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?)", job.rows)
        db.executemany("UPDATE ledgers SET last_entry_id = ?, length = ? WHERE ledger_id = ?",
                       [(last, length, ledger) for ledger, (last, length) in job.ledger_ends.items()])
        self._add_usage(db, job.log_id, job.usage)
        db.execute("UPDATE logs SET data_end = ? WHERE log_id = ?", (job.data_end, job.log_id))

    def _write_batch(self, batch: list[_PendingAdd]) -> _IndexJob:
        """Write and fsync; return what the indexer commits. Rotation happens between records so no file grows
        far past the limit; a log is finished only once everything written to it is indexed."""
        assert self._current is not None  # a writable storage always has a current log until close()
        current: _CurrentLog = self._current
        job = _IndexJob(batch, current.log_id, current.position)
        chunk: list[bytes] = []
        chunk_start = current.position
        position = current.position

        def flush_chunk() -> None:
            if chunk:
                _pwrite_all(current.fd, b"".join(chunk), chunk_start)
                chunk.clear()
            _datasync(current.fd)
            self._stats["syncs"] += 1

        for add in batch:
            if add.error is not None:
                continue  # refused at submission; only its callback travels in order
            size = len(add.record)
            if position + size > self.entry_log_size_limit and position > entrylog.HEADER_SIZE:
                flush_chunk()
                current.position = job.data_end = position
                self._drain_index()  # earlier groups of this log first: their commits must not come after
                with self._txn(full=False) as db:
                    self._commit_index(db, job)
                self._current = self._finish_log(current, start_next=True)
                current = self._current
                job = _IndexJob(batch, current.log_id, current.position)
                chunk_start = position = current.position
            chunk.append(add.record)
            job.rows.append((add.ledger_id, add.entry_id, current.log_id, position, size - 4))
            job.ledger_ends[add.ledger_id] = (add.entry_id, int.from_bytes(add.record[28:36], "big", signed=True))
            job.usage[add.ledger_id] = job.usage.get(add.ledger_id, 0) + size
            current.usage[add.ledger_id] = current.usage.get(add.ledger_id, 0) + size
            position += size
        flush_chunk()
        current.position = job.data_end = position
        written = [add for add in batch if add.error is None]
        self._stats["entriesWritten"] += len(written)
        self._stats["bytesWritten"] += sum(len(add.record) for add in written)
        return job

    def _callback_loop(self) -> None:
        while True:
            group = self._callbacks.get()
            if group is None:
                return
            for add in group:
                try:
                    if add.error is not None:
                        add.callback(None, add.error)
                    else:
                        add.callback(add.entry_id, None)
                except BaseException:  # a failing callback must not stop the ones after it
                    log.exception("%s: the callback of ledger %d entry %d failed; the callbacks after it still run",
                                  self.directory, add.ledger_id, add.entry_id)

    # -- reading ----------------------------------------------------------------------------

    def _locate(self, db: sqlite3.Connection, ledger_id: int, first: int, last: int) -> list[tuple]:
        rows = db.execute("SELECT entry_id, log_id, offset, size FROM entries "
                          "WHERE ledger_id = ? AND entry_id BETWEEN ? AND ? ORDER BY entry_id",
                          (ledger_id, first, last)).fetchall()
        if len(rows) != last - first + 1:
            if not db.execute("SELECT 1 FROM ledgers WHERE ledger_id = ?", (ledger_id,)).fetchone():
                raise LedgerNotFoundError(f"ledger {ledger_id}: not found in {self.directory}")
            have = {row[0] for row in rows}
            missing = next(e for e in range(first, last + 1) if e not in have)
            raise EntryNotFoundError(f"ledger {ledger_id}: no entry {missing}")
        return rows

    def _read_located(self, ledger_id: int, row: tuple) -> bytes:
        entry_id, log_id, offset, size = row
        fd = self._read_fd(log_id)
        stored = os.pread(fd, size, offset + 4)
        try:
            entry = entrylog.decode_stored_entry(stored)
        except ValueError as exc:
            raise StorageCorruptError(f"{entrylog.log_file_name(log_id)} byte {offset}: {exc}") from None
        if entry.ledger_id != ledger_id or entry.entry_id != entry_id:
            raise StorageCorruptError(f"{entrylog.log_file_name(log_id)} byte {offset}: holds ledger "
                                      f"{entry.ledger_id} entry {entry.entry_id}, index says {ledger_id}:{entry_id}")
        return entry.payload

    def read_entries(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries ``first..last`` inclusive; every one is CRC-checked before it is returned."""
        self._check_open()
        if first < 0 or last < first:
            raise StorageError(f"ledger {ledger_id}: bad entry range {first}..{last}")
        for attempt in range(3):
            rows = self._locate(self._reader_db(), ledger_id, first, last)
            try:
                return [self._read_located(ledger_id, row) for row in rows]
            except (FileNotFoundError, StorageCorruptError):
                # compaction may have moved the entries between the lookup and the read: look again
                if attempt == 2:
                    raise
                for row in rows:
                    self._retire_fd(row[1])
        raise AssertionError("unreachable")

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        return self.read_entries(ledger_id, entry_id, entry_id)[0]

    # -- garbage ----------------------------------------------------------------------------

    def garbage_bytes(self) -> int:
        """Bytes still held in entry logs by deleted ledgers (what compact() would reclaim)."""
        row = self._reader_db().execute(
            "SELECT COALESCE(SUM(bytes), 0) FROM log_usage "
            "WHERE ledger_id NOT IN (SELECT ledger_id FROM ledgers)").fetchone()
        return row[0]

    def compact(self) -> dict:
        """Rewrite entry logs without deleted ledgers' records, like bookie garbage collection.

        Each log holding garbage is copied (live records only) to a new log with a fresh id; the index moves to
        the copy in one transaction; then the old file is removed. The current log is finished first if it holds
        garbage.
        """
        self._check_writable("compact")
        with self._compact_lock:
            live = {row[0] for row in self._reader_db().execute("SELECT ledger_id FROM ledgers")}
            with self._io_lock:
                current = self._current
                assert current is not None  # _check_writable: open and writable, so a current log exists
                if any(ledger not in live for ledger in current.usage):
                    self._drain_index()  # the log's last groups indexed before it is marked finished
                    self._current = self._finish_log(current, start_next=True)
            candidates = [row[0] for row in self._reader_db().execute(
                "SELECT DISTINCT u.log_id FROM log_usage u JOIN logs l ON l.log_id = u.log_id "
                "WHERE l.finished = 1 AND u.ledger_id NOT IN (SELECT ledger_id FROM ledgers) ORDER BY u.log_id")]
            rewritten = reclaimed = removed = 0
            for log_id in candidates:
                before, after = self._compact_log(log_id)
                reclaimed += before - after
                if after:
                    rewritten += 1
                else:
                    removed += 1
            return {"filesRewritten": rewritten, "filesRemoved": removed, "bytesReclaimed": reclaimed}

    def _compact_log(self, log_id: int) -> tuple[int, int]:
        old_path = self._log_dir / entrylog.log_file_name(log_id)
        old_size = old_path.stat().st_size
        data_end = self._reader_db().execute("SELECT data_end FROM logs WHERE log_id = ?", (log_id,)).fetchone()[0]
        live = {row[0] for row in self._reader_db().execute("SELECT ledger_id FROM ledgers")}
        fd = os.open(old_path, os.O_RDONLY)
        try:
            scan = entrylog.scan_records(fd, entrylog.HEADER_SIZE, data_end)
            keep = [loc for loc in scan.records if loc.ledger_id in live]
            if not keep:
                with self._txn(full=True) as db:
                    db.execute("DELETE FROM log_usage WHERE log_id = ?", (log_id,))
                    db.execute("DELETE FROM logs WHERE log_id = ?", (log_id,))
                self._remove_log_file(log_id)
                return old_size, 0
            with self._txn(full=True) as db:
                new_id = self._allocate_log_id(db)
            tmp_path = self._log_dir / (entrylog.log_file_name(new_id) + COMPACTING_SUFFIX)
            out = os.open(tmp_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                position = entrylog.HEADER_SIZE
                moves, parts = [], [entrylog.encode_header()]
                usage: dict[int, int] = {}
                for loc in keep:
                    record = os.pread(fd, loc.size + 4, loc.offset)
                    parts.append(record)
                    moves.append((new_id, position, loc.ledger_id, loc.entry_id, log_id, loc.offset))
                    usage[loc.ledger_id] = usage.get(loc.ledger_id, 0) + len(record)
                    position += len(record)
                    if sum(map(len, parts)) > 8 << 20:
                        _pwrite_all(out, b"".join(parts), position - sum(map(len, parts)))
                        parts = []
                if parts:
                    _pwrite_all(out, b"".join(parts), position - sum(map(len, parts)))
                os.fsync(out)
                self._write_ledgers_map(out, position, usage)
            finally:
                os.close(out)
            new_path = self._log_dir / entrylog.log_file_name(new_id)
            os.replace(tmp_path, new_path)
            _fsync_dir(self._log_dir)
            with self._txn(full=True) as db:
                db.execute("INSERT INTO logs VALUES (?, 1, ?)", (new_id, position))
                self._add_usage(db, new_id, usage)
                # only entries still indexed at their old place move; a ledger deleted meanwhile stays deleted
                db.executemany("UPDATE entries SET log_id = ?, offset = ? "
                               "WHERE ledger_id = ? AND entry_id = ? AND log_id = ? AND offset = ?", moves)
                db.execute("DELETE FROM log_usage WHERE log_id = ?", (log_id,))
                db.execute("DELETE FROM logs WHERE log_id = ?", (log_id,))
        finally:
            os.close(fd)
        self._remove_log_file(log_id)
        return old_size, new_path.stat().st_size

    def _remove_log_file(self, log_id: int) -> None:
        self._retire_fd(log_id)
        (self._log_dir / entrylog.log_file_name(log_id)).unlink()
        _fsync_dir(self._log_dir)

    def stats(self) -> dict:
        """Writer counters since open: entries and bytes written, and data syncs (one per group commit)."""
        return dict(self._stats)

    def entry_log_files(self) -> list[Path]:
        """The current entry-log files, ascending log id."""
        rows = self._reader_db().execute("SELECT log_id FROM logs ORDER BY log_id").fetchall()
        return [self._log_dir / entrylog.log_file_name(row[0]) for row in rows]

    # -- export -----------------------------------------------------------------------------

    def export(self, dest: Path | str) -> dict:
        """Copy the entry logs as of one consistent moment and write `ledgers.txt` for the live ledgers.

        Layout: ``dest/ledgers/current/<hex>.log`` (a log still being written is copied up to its last indexed
        record, with the unfinished header) and ``dest/ledgers.txt`` in `listledgers -meta` console form.
        """
        self._check_open()
        dest = Path(dest)
        for attempt in range(5):
            try:
                return self._export_once(dest)
            except FileNotFoundError:
                if attempt == 4:
                    raise StorageError(f"{self.directory}: entry logs kept changing during export; try again") from None
        raise AssertionError("unreachable")

    def _export_once(self, dest: Path) -> dict:
        db = self._reader_db()
        db.execute("BEGIN")
        try:
            logs = db.execute("SELECT log_id, finished, data_end FROM logs ORDER BY log_id").fetchall()
            ledgers = [self._to_metadata(row) for row in db.execute(
                "SELECT ledger_id, state, last_entry_id, length, custom_metadata, created_at_ms "
                "FROM ledgers ORDER BY ledger_id")]
            # open every file inside the snapshot so a later compaction cannot remove it under us
            sources = []
            try:
                for log_id, finished, data_end in logs:
                    sources.append((log_id, finished, data_end,
                                    open(self._log_dir / entrylog.log_file_name(log_id), "rb")))
            except FileNotFoundError:
                for *_, src in sources:
                    src.close()
                raise
        finally:
            db.execute("COMMIT")
        out_dir = dest / LEDGERS_DIR
        out_dir.mkdir(parents=True, exist_ok=True)
        files, total = [], 0
        try:
            for log_id, finished, data_end, src in sources:
                target = out_dir / entrylog.log_file_name(log_id)
                tmp = target.with_name(target.name + ".tmp")
                with open(tmp, "wb") as dst:
                    if finished:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    else:
                        dst.write(entrylog.encode_header())
                        src.seek(entrylog.HEADER_SIZE)
                        remaining = data_end - entrylog.HEADER_SIZE
                        while remaining > 0:
                            block = src.read(min(remaining, 1 << 20))
                            if not block:
                                raise StorageCorruptError(f"{src.name}: shorter than its indexed data")
                            dst.write(block)
                            remaining -= len(block)
                    dst.flush()
                    os.fsync(dst.fileno())
                os.replace(tmp, target)
                files.append(target.name)
                total += target.stat().st_size
        finally:
            for *_, src in sources:
                src.close()
        listing = "".join(f"ledgerID: {meta.ledger_id}\n{meta.to_bookkeeper_string()}\n" for meta in ledgers)
        tmp = dest / "ledgers.txt.tmp"
        tmp.write_text(listing)
        os.replace(tmp, dest / "ledgers.txt")
        return {"destination": str(dest), "entryLogs": files, "entryLogBytes": total, "ledgers": len(ledgers),
                "ledgerList": str(dest / "ledgers.txt")}

    # -- metadata store ---------------------------------------------------------------------

    def meta_get(self, key: str) -> bytes | None:
        row = self._reader_db().execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def meta_put(self, key: str, value: bytes) -> None:
        self.meta_put_many({key: value})

    def meta_delete(self, key: str) -> None:
        self.meta_put_many({key: None})

    def next_meta_version(self) -> int:
        """A number larger than every one handed out before, for :meth:`meta_put_many`'s ``versions``."""
        return next(self._meta_version_counter)

    def meta_put_many(self, items: Mapping[str, bytes | None], versions: dict[str, int] | None = None,
                      sync: bool = True) -> None:
        """Set (or, with None, delete) several keys in one durable transaction; returns once they are durable.

        Concurrent callers are committed together (group commit: one leader writes every queued change in one
        SQLite transaction and one sync, the others wait for it), later calls winning on the same key. A key given
        a version in ``versions`` is written only if no higher version of it was committed or queued before, so a
        state snapshot taken earlier never overwrites a newer one that overtook it; an unversioned write or delete
        of a key supersedes every version handed out before it.

        ``sync=False`` (cursor positions) commits without waiting for the disk: the change survives a crash of the
        process at once, and a power loss once any later synced commit (the write-ahead log is replayed as a
        prefix, so what came before a surviving commit survives too). Pulsar persists cursor positions lazily as
        well; what a lost position costs is a replay, which recovery handles.
        """
        self._check_writable("change metadata")
        for key, value in items.items():
            if not isinstance(key, str) or not key:
                raise StorageError(f"metadata key {key!r}: must be a non-empty string")
            if value is not None and not isinstance(value, (bytes, bytearray, memoryview)):
                raise StorageError(f"metadata key {key}: value must be bytes, not {type(value).__name__}")
        items = {k: (None if v is None else bytes(v)) for k, v in items.items()}  # a copy callers cannot change
        with self._meta_cond:
            self._meta_tickets += 1
            ticket = self._meta_tickets
            self._meta_queue.append((ticket, items, dict(versions or {}), sync))
            while self._meta_done < ticket and self._meta_leader:
                self._meta_cond.wait()
            if self._meta_done >= ticket:
                error = self._meta_errors.pop(ticket, None)
                if error is not None:
                    raise error
                return
            self._meta_leader = True
            batch, self._meta_queue = self._meta_queue, []
        error = None
        try:
            self._commit_meta(batch)
        except BaseException as exc:  # noqa: BLE001 — raised to every caller whose change was in this batch
            error = exc
        with self._meta_cond:
            if error is not None:
                for queued, *_ in batch:
                    if queued != ticket:
                        self._meta_errors[queued] = error
            self._meta_done = batch[-1][0]
            self._meta_leader = False  # the next waiter whose change is still queued leads
            self._meta_cond.notify_all()
        if error is not None:
            raise error

    def _commit_meta(self, batch: list[tuple[int, dict, dict, bool]]) -> None:
        merged: dict[str, bytes | None] = {}
        committed: dict[str, int] = {}
        for _, items, versions, _ in batch:
            for key, value in items.items():
                version = versions.get(key)
                if version is None:
                    merged[key] = value
                    committed[key] = next(self._meta_version_counter)  # older versioned snapshots lose
                elif version > committed.get(key, self._meta_versions.get(key, 0)):
                    merged[key] = value
                    committed[key] = version
        puts = [(key, value) for key, value in merged.items() if value is not None]
        deletes = [(key,) for key, value in merged.items() if value is None]
        with self._txn(full=any(sync for *_, sync in batch)) as db:
            if puts:
                db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", puts)
            if deletes:
                db.executemany("DELETE FROM kv WHERE key = ?", deletes)
        self._meta_versions.update(committed)
        self._stats["metadataCommits"] += 1

    def meta_list(self, prefix: str) -> list[str]:
        if not prefix:
            rows = self._reader_db().execute("SELECT key FROM kv ORDER BY key").fetchall()
            return [row[0] for row in rows]
        # A range on the primary key, so SQLite walks its index instead of scanning every key (an engine with
        # 10,000 topics has ~40,000 keys, and every managed-ledger open lists its cursors). UTF-8 sorts like code
        # points, so [prefix, prefix with its last character bumped) holds exactly the keys starting with prefix.
        head = prefix.rstrip("\U0010ffff")
        if head:
            upper = head[:-1] + chr(ord(head[-1]) + 1)
            rows = self._reader_db().execute(
                "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (prefix, upper)).fetchall()
        else:  # only the largest code point: nothing to bump, read to the end
            rows = self._reader_db().execute("SELECT key FROM kv WHERE key >= ? ORDER BY key", (prefix,)).fetchall()
        return [row[0] for row in rows if row[0].startswith(prefix)]

    def next_counter(self, name: str) -> int:
        """Return and advance a named engine-wide counter (starts at 0); durable, survives restarts."""
        self._check_writable(f"advance counter {name}")
        key = f"counter/{name}"
        with self._txn(full=True) as db:
            row = db.execute("SELECT value FROM counters WHERE name = ?", (key,)).fetchone()
            value = 0 if row is None else row[0]
            db.execute("INSERT OR REPLACE INTO counters VALUES (?, ?)", (key, value + 1))
        return value

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Make every queued add durable, stop the storage threads and release the writer lock."""
        if self._closed:
            return
        if self._writer is not None:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            self._writer.join()
            if self._indexer is not None:  # started with the writer
                self._indexer.join()
            self._callbacks.put(None)
            callback_thread = self._callback_thread  # started with the writer
            if callback_thread is not None and callback_thread is not threading.current_thread():
                callback_thread.join()
        self._release()

    def _release(self) -> None:
        self._closed = True
        if self._current is not None:
            try:
                os.fsync(self._current.fd)
            except OSError:
                pass
            os.close(self._current.fd)
            self._current = None
        with self._fds_lock:
            for fd in list(self._fds.values()) + self._retired_fds:
                os.close(fd)
            self._fds.clear()
            self._retired_fds.clear()
        with self._read_conns_lock:
            for conn in self._read_conns:
                conn.close()
            self._read_conns.clear()
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def __enter__(self) -> "LedgerStorage":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"LedgerStorage({str(self.directory)!r}, {mode})"
