"""Running the CLI as an operator does: on a pseudo-terminal, everything it writes read back."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from typing import Callable, Optional


class Terminal:
    """``command`` with a pseudo-terminal as stdin, stdout and stderr, and every byte it writes kept in ``out``.

    ``size`` is (rows, columns), set on the terminal itself as a real one would be. A test types on it
    (:meth:`write`), reads it (:meth:`read`) between what it does to the command, and closes it (:meth:`close`)."""

    def __init__(self, command: list[str], env: dict, size: Optional[tuple[int, int]] = None):
        leader, follower = pty.openpty()
        if size is not None:
            import fcntl
            import struct
            import termios

            fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
        self.process = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, env=env)
        os.close(follower)
        self.leader: Optional[int] = leader
        self.out = bytearray()

    def write(self, data: bytes) -> None:
        """Typed ahead: the terminal holds it until the command reads."""
        assert self.leader is not None
        os.write(self.leader, data)

    def read(self, seconds: Optional[float] = None, poll_s: float = 0.2,
             until: Optional[Callable[[], bool]] = None) -> bool:
        """Reads until the command closes the terminal or exits (True), or until ``seconds`` have passed or
        ``until()``, asked before each wait for output, holds (False)."""
        assert self.leader is not None
        deadline = None if seconds is None else time.monotonic() + seconds
        while deadline is None or time.monotonic() < deadline:
            if until is not None and until():
                return False
            ready, _, _ = select.select([self.leader], [], [], poll_s)
            if ready:
                try:
                    chunk = os.read(self.leader, 65536)
                except OSError:  # the child closed the terminal
                    return True
                if not chunk:
                    return True
                self.out += chunk
            elif self.process.poll() is not None:
                return True
        return False

    def close(self) -> None:
        if self.leader is not None:
            os.close(self.leader)
            self.leader = None


def run_on_terminal(command: list[str], env: dict, seconds: Optional[float] = None,
                    size: Optional[tuple[int, int]] = None, wait_s: float = 240) -> tuple[int, bytes]:
    """``command`` on a :class:`Terminal`; (its exit code, every byte it wrote).

    Reads until the command closes the terminal or exits, or until ``seconds`` have passed (then it is waited for)."""
    terminal = Terminal(command, env, size)
    try:
        terminal.read(seconds)
    finally:
        terminal.close()
    return terminal.process.wait(timeout=wait_s), bytes(terminal.out)
