"""Running the CLI as an operator does: on a pseudo-terminal, everything it writes read back."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from typing import Optional


def run_on_terminal(command: list[str], env: dict, seconds: Optional[float] = None,
                    size: Optional[tuple[int, int]] = None, wait_s: float = 240) -> tuple[int, bytes]:
    """``command`` with a pseudo-terminal as stdin, stdout and stderr; (its exit code, every byte it wrote).

    Reads until the command closes the terminal or exits, or until ``seconds`` have passed (then it is waited for).
    ``size`` is (rows, columns), set on the terminal itself as a real one would be."""
    leader, follower = pty.openpty()
    if size is not None:
        import fcntl
        import struct
        import termios

        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    process = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    out = bytearray()
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while deadline is None or time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif process.poll() is not None:
                break
    finally:
        os.close(leader)
    return process.wait(timeout=wait_s), bytes(out)
