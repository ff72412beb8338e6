"""Shared fixtures: one SparkSession for the whole test session (Spark costs seconds to start).

Tests that start Spark are marked `spark`, and the slowest ones `slow` (pyproject.toml), so `make test-fast`
(`-m "not spark and not slow"`) can leave them out. The `spark` fixture refuses a test without the marker: a test
that starts Spark unmarked would slip into the fast run and make it slow again.
"""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# Compiled modules cached outside the source tree when the environment forbids writing them (PYTHONDONTWRITEBYTECODE):
# otherwise every CLI subprocess compiles txnadmin again (~0.2 s each) and every worker re-rewrites every test module's
# asserts (~10 s each). The prefix keeps __pycache__ out of the worktree, which is what that setting is for.
if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    _prefix = os.path.join(tempfile.gettempdir(), f"txnadmin-pycache-{os.getuid()}")
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = _prefix
    sys.dont_write_bytecode = False
    sys.pycache_prefix = _prefix

# tmp_path on a memory file system where there is one: the engine fsyncs every commit and log append as it must, and
# on the disk those waits were a third of an engine test's time. What a test can observe is unchanged (no test can
# see a power cut); a given PYTEST_DEBUG_TEMPROOT (pytest's own setting) or --basetemp still decides.
def _roomy_memory_fs(path: str = "/dev/shm", needed: int = 4 << 30) -> bool:
    """A writable memory file system with room for a suite's temp files (a container's /dev/shm may be 64 MB)."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK) and stat.f_bavail * stat.f_frsize >= needed


if _roomy_memory_fs():
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", "/dev/shm")


def _build_txnadmin_commands_once() -> None:
    """Typer's CliRunner rebuilds the whole click command tree from the Typer app on every invoke (about 80 ms for
    txnadmin's, most of an in-process test's time). txnadmin's apps are complete once imported and never change
    afterwards, so each is built once per test process; any other Typer (a test's own probe app) is built as before."""
    import typer.testing

    build = getattr(typer.testing, "_get_command", None)
    if build is None:  # a typer without this (private) step: every invoke builds its tree, as typer does
        return
    built: dict[int, tuple[object, object]] = {}

    def get_command(app):
        if not _is_txnadmin_app(app):
            return build(app)
        key = id(app)
        if key not in built:
            built[key] = (app, build(app))  # the app is kept alive with its command, so its id is never reused
        return built[key][1]

    typer.testing._get_command = get_command


def _is_txnadmin_app(app) -> bool:
    """One of the Typer apps a txnadmin.cli module defines at import (the root `app` or a group's)."""
    return any(getattr(module, "app", None) is app for name, module in list(sys.modules.items())
               if name.startswith("txnadmin.cli"))


_build_txnadmin_commands_once()


@pytest.fixture(scope="session")
def spark_session():
    from txnadmin.scan.spark import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture
def spark(request):
    """The session's SparkSession, for tests marked `spark` only (checked before Spark starts)."""
    if request.node.get_closest_marker("spark") is None:
        pytest.fail(f"{request.node.nodeid} uses the spark fixture: mark it @pytest.mark.spark (or "
                    "pytest.param(..., marks=pytest.mark.spark)) so `-m 'not spark'` leaves it out", pytrace=False)
    return request.getfixturevalue("spark_session")


def pytest_collection_modifyitems(config, items):
    """Under xdist's `--dist loadgroup` (`make test`): every Spark test goes to one worker, so the run keeps one
    SparkSession, and every other file stays whole on one worker, because some files order their tests."""
    for item in items:
        group = "spark" if item.get_closest_marker("spark") else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
