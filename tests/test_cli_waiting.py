"""On a real terminal (a pty), a call that hangs shows a spinner after a second naming the call and the target — in
`transactions` and in the commands whose first calls have no progress display of their own (upgrade, downgrade
start's plan). Piped, nothing extra is printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_http_faults import Misbehaving
from pty_helpers import run_on_terminal

pytestmark = pytest.mark.slow  # each case waits on a hung server for seconds on purpose

BIN = Path(sys.executable).parent / "txnadmin"


def _run(args: list[str], terminal: bool) -> tuple[int, str]:
    server = Misbehaving(lambda path, headers: "hang")  # holds every request 3 s, then closes without answering
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    try:
        command = [str(BIN), "-u", server.url, "--request-timeout", "2.5", *args]
        if not terminal:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env,
                                  stdin=subprocess.DEVNULL)
            return done.returncode, done.stdout + done.stderr
        code, out = run_on_terminal(command, env, wait_s=30)
        return code, out.decode("utf-8", "replace")
    finally:
        server.close()


COMMANDS = {
    "transactions coordinators-list": (["transactions", "coordinators-list"], "GET /admin/v3/transactions/coordinators"),
    "upgrade": (["upgrade", "--dry-run"], "GET /admin/v2/"),
    "downgrade start": (["downgrade", "start", "--dry-run", "--state", "{state}"], "GET /admin/v"),
}


@pytest.mark.skipif(not BIN.exists(), reason="the txnadmin script is not installed")
@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_hung_call_shows_which_call_waits_on_a_terminal_and_nothing_when_piped(name, tmp_path):
    args, call = COMMANDS[name]
    args = [a.format(state=tmp_path / "state.json") for a in args]
    code, shown = _run(args, terminal=True)
    assert code in (1, 3) and "Traceback" not in shown
    assert "waiting for " + call in shown and "(Ctrl-C to give up)" in shown, shown[-1500:]
    assert "no answer within --request-timeout 2.5 s" in shown  # and it still ends with the one-line error
    code, piped = _run(args, terminal=False)
    assert code in (1, 3) and "waiting for" not in piped and "\x1b[" not in piped
