"""What the bulk-abort tests share (imported, never collected): an engine with two coordinators built once per module
as a template, opened without maintenance while a test module sets its transactions up, and a copy per test."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Callable, Iterator, Optional

T = "persistent://public/default/"


def two_coordinators(d: Path) -> Path:
    """``d``, a new engine directory with two transaction coordinators."""
    from txnadmin.engine.manage import init_engine

    init_engine(d, {"transactionCoordinatorCount": "2"})
    return d


@contextlib.contextmanager
def opened(d: Path, clock_ms: Optional[Callable[[], int]] = None) -> Iterator:
    """The engine in ``d`` without maintenance (nothing ends unless the test ends it), closed on the way out;
    ``clock_ms``: another clock than the wall's (transactions opened in the past)."""
    from txnadmin.engine.engine import Engine

    engine = Engine(d, maintenance=False) if clock_ms is None else Engine(d, maintenance=False, clock_ms=clock_ms)
    try:
        yield engine
    finally:
        engine.close()


def own_copy(template: Path, tmp_path: Path, monkeypatch) -> Path:
    """A test's own copy of its module's template, with a home of its own and no target taken from the
    environment."""
    d = tmp_path / "e"
    shutil.copytree(template, d)
    monkeypatch.setenv("TXNADMIN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TXNADMIN_ADMIN_URL", raising=False)
    monkeypatch.delenv("PULSAR_CLIENT_CONF", raising=False)
    return d
