"""The `spark` marker cannot drift: a test that takes the Spark session without it fails before Spark starts.

Run on a copy of tests/conftest.py in a directory of its own, with tests that break the rule (the fixture named as
an argument, and asked for by name at run time), beside one that keeps clear of Spark.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

BREAKS_THE_RULE = '''
import pytest

def test_takes_spark_unmarked(spark):
    raise AssertionError("reached the test body: Spark was handed over")

@pytest.mark.parametrize("engine", ["python", "spark"])
def test_asks_for_spark_at_run_time_unmarked(engine, request):
    if engine == "spark":
        request.getfixturevalue("spark")

@pytest.mark.slow
def test_keeps_clear_of_spark():
    pass
'''


def test_a_test_taking_the_spark_session_without_the_marker_fails(tmp_path):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    spark: starts Spark\n    slow: slow\n")
    (tmp_path / "test_drift.py").write_text(BREAKS_THE_RULE)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "1 failed, 2 passed, 1 error" in out, out
    assert "ERROR test_drift.py::test_takes_spark_unmarked" in out  # refused at setup
    assert "FAILED test_drift.py::test_asks_for_spark_at_run_time_unmarked[spark]" in out  # refused when asked
    assert "PASSED test_drift.py::test_asks_for_spark_at_run_time_unmarked[python]" in out
    assert out.count("mark it @pytest.mark.spark") >= 2 and "reached the test body" not in out
    assert "pyspark" not in out  # refused before the session fixture ran: Spark never started
