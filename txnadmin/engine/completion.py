"""One result handed from a callback thread to the one thread waiting for it.

A bare lock, released by the callback: about a third of what a ``threading.Event`` costs to set and wait for,
and a transaction waits for a dozen of them. A waiter that gets the lock hands it straight back, so any number of
threads may wait for the same result (every send of a transaction to one topic waits for its one registration).
"""

from __future__ import annotations

import _thread
from typing import Any


class Completion:
    __slots__ = ("_lock", "value", "error")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self.value: Any = None
        self.error: BaseException | None = None

    def __call__(self, value: Any, error: BaseException | None) -> None:
        """Usable directly as an add callback: ``(result, exception)``; call it once."""
        self.value, self.error = value, error
        self._lock.release()

    def wait(self, timeout: float = -1) -> bool:
        if not self._lock.acquire(timeout=timeout):
            return False
        self._lock.release()  # done for good: the next waiter passes at once
        return True

    def result(self, timeout: float = -1, what: str = "write") -> Any:
        """The value, or raise the callback's exception (TimeoutError if none came within ``timeout`` s)."""
        if not self.wait(timeout):
            raise TimeoutError(f"{what} not acknowledged within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.value
