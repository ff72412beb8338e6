"""The batched log writer (Pulsar's TxnLogBufferedWriter, PIP-160).

Records are buffered and written as one entry — prefix ``0E 01 00 01`` + batched message — when
the buffer reaches max records or max bytes, or on a re-armed max-delay tick. A record at or above
max bytes is written alone, plain, after flushing what was buffered. With batching off every
record is written plain. Callbacks resolve in write order with (ledger, entry, batch size, index).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from ..codec import encode_batched_serialized
from .completion import Completion
from .position import Position
from .writer_metrics import BufferedWriterMetrics

log = logging.getLogger(__name__)

Callback = Callable[["TxnPosition | None", "BaseException | None"], None]


class Appender(Protocol):
    # Returns object: whatever an appender returns is ignored, the callback is the answer.
    def add_entry_async(self, payload: bytes, callback: Callable[[Optional[Position], Optional[BaseException]], None]) -> object: ...


class WriterClosedError(Exception):
    def __init__(self, message: str = "Transaction log buffered write has closed"):
        super().__init__(message)


@dataclass
class BufferedWriterConfig:
    enabled: bool = False
    max_records: int = 512
    max_size: int = 4 * 1024 * 1024
    max_delay_ms: float = 1.0
    key_prefix: str = "transactionLogBatchedWrite"

    @property
    def batching(self) -> bool:
        """TxnLogBufferedWriter batches only when enabled with max records above 1; it refuses no threshold."""
        return self.enabled and self.max_records > 1


@dataclass(frozen=True)
class TxnPosition:
    """A record's place: its entry, and its index inside a batch of ``batch_size`` (1 = a whole entry)."""

    ledger_id: int
    entry_id: int
    batch_size: int = 1
    batch_index: int = 0

    @property
    def position(self) -> Position:
        return Position(self.ledger_id, self.entry_id)

    def ack_set(self) -> Optional[list[int]]:
        """Bits [0, batch_size) set but this record's, as signed 64-bit words; None deletes the whole entry."""
        if self.batch_size <= 1:
            return None
        bits = ((1 << self.batch_size) - 1) & ~(1 << self.batch_index)
        words = []
        while bits:
            word = bits & ((1 << 64) - 1)
            words.append(word - (1 << 64) if word >> 63 else word)
            bits >>= 64
        while words and words[-1] == 0:
            words.pop()
        return words

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}" + (f":{self.batch_index}/{self.batch_size}" if self.batch_size > 1 else "")


class _FlushTimer:
    """One timer thread for every writer of the process, as Pulsar's writers share one broker timer.

    A writer with buffered records asks to be called back at its next max-delay tick; at each tick the thread
    calls every writer that is due, so 16 coordinators and their pending-ack stores cost one wake-up per tick,
    not one each. (A thread per writer cost a wake-up per flush, about as many as there were entries.)
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, "BufferedWriter"]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, writer: "BufferedWriter", when: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), writer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="buffered-writer-timer", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is writer:
                self._cond.notify()  # earlier than what the thread sleeps for

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                now = time.monotonic()
                due = []
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
            for writer in due:
                try:
                    writer._on_tick()
                except Exception:  # one writer's failure must not stop the ticks of the others
                    log.exception("buffered writer %s: max-delay flush failed", writer.name)


_TIMER = _FlushTimer()


@dataclass
class _Pending:
    record: bytes
    callback: Callback
    added_ms: float


class BufferedWriter:
    """Records are added on the caller's thread: with batching off they go straight to the managed ledger (in
    call order, under the writer's lock), with batching on into the buffer, which the caller flushes when it is
    full. The shared timer (one thread) only flushes on the max-delay tick. No hop through a writer thread per
    record: that hand-off cost more than the write itself under load."""

    def __init__(self, ledger: Appender, config: BufferedWriterConfig, metrics: BufferedWriterMetrics | None = None,
                 name: str = ""):
        self.ledger = ledger
        self.config = config
        self.metrics = metrics
        self.name = name
        self.state = "OPEN"
        self._buffer: list[_Pending] = []
        self._bytes = 0
        self._cond = threading.Condition()  # guards state, config and the buffer
        self._next_tick = time.monotonic() + config.max_delay_ms / 1000
        # The tick the shared timer will call us at (None: none asked for). Only a writer with buffered records
        # asks, so thousands of idle pending-ack stores cost nothing.
        self._scheduled: Optional[float] = None

    # -- public ------------------------------------------------------------------------------
    def add(self, record: bytes, callback: Callback) -> None:
        with self._cond:
            if self.state == "OPEN":
                self._add(record, callback)
                return
        _safe(callback, None, WriterClosedError())

    def add_sync(self, record: bytes, timeout: float = 30) -> TxnPosition:
        done = Completion()
        self.add(record, done)
        return done.result(timeout, f"{self.name}: write")

    def update_config(self, config: BufferedWriterConfig) -> None:
        with self._cond:
            if self._buffer and not config.batching:
                self._flush("max_delay")
            self.config = config
            if self._buffer:
                self._schedule()  # a shorter max delay takes effect at once

    def close(self) -> None:
        with self._cond:
            if self.state != "OPEN":
                return
            self.state = "CLOSED"
            self._fail_buffer(WriterClosedError())

    # -- under the lock ------------------------------------------------------------------------
    def _add(self, record: bytes, callback: Callback) -> None:
        config = self.config
        if not config.batching:
            self._write_plain(record, callback)
            return
        if len(record) >= config.max_size:
            if self._buffer:
                self._flush("large_data")  # Pulsar counts the forced flush; the large record itself is not observed
            self._write_plain(record, callback)
            return
        if not self._buffer:
            self._align_tick(time.monotonic())
            self._schedule()
        self._buffer.append(_Pending(record, callback, time.monotonic() * 1000))
        self._bytes += len(record)
        if len(self._buffer) >= config.max_records:
            self._flush("max_records")
        elif self._bytes >= config.max_size:
            self._flush("max_size")

    def _schedule(self) -> None:
        """Ask the shared timer for a call at the next tick (once per tick)."""
        if self._scheduled is None or self._scheduled > self._next_tick:
            self._scheduled = self._next_tick
            _TIMER.schedule(self, self._next_tick)

    def _on_tick(self) -> None:
        """The re-armed max-delay tick: flush whatever is buffered when it fires, then arm the next one."""
        with self._cond:
            self._scheduled = None
            if self.state != "OPEN" or not self._buffer:
                return  # flushed meanwhile (max records/size) or closed: the next record asks again
            now = time.monotonic()
            if now >= self._next_tick:
                self._flush("max_delay")
                self._next_tick = now + self.config.max_delay_ms / 1000
            else:
                self._schedule()

    def _align_tick(self, now: float) -> None:
        """Move a stale tick to the next slot of the fixed max-delay grid.

        The timer sleeps while the buffer is empty instead of ticking idly; skipping the ticks that
        would have found nothing to flush gives the same flushes as a tick re-armed every max delay,
        so a fresh record waits for the grid, not for a delay counted from itself.
        """
        period = self.config.max_delay_ms / 1000
        if self._next_tick <= now:
            self._next_tick += (int((now - self._next_tick) / period) + 1) * period

    def _write_plain(self, record: bytes, callback: Callback) -> None:
        def done(pos, exc):
            if exc is not None:
                _safe(callback, None, exc)
            else:
                _safe(callback, TxnPosition(pos.ledger_id, pos.entry_id, 1, 0), None)

        self.ledger.add_entry_async(record, done)

    def _flush(self, trigger: str) -> None:
        batch, size = self._buffer, self._bytes
        self._buffer, self._bytes = [], 0
        if not batch:
            return
        if self.metrics:
            self.metrics.flushed(trigger, len(batch), size, time.monotonic() * 1000 - batch[0].added_ms)
        payload = encode_batched_serialized([p.record for p in batch])
        count = len(batch)

        def done(pos, exc):
            for index, pending in enumerate(batch):
                if exc is not None:
                    _safe(pending.callback, None, exc)
                else:
                    _safe(pending.callback, TxnPosition(pos.ledger_id, pos.entry_id, count, index), None)

        try:
            self.ledger.add_entry_async(payload, done)
        except Exception as exc:
            # The batch has left the buffer, and on the timer thread nobody would see the raise: every record's
            # caller learns of the failure through its callback instead of waiting for one that never comes.
            log.exception("%s: writing a batch of %d records failed (%s flush)", self.name, count, trigger)
            done(None, exc)

    def _fail_buffer(self, exc: BaseException) -> None:
        batch, self._buffer, self._bytes = self._buffer, [], 0
        for pending in batch:
            _safe(pending.callback, None, exc)


def _safe(callback: Callback, pos, exc) -> None:
    """One callback raising must not stop the others of its batch."""
    try:
        callback(pos, exc)
    except Exception:
        log.exception("a buffered-writer callback failed (position %s); the rest of its batch goes on", pos)
