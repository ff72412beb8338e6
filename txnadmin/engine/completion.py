"""One result handed from a callback thread to whoever waits for it.

A bare lock, released by the callback: about a third of what a ``threading.Event`` costs to set and wait for,
and a transaction waits for a dozen of them. A waiter that gets the lock hands it straight back, so any number of
threads may wait for the same result (every send of a transaction to one topic waits for its one registration).

A thread that runs many operations at once (:func:`ops.drive`) does not block on any one of them: it asks to be
told (:meth:`Completion.when_done`) and resumes the operation whose result came. :class:`Pending` is what an
operation yields for that: callable to wait for it (blocking, as before), and a completion to be told about.
"""

from __future__ import annotations

import _thread
from typing import Any, Callable, Optional

# Guards every completion's listeners and done flag: held for a few bytecodes at a time, never while calling out.
# One lock for all (instead of one more per completion) keeps a completion as cheap to make as before.
_GUARD = _thread.allocate_lock()


class Completion:
    __slots__ = ("_lock", "value", "error", "_done", "_listeners")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self.value: Any = None
        self.error: BaseException | None = None
        self._done = False
        self._listeners: Optional[list[Callable[[], None]]] = None

    def __call__(self, value: Any, error: BaseException | None) -> None:
        """Usable directly as an add callback: ``(result, exception)``; call it once."""
        self.value, self.error = value, error
        self._lock.release()
        # Released before the listeners learn of it, so a listener's thread never blocks in result(). Done and the
        # listeners are read under the guard, so a listener added concurrently is either called here or by
        # when_done itself, never both, never neither.
        with _GUARD:
            self._done = True
            listeners, self._listeners = self._listeners, None
        if listeners is not None:
            for listener in listeners:
                listener()

    def when_done(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` once the result is in: at once (on this thread) if it is already, else on the thread
        that delivers it, which must not be kept long (it is the storage's callback thread)."""
        with _GUARD:
            if not self._done:
                if self._listeners is None:
                    self._listeners = [listener]
                else:
                    self._listeners.append(listener)
                return
        listener()

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


class Pending:
    """A write in flight, as an operation yields it: calling it waits for the completion (up to ``timeout`` s) and
    gives ``finish(value)`` (or the value); ``when_done`` tells a multiplexing driver when that call will not block.
    ``finish`` runs on the caller's thread, not the storage's, so it may take locks and write (a snapshot)."""

    __slots__ = ("completion", "finish", "timeout", "what")

    def __init__(self, completion: Completion, finish: Optional[Callable[[Any], Any]] = None,
                 timeout: float = 30, what: str = "write") -> None:
        self.completion = completion
        self.finish = finish
        self.timeout = timeout
        self.what = what

    def when_done(self, listener: Callable[[], None]) -> None:
        self.completion.when_done(listener)

    def __call__(self) -> Any:
        value = self.completion.result(self.timeout, self.what)
        return value if self.finish is None else self.finish(value)
