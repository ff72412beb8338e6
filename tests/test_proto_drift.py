"""The committed generated code must be exactly what proto/generate.py makes from proto/*.proto."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_generator():
    spec = importlib.util.spec_from_file_location("proto_generate", ROOT / "proto" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_matches_the_proto_files(tmp_path):
    written = _load_generator().generate(tmp_path)
    committed_dir = ROOT / "txnadmin" / "codec" / "pb"
    assert {p.name for p in written} == {p.name for p in committed_dir.glob("*_pb2.py*")}
    for fresh in written:
        committed = committed_dir / fresh.name
        assert committed.read_text() == fresh.read_text(), (
            f"{committed} is stale: run `make proto` after editing proto/"
        )


def test_field_numbers_match_pulsar():
    from txnadmin.codec import PendingAckMetadata, PendingAckMetadataEntry, TransactionMetadataEntry

    txn = {f.name: f.number for f in TransactionMetadataEntry.DESCRIPTOR.fields}
    assert txn == {
        "metadata_op": 1, "txnid_least_bits": 2, "txnid_most_bits": 3, "expected_status": 4, "new_status": 5,
        "partitions": 6, "subscriptions": 7, "timeout_ms": 8, "start_time": 9, "last_modification_time": 10,
        "max_local_txn_id": 11, "owner": 12,
    }
    ack = {f.name: f.number for f in PendingAckMetadataEntry.DESCRIPTOR.fields}
    assert ack == {
        "pending_ack_op": 1, "ack_type": 2, "txnid_least_bits": 3, "txnid_most_bits": 4, "pending_ack_metadata": 5,
    }
    meta = {f.name: f.number for f in PendingAckMetadata.DESCRIPTOR.fields}
    assert meta == {"ledgerId": 1, "entryId": 2, "ack_set": 3, "batch_size": 4}
