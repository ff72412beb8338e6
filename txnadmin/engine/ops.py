"""A client's operations issued together and awaited once, as Pulsar clients use ``sendAsync`` and
``acknowledgeAsync`` inside a transaction and wait only at commit.

An operation is a generator: it does its non-blocking part (checks, queueing a record), then yields a function that
waits for what it queued, gets that function's result sent back (or its exception thrown in), and so on until it
returns its result. :func:`gather` runs several of them on the calling thread, round by round: everything the
operations queued in one round is waited for together, so a transaction's sends and acks share durable waits (and,
with batching on, batched entries) instead of waiting one after another. No thread is started per operation.
"""

from __future__ import annotations

from typing import Any, Callable, Generator

Op = Generator[Callable[[], Any], Any, Any]


def gather(ops: list[Op]) -> list[Any]:
    """Run ``ops`` to the end; each one's result, or the exception it raised, in the order given."""
    results: list[Any] = [None] * len(ops)
    waiting: list[tuple[int, Op, Callable[[], Any]]] = []
    for index, op in enumerate(ops):
        _step(index, op, None, None, waiting, results)
    while waiting:
        current, waiting = waiting, []
        for index, op, wait in current:
            try:
                value, error = wait(), None
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
