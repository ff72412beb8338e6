"""Start a real `txnadmin serve` process on an engine directory (for tests that go over HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from txnadmin.server.run import free_port, wait_until_listening


@contextmanager
def serving(engine_dir: Path, home: Path):
    """Yields (url, token); the server is terminated (and removes its server.json) on exit."""
    port = free_port()
    env = dict(os.environ, TXNADMIN_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "txnadmin.cli.main", "serve", "--engine-dir", str(engine_dir),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        wait_until_listening(port, proc, timeout_s=60)
        token = json.loads((Path(engine_dir) / "server.json").read_text())["token"]
        yield f"http://127.0.0.1:{port}", token
    finally:
        proc.terminate()
        proc.wait(timeout=10)
