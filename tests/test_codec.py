"""The entry codec: Pulsar's own bytes, both forms, both logs, and hostile input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txnadmin.codec import (
    BATCH_PREFIX,
    AckType,
    EntryDecodeError,
    EntryForm,
    EntryKind,
    PendingAckMetadata,
    PendingAckMetadataEntry,
    PendingAckOp,
    Subscription,
    TransactionMetadataEntry,
    TxnOp,
    TxnStatus,
    decode_entry,
    encode_batched,
    encode_batched_serialized,
    encode_plain,
)

# The reference's example: a batch holding one NEW record of txn (1,42), as Pulsar's writer produces it.
PULSAR_BATCH_OF_ONE = bytes.fromhex(
    "0e0100010a210800102a180140e0a7124880d095ffbc315080d095ffbc31582a620561646d696e"
)

u64 = st.integers(min_value=0, max_value=2**64 - 1)
names = st.text(min_size=1, max_size=20)


@st.composite
def txn_records(draw) -> TransactionMetadataEntry:
    op = draw(st.sampled_from([TxnOp.NEW, TxnOp.ADD_PARTITION, TxnOp.ADD_SUBSCRIPTION, TxnOp.UPDATE]))
    rec = TransactionMetadataEntry(
        metadata_op=op,
        txnid_least_bits=draw(u64),
        txnid_most_bits=draw(u64),
        last_modification_time=draw(u64),
        max_local_txn_id=draw(u64),
    )
    if op == TxnOp.NEW:
        rec.timeout_ms = draw(u64)
        rec.start_time = draw(u64)
        if draw(st.booleans()):
            rec.owner = draw(names)
    elif op == TxnOp.ADD_PARTITION:
        rec.partitions.extend(draw(st.lists(names, min_size=1, max_size=4)))
    elif op == TxnOp.ADD_SUBSCRIPTION:
        for topic, sub in draw(st.lists(st.tuples(names, names), min_size=1, max_size=3)):
            rec.subscriptions.append(Subscription(topic=topic, subscription=sub))
    else:
        rec.expected_status = draw(st.sampled_from(list(TxnStatus.values())))
        rec.new_status = draw(st.sampled_from(list(TxnStatus.values())))
    return rec


@st.composite
def ack_records(draw) -> PendingAckMetadataEntry:
    op = draw(st.sampled_from([PendingAckOp.ACK, PendingAckOp.COMMIT, PendingAckOp.ABORT]))
    rec = PendingAckMetadataEntry(
        pending_ack_op=op,
        ack_type=draw(st.sampled_from([AckType.Individual, AckType.Cumulative])),
        txnid_least_bits=draw(u64),
        txnid_most_bits=draw(u64),
    )
    if op == PendingAckOp.ACK:
        for _ in range(draw(st.integers(1, 3))):
            meta = PendingAckMetadata(ledgerId=draw(u64), entryId=draw(u64))
            meta.ack_set.extend(draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)))
            if draw(st.booleans()):
                meta.batch_size = draw(st.integers(1, 2**31 - 1))
            rec.pending_ack_metadata.append(meta)
    return rec


def test_pulsars_batch_of_one_decodes_exactly():
    decoded = decode_entry(PULSAR_BATCH_OF_ONE)
    assert decoded.form is EntryForm.BATCHED
    assert decoded.version == 1
    assert decoded.kind is EntryKind.TXN_LOG
    assert decoded.to_json()["records"] == [
        {
            "metadataOp": "NEW",
            "txnidLeastBits": "42",
            "txnidMostBits": "1",
            "timeoutMs": "300000",
            "startTime": "1700000000000",
            "lastModificationTime": "1700000000000",
            "maxLocalTxnId": "42",
            "owner": "admin",
        }
    ]


def test_plain_form_is_the_bytes_after_the_batch_framing():
    plain = PULSAR_BATCH_OF_ONE[6:]  # prefix (4) + field tag (1) + length (1)
    decoded = decode_entry(plain)
    assert decoded.form is EntryForm.PLAIN and decoded.version is None
    assert decoded.records == decode_entry(PULSAR_BATCH_OF_ONE).records


def test_our_encoding_of_the_example_is_byte_identical_to_pulsars():
    rec = TransactionMetadataEntry(
        metadata_op=TxnOp.NEW, txnid_least_bits=42, txnid_most_bits=1, timeout_ms=300000,
        start_time=1700000000000, last_modification_time=1700000000000, max_local_txn_id=42, owner="admin",
    )
    assert encode_batched([rec]) == PULSAR_BATCH_OF_ONE
    assert encode_batched_serialized([rec.SerializeToString()]) == PULSAR_BATCH_OF_ONE
    assert encode_plain(rec) == PULSAR_BATCH_OF_ONE[6:]


def test_pending_ack_entries_are_recognised_in_both_forms():
    ack = PendingAckMetadataEntry(
        pending_ack_op=PendingAckOp.ACK, ack_type=AckType.Individual, txnid_least_bits=7, txnid_most_bits=3,
        pending_ack_metadata=[PendingAckMetadata(ledgerId=12, entryId=5, ack_set=[-3], batch_size=2)],
    )
    commit = PendingAckMetadataEntry(
        pending_ack_op=PendingAckOp.COMMIT, ack_type=AckType.Individual, txnid_least_bits=7, txnid_most_bits=3
    )
    batched = decode_entry(encode_batched([ack, commit]))
    assert (batched.form, batched.kind) == (EntryForm.BATCHED, EntryKind.PENDING_ACK)
    assert [r.pending_ack_op for r in batched.records] == [PendingAckOp.ACK, PendingAckOp.COMMIT]
    assert batched.to_json()["records"][0]["pendingAckMetadata"][0] == {
        "ledgerId": "12", "entryId": "5", "ackSet": ["-3"], "batchSize": 2,
    }
    plain = decode_entry(encode_plain(commit))
    assert (plain.form, plain.kind) == (EntryForm.PLAIN, EntryKind.PENDING_ACK)


@settings(max_examples=150, deadline=None)
@given(st.lists(txn_records(), min_size=1, max_size=8))
def test_txn_log_records_round_trip_in_both_forms(records):
    batched = decode_entry(encode_batched(records))
    assert (batched.form, batched.kind, batched.records) == (EntryForm.BATCHED, EntryKind.TXN_LOG, records)
    for rec in records:
        plain = decode_entry(encode_plain(rec))
        assert (plain.form, plain.kind, plain.records) == (EntryForm.PLAIN, EntryKind.TXN_LOG, [rec])


@settings(max_examples=150, deadline=None)
@given(st.lists(ack_records(), min_size=1, max_size=8))
def test_pending_ack_records_round_trip_in_both_forms(records):
    batched = decode_entry(encode_batched(records))
    assert (batched.form, batched.kind, batched.records) == (EntryForm.BATCHED, EntryKind.PENDING_ACK, records)
    for rec in records:
        plain = decode_entry(encode_plain(rec), kind="pending-ack")
        assert plain.records == [rec]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(["auto", "txn-log", "pending-ack"]))
def test_random_bytes_never_crash_the_decoder(data, kind):
    try:
        decode_entry(data, kind)
    except EntryDecodeError as exc:
        assert exc.reason and exc.offset >= 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_random_bodies_behind_the_prefix_never_crash(body):
    try:
        decode_entry(BATCH_PREFIX + body)
    except EntryDecodeError as exc:
        assert exc.offset == 4


@pytest.mark.parametrize(
    "data, reason, offset",
    [
        (b"", "empty entry", 0),
        (b"\x0e\x01", "truncated batch prefix", 2),
        (b"\x0e\x01\x00", "truncated batch prefix", 3),
        (b"\x0e\x01\x00\x02\x0a\x00", "unknown batch version 2", 2),
        (BATCH_PREFIX, "batch holds no records", 4),
        (BATCH_PREFIX + b"\x0a\x05\x08", "not a valid batched message", 4),
        (b"\xff\xff\xff", "not a valid record", 0),
    ],
)
def test_malformed_entries_raise_one_typed_error(data, reason, offset):
    with pytest.raises(EntryDecodeError) as info:
        decode_entry(data)
    assert reason in str(info.value)
    assert info.value.offset == offset


def test_forced_kind_rejects_the_other_log():
    ack = PendingAckMetadataEntry(
        pending_ack_op=PendingAckOp.ACK,
        pending_ack_metadata=[PendingAckMetadata(ledgerId=1, entryId=1)],
    )
    with pytest.raises(EntryDecodeError) as info:
        decode_entry(encode_batched([ack]), kind="txn-log")
    assert "txn-log" in str(info.value)


def test_unknown_kind_is_a_typed_error():
    with pytest.raises(EntryDecodeError):
        decode_entry(b"\x08\x01", kind="messages")
