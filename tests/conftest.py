"""Shared fixtures: one SparkSession for the whole test session (Spark costs seconds to start).

Tests that start Spark are marked `spark`, and the slowest ones `slow` (pyproject.toml), so `make test-fast`
(`-m "not spark and not slow"`) can leave them out. The `spark` fixture refuses a test without the marker: a test
that starts Spark unmarked would slip into the fast run and make it slow again.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


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
