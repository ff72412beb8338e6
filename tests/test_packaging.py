"""What the package promises outside the code: `python -m txnadmin`, PEP 561 typing, one version."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import txnadmin

ROOT = Path(__file__).resolve().parent.parent


def _module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnadmin", *args], capture_output=True, text=True, timeout=120)


def test_python_dash_m_runs_the_cli_on_a_real_engine(tmp_path):
    engine = tmp_path / "engine"
    init = _module("engine", "init", str(engine), "-c", "2")
    assert init.returncode == 0, init.stderr
    listed = _module("-u", f"local:{engine}", "transactions", "coordinators-list")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["0", "1"]


def test_python_dash_m_keeps_the_exit_codes_and_names_itself_in_usage():
    unknown = _module("transactions", "no-such-command")
    assert unknown.returncode == 1  # pulsar-admin's usage code, as through the script
    assert "python -m txnadmin transactions" in unknown.stderr and "Traceback" not in unknown.stderr
    missing = _module("scan", "/nonexistent/dump.log")
    assert missing.returncode == 3 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr


def test_one_version_source():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("txnadmin") == txnadmin.__version__
    assert _module("--version").stdout == f"txnadmin {txnadmin.__version__}\n"


def test_wheel_ships_py_typed_and_main(tmp_path):
    """Build a wheel from a copy of the sources (the checkout stays clean) and look inside."""
    # Offline, so with the venv's own setuptools (grpcio-tools in the test extra brings a current one).
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} is older than pyproject's build requirement (>=77)")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "txnadmin", src / "txnadmin", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("txnadmin-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"txnadmin/py.typed", "txnadmin/__main__.py"} <= names
    assert wheel.name.startswith(f"txnadmin-{txnadmin.__version__}-")
