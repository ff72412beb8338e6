"""Shared fixtures: one SparkSession for the whole test session (Spark costs seconds to start)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def spark():
    from txnadmin.scan.spark import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()
