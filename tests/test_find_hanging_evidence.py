"""find-hanging calls a partition gone only when the broker says its namespace is gone (404).

A namespace listing that fails for any other reason (a 500, a refused token) is no evidence that the partitions
are gone: reporting their transactions as hanging, and with --abort aborting them, would act on a guess.
Driven through the CLI against a stand-in broker on a real socket.
"""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from test_http_faults import Misbehaving
from txnadmin.cli.main import app

runner = CliRunner()
TOPIC = "persistent://public/default/t1"
LISTING = "/admin/v2/namespaces/public/default/topics"


def _broker(listing):
    """One young open transaction that produced to TOPIC; the namespace listing answers ``listing``."""
    now = int(time.time() * 1000)
    txn = {"(0,1)": {"txnId": "(0,1)", "status": "OPEN", "openTimestamp": now - 1_000, "timeoutAt": 60_000,
                     "producedPartitions": {TOPIC: {"startPosition": "3:0", "aborted": False}},
                     "ackedPartitions": {}}}

    def behave(path, headers):
        if path.startswith("/admin/v3/transactions/slowTransactions/"):
            return 200, json.dumps(txn), {}
        if path.startswith(LISTING):
            return listing
        return 404, json.dumps({"reason": "not served by this stand-in"}), {}

    return Misbehaving(behave)


@pytest.mark.parametrize("status", [500, 403])
def test_a_failed_namespace_listing_is_no_evidence_that_partitions_are_gone(status):
    srv = _broker((status, json.dumps({"reason": "listing failed"}), {}))
    try:
        result = runner.invoke(app, ["-u", srv.url, "transactions", "find-hanging", "--abort", "--yes", "-o", "json"])
        assert result.exit_code == 1
        assert "listing failed" in result.stderr
        assert "no longer exist" not in result.output
        assert not any("/abort" in path for path, _ in srv.hits)  # nothing was aborted on a guess
    finally:
        srv.close()


def test_a_namespace_the_broker_says_is_gone_makes_its_transactions_hang():
    srv = _broker((404, json.dumps({"reason": "Namespace does not exist"}), {}))
    try:
        result = runner.invoke(app, ["-u", srv.url, "transactions", "find-hanging", "-o", "json"])
        assert result.exit_code == 1, result.output
        rows = json.loads(result.stdout)
        assert [r["txnId"] for r in rows] == ["(0,1)"]
        assert rows[0]["reasons"] == [f"partitions no longer exist: {TOPIC}"]
    finally:
        srv.close()


def test_a_listed_partition_is_not_gone():
    srv = _broker((200, json.dumps([TOPIC]), {}))
    try:
        result = runner.invoke(app, ["-u", srv.url, "transactions", "find-hanging", "-o", "json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == []
    finally:
        srv.close()
