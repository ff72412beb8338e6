"""Wire codec for Pulsar's transaction-log and pending-ack entries (plain and PIP-160 batched)."""

from .entry import (
    BATCH_MAGIC,
    BATCH_PREFIX,
    BATCH_VERSION,
    PREFIX_LENGTH,
    BatchedPendingAckMetadataEntry,
    BatchedTransactionMetadataEntry,
    DecodedEntry,
    EntryDecodeError,
    EntryForm,
    EntryKind,
    PendingAckMetadata,
    PendingAckMetadataEntry,
    TransactionMetadataEntry,
    decode_entry,
    encode_batched,
    encode_batched_serialized,
    encode_plain,
    has_batch_prefix,
    record_to_json,
)
from .pb import pending_ack_pb2, pulsar_api_pb2, transaction_metadata_pb2

TxnStatus = transaction_metadata_pb2.TxnStatus
TxnOp = TransactionMetadataEntry.TransactionMetadataOp
PendingAckOp = pending_ack_pb2.PendingAckOp
AckType = pulsar_api_pb2.CommandAck.AckType
Subscription = pulsar_api_pb2.Subscription

__all__ = [
    "BATCH_MAGIC", "BATCH_PREFIX", "BATCH_VERSION", "PREFIX_LENGTH",
    "AckType", "BatchedPendingAckMetadataEntry", "BatchedTransactionMetadataEntry", "DecodedEntry",
    "EntryDecodeError", "EntryForm", "EntryKind", "PendingAckMetadata", "PendingAckMetadataEntry",
    "PendingAckOp", "Subscription", "TransactionMetadataEntry", "TxnOp", "TxnStatus",
    "decode_entry", "encode_batched", "encode_batched_serialized", "encode_plain",
    "has_batch_prefix", "record_to_json",
]
