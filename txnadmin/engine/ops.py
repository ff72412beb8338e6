"""A client's operations issued together and awaited once, as Pulsar clients use ``sendAsync`` and
``acknowledgeAsync`` inside a transaction and wait only at commit.

An operation is a generator: it does its non-blocking part (checks, queueing a record), then yields a function that
waits for what it queued, gets that function's result sent back (or its exception thrown in), and so on until it
returns its result. :func:`gather` runs several of them on the calling thread, round by round: everything the
operations queued in one round is waited for together, so a transaction's sends and acks share durable waits (and,
with batching on, batched entries) instead of waiting one after another. No thread is started per operation.

:func:`drive` runs many long operations (say, each a client's loop of transactions) on one thread: a yielded wait
that can say when it is done (``when_done``, as :class:`completion.Pending` can) parks its operation instead of
blocking the thread, and the operation is resumed when the result is in, so one thread serves hundreds of clients
without a thread hand-off (and a lock wake-up) per durable step. Within an operation, :func:`gather_op` does what
:func:`gather` does, as an operation itself.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import time
from collections import deque
from typing import Any, Callable, Generator

Op = Generator[Callable[[], Any], Any, Any]


def gather(ops: list[Op]) -> list[Any]:
    """Run ``ops`` to the end; each one's result, or the exception it raised, in the order given."""
    rounds = gather_op(ops)  # the same rounds, each wait called here, blocking this thread
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            wait = rounds.throw(error) if error is not None else rounds.send(value)
        except StopIteration as stop:
            return stop.value
        try:
            value, error = wait(), None
        except Exception as exc:  # noqa: BLE001 — thrown into gather_op, which hands it to the operation that waited
            value, error = None, exc


def gather_op(ops: list[Op]) -> Op:
    """:func:`gather` as an operation: the same rounds, but each wait is yielded to whoever runs this one (a
    driver, or :func:`run`). Waiting for the queued writes one after another is waiting for all of them: they are
    all in flight already."""
    results: list[Any] = [None] * len(ops)
    waiting: list[tuple[int, Op, Callable[[], Any]]] = []
    for index, op in enumerate(ops):
        _step(index, op, None, None, waiting, results)
    while waiting:
        current, waiting = waiting, []
        for index, op, wait in current:
            try:
                value, error = (yield wait), None
            except Exception as exc:  # noqa: BLE001 — thrown into the operation, which may handle it or end with it
                value, error = None, exc
            _step(index, op, value, error, waiting, results)
    return results


def run(op: Op) -> Any:
    """One operation, waited for: its result, or its exception raised."""
    result = gather([op])[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _step(index: int, op: Op, value: Any, error: BaseException | None, waiting: list, results: list) -> None:
    try:
        wait = op.throw(error) if error is not None else op.send(value)
    except StopIteration as stop:
        results[index] = stop.value
    except Exception as exc:  # noqa: BLE001 — the operation's outcome, handed to the caller in its place
        results[index] = exc
    else:
        waiting.append((index, op, wait))


class Sleep:
    """Yielded by an operation to pause for ``seconds`` without holding a driver's thread; called, it sleeps."""

    __slots__ = ("until",)

    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + max(0.0, seconds)

    def __call__(self) -> None:
        remaining = self.until - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)


def drive(ops: list[Op], check_every: float = 1.0) -> list[Any]:
    """Run ``ops`` to the end on the calling thread; each one's result, or the exception it raised.

    A yielded wait with ``when_done`` parks its operation until it is done, and then is called (which no longer
    blocks) for the value to send back, or the exception to throw in; a :class:`Sleep` parks it until its time. Any
    other wait is called at once, blocking this thread (a cheap one: a write already durable). A parked wait with a
    positive ``timeout`` attribute that passes gets TimeoutError thrown in, as a blocking wait would raise; its late
    completion is then ignored. Each operation runs on this thread only, one step at a time, so an operation may
    hold a lock across its yields as long as no other operation of this driver waits for that lock.
    """
    results: list[Any] = [None] * len(ops)
    done_queue: queue.SimpleQueue = queue.SimpleQueue()  # (index, token) of each parked wait that completed
    runnable: deque[tuple[int, Any, BaseException | None]] = deque((i, None, None) for i in range(len(ops)))
    parked: dict[int, tuple[int, Any, float]] = {}  # index → (token, wait, deadline or 0)
    timers: list[tuple[float, int, int]] = []  # (until, token, index) of sleeping operations
    tokens = itertools.count(1)
    alive = len(ops)
    next_check = time.monotonic() + check_every
    put = done_queue.put
    while alive:
        while runnable:
            index, value, error = runnable.popleft()
            op = ops[index]
            try:
                wait = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                results[index] = stop.value
                alive -= 1
                continue
            except Exception as exc:  # noqa: BLE001 — the operation's outcome, handed to the caller in its place
                results[index] = exc
                alive -= 1
                continue
            if isinstance(wait, Sleep):
                heapq.heappush(timers, (wait.until, next(tokens), index))
                continue
            when_done = getattr(wait, "when_done", None)
            if when_done is None:
                try:
                    runnable.append((index, wait(), None))
                except Exception as exc:  # noqa: BLE001 — thrown into the operation, as gather does
                    runnable.append((index, None, exc))
                continue
            token = next(tokens)
            timeout = getattr(wait, "timeout", -1)
            parked[index] = (token, wait, time.monotonic() + timeout if timeout > 0 else 0.0)
            when_done(lambda index=index, token=token: put((index, token)))
        if not alive:
            break
        now = time.monotonic()
        block = next_check - now
        if timers:
            block = min(block, timers[0][0] - now)
        try:
            item = done_queue.get(timeout=block) if block > 0 else done_queue.get_nowait()
        except queue.Empty:
            item = None
        while item is not None:
            index, token = item
            entry = parked.get(index)
            if entry is not None and entry[0] == token:  # else: it timed out meanwhile
                del parked[index]
                try:
                    runnable.append((index, entry[1](), None))
                except Exception as exc:  # noqa: BLE001 — thrown into the operation
                    runnable.append((index, None, exc))
            try:
                item = done_queue.get_nowait()
            except queue.Empty:
                item = None
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            runnable.append((heapq.heappop(timers)[2], None, None))
        if now >= next_check:
            next_check = now + check_every
            for index, (_token, wait, deadline) in list(parked.items()):
                if deadline and now >= deadline:
                    del parked[index]
                    what = getattr(wait, "what", "write")
                    runnable.append((index, None, TimeoutError(f"{what} not acknowledged within "
                                                               f"{getattr(wait, 'timeout', 0):g} s")))
    return results
