"""docs/cli-reference.md is generated from the commands' help; stale docs fail here."""

from __future__ import annotations

from pathlib import Path

import pytest

from txnadmin.cli.docgen import commands, render

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_cli_reference_is_current():
    committed = (ROOT / "docs" / "cli-reference.md").read_text()
    assert committed == render(), "docs/cli-reference.md is stale: run `make docs`"


def test_every_command_is_documented():
    text = (ROOT / "docs" / "cli-reference.md").read_text()
    for command in commands():
        assert f"## `{command}`" in text
    for name in ("coordinator-internal-stats", "pending-ack-internal-stats", "buffer-snapshot-internal-stats",
                 "coordinator-stats", "transaction-buffer-stats", "pending-ack-stats", "transaction-in-buffer-stats",
                 "transaction-in-pending-ack-stats", "transaction-metadata", "slow-transactions",
                 "scale-transactionCoordinators", "position-stats-in-pending-ack", "coordinators-list",
                 "abort-transaction"):
        assert f"## `txnadmin transactions {name}`" in text


def test_docs_exist_for_exit_codes_and_runbooks():
    for name in ("exit-codes.md", "downgrade.md", "scan.md", "engine.md", "benchmarks.md", "transactions.md"):
        assert (ROOT / "docs" / name).exists(), name
