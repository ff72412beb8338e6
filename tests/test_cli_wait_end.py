"""`downgrade wait` about its own end (issue #34, point 7): a timeout says it was the timeout, with the time waited;
Ctrl-C's resume line is the command as given; on a terminal, Ctrl-C leaves the last frame on the screen."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from engine_helpers import stuck_open_downgrade
from pty_helpers import Terminal

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
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    terminal = Terminal(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state, "--timeout", "90",
                                    "--interval", "0.5"], env)
    proc, out = terminal.process, terminal.out
    try:
        terminal.read(60, 0.1, until=lambda: b"logs done" in out)
        assert b"logs done" in out, out.decode(errors="replace")
        proc.send_signal(signal.SIGINT)
        terminal.read(30, 0.1)
    finally:
        terminal.close()
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
