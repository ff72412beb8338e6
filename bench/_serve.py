"""A `txnadmin serve` child for the benches that time admin calls over HTTP against a real server."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def served(directory: Path, workdir: Path) -> Iterator[tuple[str, str, float]]:
    """Serve the engine in ``directory``; yields (url, token, seconds until it listened). The child is stopped at
    the end, waited for (closing 10,000 stores on a loaded machine takes a while) and killed only if it hangs."""
    from txnadmin.server.run import free_port, wait_until_listening

    port = free_port()
    token = "bench-token"
    token_file = workdir / "token"
    token_file.write_text(token)
    proc = subprocess.Popen([sys.executable, "-m", "txnadmin.cli.main", "serve", "--engine-dir", str(directory),
                             "--port", str(port), "--token-file", str(token_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        opened = wait_until_listening(port, proc)
        yield f"http://127.0.0.1:{port}", token, opened
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
