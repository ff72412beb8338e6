"""Engine behaviours that Pulsar's own tests assert, checked from outside: the CLI, the REST surface and the
files on disk (issue #16). Each test names the Pulsar test it follows."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine

runner = CliRunner()


def _cli(*args):
    result = runner.invoke(app, list(args))
    return result


def _begin(directory) -> tuple[int, int]:
    result = _cli("engine", "txn", "begin", "--dir", str(directory))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    return out["mostSigBits"], out["leastSigBits"]


def test_txn_ids_are_never_handed_out_twice_after_restarts_and_a_trim(tmp_path):
    # MLTransactionMetadataStoreTest / MLTransactionSequenceIdGenerator: the highest local id is written into the
    # managed ledger's properties whenever its ledger list changes, so trimming every ledger loses nothing.
    assert _cli("engine", "init", str(tmp_path), "-c", "1").exit_code == 0
    first = _begin(tmp_path)
    assert _cli("engine", "txn", "commit", "--dir", str(tmp_path), "-m", "0", "-l", str(first[1])).exit_code == 0
    # A broker restart: its sweep trims the ledgers the ended transaction no longer needs (no rollover happened).
    with Engine(tmp_path, EngineConfig.load(tmp_path), maintenance=False) as engine:
        engine.sweep_ledgers()
    second = _begin(tmp_path)
    third = _begin(tmp_path)
    assert first[1] < second[1] < third[1], (first, second, third)
