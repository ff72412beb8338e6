"""`downgrade wait` about its own end (issue #34, point 7): a timeout says it was the timeout, with the time waited;
Ctrl-C's resume line is the command as given; on a terminal, Ctrl-C leaves the last frame on the screen."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest
from engine_helpers import stuck_open_downgrade

pytestmark = pytest.mark.slow  # a running engine and seconds of waiting

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    """A running engine whose stuck-open transactions keep the wait waiting, with `start` recorded."""
    tmp = tmp_path_factory.mktemp("wait-end")
    d, state = tmp / "e", str(tmp / "checklist.json")
    with stuck_open_downgrade(d, state):
        yield d, state


def test_a_timeout_says_it_was_the_timeout_and_how_long_it_waited(pinned):
    d, state = pinned
    done = subprocess.run(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state, "--timeout", "3",
                                      "--interval", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    (line,) = [l for l in done.stderr.splitlines() if l.startswith("timed out:")]
    assert re.search(r"--timeout 3 s reached after \d+\.\d s", line), line
    assert f"`txnadmin -u local:{d} downgrade wait --state {state} --timeout 3 --interval 1`" in line, line


def test_ctrl_c_on_a_terminal_leaves_the_last_frame_and_resumes_as_given(pinned):
    d, state = pinned
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    proc = subprocess.Popen(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state, "--timeout", "90",
                                        "--interval", "0.5"], stdin=follower, stdout=follower, stderr=follower,
                            env=env)
    os.close(follower)
    out = bytearray()

    def read(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                out.extend(chunk)
            elif proc.poll() is not None:
                return

    try:
        for _ in range(300):
            read(0.2)
            if b"logs done" in out:
                break
        assert b"logs done" in out, out.decode(errors="replace")
        proc.send_signal(signal.SIGINT)
        read(30)
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
    assert proc.wait(timeout=60) == 130
    shown = out.decode(errors="replace")
    # after the live panel cleared itself (its last erase), the last frame is printed again, then the resume line
    tail = shown[shown.rindex("\x1b[2K"):] if "\x1b[2K" in shown else shown
    assert re.search(r"\[\d+:\d\d:\d\d\] \d+/\d+ logs done", tail), repr(tail)
    assert tail.index("logs done") < tail.index("interrupted")
    flat = " ".join(tail.split())  # the terminal may wrap the resume line
    assert f"downgrade wait --state {state} --timeout 90 --interval 0.5" in flat, flat
