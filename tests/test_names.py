"""Pulsar's names, spelled once (txnadmin.names), checked against what Pulsar itself produces."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from txnadmin.names import (
    PENDING_ACK_SUFFIX, coordinator_assign_partition, coordinator_of_assign_partition, decode_subscription,
    encode_subscription, is_pending_ack_store, is_transaction_ledger, managed_ledger_name, namespace_of,
    normalize_topic, pending_ack_readings, pending_ack_topic, preserver_log_name, transaction_log_name,
    transaction_log_topic,
)


def test_short_topic_names_are_completed_as_pulsar_admin_does():
    assert normalize_topic("x") == "persistent://public/default/x"
    assert normalize_topic("t/ns/x") == "persistent://t/ns/x"
    assert normalize_topic("non-persistent://t/ns/x") == "non-persistent://t/ns/x"
    with pytest.raises(ValueError, match="Invalid short topic name 't/x'"):
        normalize_topic("t/x")


def test_managed_ledger_names_encode_the_local_name():
    assert managed_ledger_name("persistent://t/ns/a b/c") == "t/ns/persistent/a%20b%2Fc"
    assert namespace_of("persistent://t/ns/x") == "t/ns"
    with pytest.raises(ValueError, match="'t/ns/x' is not a full topic name"):
        namespace_of("t/ns/x")


def test_coordinator_names_match_pulsars_system_topics():
    assert transaction_log_topic(3) == "persistent://pulsar/system/__transaction_log_3"
    assert transaction_log_name(3) == "pulsar/system/persistent/__transaction_log_3"
    assert preserver_log_name(3) == "pulsar/system/persistent/__terminated_txn_state_3"
    assert coordinator_assign_partition(3) == "persistent://pulsar/system/transaction_coordinator_assign-partition-3"
    assert coordinator_of_assign_partition(coordinator_assign_partition(12)) == 12
    assert coordinator_of_assign_partition("persistent://pulsar/system/__transaction_log_3") is None


def test_pending_ack_names_in_both_schemes():
    # 4.x appends the subscription as it is; 5.0 (PR #25727) URL-encodes it like Java's URLEncoder.
    assert pending_ack_topic("persistent://t/ns/x", "sub") == f"persistent://t/ns/x-sub{PENDING_ACK_SUFFIX}"
    assert pending_ack_topic("persistent://t/ns/x", "sub", encoded=True) == pending_ack_topic("persistent://t/ns/x", "sub")
    assert (pending_ack_topic("persistent://t/ns/x", "public/fns/my fn", encoded=True)
            == f"persistent://t/ns/x-public%2Ffns%2Fmy+fn{PENDING_ACK_SUFFIX}")
    # URLEncoder keeps only letters, digits and .-*_ : '~' is encoded, '*' is not
    assert encode_subscription("a~b*c.d-e_f") == "a%7Eb*c.d-e_f"
    assert encode_subscription("é") == "%C3%A9"
    assert decode_subscription("public%2Ffns%2Fmy+fn") == "public/fns/my fn"


def test_a_store_name_is_read_every_way_it_can_be_meant():
    topics = {"persistent://t/ns/a", "persistent://t/ns/a-b"}
    store = f"persistent://t/ns/a-b-c{PENDING_ACK_SUFFIX}"
    assert pending_ack_readings(store, topics) == [("persistent://t/ns/a-b", "c"), ("persistent://t/ns/a", "b-c")]
    encoded = pending_ack_topic("persistent://t/ns/a", "x/y", encoded=True)
    assert pending_ack_readings(encoded, topics) == [("persistent://t/ns/a", "x%2Fy"), ("persistent://t/ns/a", "x/y")]
    assert pending_ack_readings(store, {"persistent://t/ns/other"}) == []


SUBSCRIPTIONS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)  # valid UTF-16 only


@given(SUBSCRIPTIONS)
def test_encoding_round_trips(subscription):
    assert decode_subscription(encode_subscription(subscription)) == subscription
    assert set(encode_subscription(subscription)) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-*_+%")


@given(st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,12}", fullmatch=True), SUBSCRIPTIONS, st.booleans())
def test_every_store_name_reads_back_to_its_subscription(local, subscription, encoded):
    topic = f"persistent://t/ns/{local}"
    store = pending_ack_topic(topic, subscription, encoded=encoded)
    assert is_pending_ack_store(store)
    assert (topic, subscription) in pending_ack_readings(store, {topic})


def test_one_rule_for_transaction_ledgers():
    """The engine's census and the scan used to disagree on a user topic named like a transaction log."""
    assert is_transaction_ledger("pulsar/system/persistent/__transaction_log_0")
    assert is_transaction_ledger(managed_ledger_name(pending_ack_topic("persistent://t/ns/x", "s")))
    assert is_transaction_ledger(managed_ledger_name(pending_ack_topic("persistent://t/ns/x", "a/b", encoded=True)))
    assert not is_transaction_ledger("t/ns/persistent/__transaction_log_0")  # a user's topic, not a coordinator's
    assert not is_transaction_ledger("pulsar/system/persistent/__transaction_log_0x")
    assert not is_transaction_ledger(preserver_log_name(0))
    assert not is_transaction_ledger("t/ns/persistent/x")
