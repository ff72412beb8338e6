"""`txnadmin inspect entry` as an operator uses it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.codec import (
    PendingAckMetadata,
    PendingAckMetadataEntry,
    PendingAckOp,
    TransactionMetadataEntry,
    TxnOp,
    TxnStatus,
    encode_batched,
    encode_plain,
)

runner = CliRunner()
PULSAR_HEX = "0e0100010a210800102a180140e0a7124880d095ffbc315080d095ffbc31582a620561646d696e"


def invoke(*args):
    return runner.invoke(app, ["inspect", "entry", *args])


def test_hex_of_pulsars_batched_entry():
    result = invoke("--hex", PULSAR_HEX)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["form"] == "batched" and out["version"] == 1 and out["kind"] == "txn-log"
    assert out["records"][0]["metadataOp"] == "NEW"
    assert out["records"][0]["txnidMostBits"] == "1" and out["records"][0]["owner"] == "admin"


def test_hex_dump_style_input_with_spaces():
    spaced = " ".join(PULSAR_HEX[i : i + 2].upper() for i in range(0, len(PULSAR_HEX), 2))
    assert json.loads(invoke("--hex", spaced).stdout)["form"] == "batched"


def test_pending_ack_batch_via_base64_and_forced_kind():
    recs = [
        PendingAckMetadataEntry(pending_ack_op=PendingAckOp.ACK, txnid_least_bits=i, txnid_most_bits=2,
                                pending_ack_metadata=[PendingAckMetadata(ledgerId=9, entryId=i)])
        for i in range(3)
    ]
    b64 = base64.b64encode(encode_batched(recs)).decode()
    result = invoke("--base64", b64, "--kind", "pending-ack")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["kind"] == "pending-ack" and len(out["records"]) == 3
    assert [r["txnidLeastBits"] for r in out["records"]] == ["0", "1", "2"]


def test_plain_update_record_from_a_binary_file(tmp_path):
    rec = TransactionMetadataEntry(metadata_op=TxnOp.UPDATE, txnid_least_bits=5, txnid_most_bits=0,
                                   expected_status=TxnStatus.COMMITTING, new_status=TxnStatus.COMMITTED,
                                   last_modification_time=1, max_local_txn_id=5)
    path = tmp_path / "entry.bin"
    path.write_bytes(encode_plain(rec))
    out = json.loads(invoke(str(path)).stdout)
    assert out == {"form": "plain", "version": None, "kind": "txn-log", "records": [{
        "metadataOp": "UPDATE", "txnidLeastBits": "5", "txnidMostBits": "0", "expectedStatus": "COMMITTING", "newStatus": "COMMITTED",
        "lastModificationTime": "1", "maxLocalTxnId": "5"}]}


def test_malformed_entry_exits_1_with_one_line():
    result = invoke("--hex", "0e010002aa")
    assert result.exit_code == 1
    assert "unknown batch version 2" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_usage_errors_exit_2():
    assert invoke().exit_code == 2
    assert invoke("--hex", "zz").exit_code == 2
    assert invoke("--hex", "08", "--kind", "nope").exit_code == 2


def test_missing_file_exits_3(tmp_path):
    result = invoke(str(tmp_path / "absent.bin"))
    assert result.exit_code == 3 and "cannot read" in result.stderr


def test_version_and_help():
    assert "txnadmin 0.1.0" in runner.invoke(app, ["--version"]).stdout
    assert "inspect" in runner.invoke(app, ["--help"]).stdout


def test_cli_import_does_not_import_pyspark():
    code = "import sys, txnadmin.cli.main; sys.exit(1 if any(m.startswith('pyspark') for m in sys.modules) else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_console_script_runs():
    exe = __import__("shutil").which("txnadmin") or str(__import__("pathlib").Path(sys.executable).parent / "txnadmin")
    out = subprocess.run([exe, "inspect", "entry", "--hex", PULSAR_HEX], capture_output=True, text=True)
    assert out.returncode == 0 and json.loads(out.stdout)["kind"] == "txn-log"
