"""Pending-ack store discovery (admin/discovery.py): one split of `<topic>-<sub>__transaction_pending_ack`, used by
the downgrade, the batch-log stats and `--reload`, on the engine and on a broker that names stores as Pulsar 5.0."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from engine_helpers import open_engine
from downgrade_helpers import traffic
from txnadmin.admin.discovery import discover_pending_ack_stores
from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import NotFoundError
from txnadmin.cli.main import app
from txnadmin.names import pending_ack_topic

A, AB = "persistent://public/default/a", "persistent://public/default/a-b"


def _ambiguous_engine(directory):
    """`a` has subscription `b-c`, and a topic `a-b` exists: the store `a-b-c__…` reads two ways."""
    engine = open_engine(directory)
    traffic(engine, 3, "a", "b-c")
    engine.publish("a-b", b"x")
    return engine


def test_an_ambiguous_store_is_resolved_by_asking_the_target(tmp_path):
    with _ambiguous_engine(tmp_path / "e") as engine:
        admin = LocalAdmin(engine)
        stores = discover_pending_ack_stores(admin)
        store = stores[pending_ack_topic(A, "b-c")]
        assert (store.topic, store.subscription, store.origin_listed) == (A, "b-c", True)  # not (a-b, c): no such sub


def test_a_store_whose_topic_is_gone_is_found_and_marked(tmp_path):
    """Listed, but no listed topic matches it (a store left behind by a deleted topic): still found, so the
    downgrade waits on it, but marked, so `--reload` has nothing to unload for it."""
    from txnadmin.admin.batchlog import reload_units

    class TopicsGone(LocalAdmin):
        def list_topics(self, namespace, include_system=True):
            return [t for t in super().list_topics(namespace, include_system) if t not in (A, AB)]

    with _ambiguous_engine(tmp_path / "e") as engine:
        admin = TopicsGone(engine)
        store = discover_pending_ack_stores(admin)[pending_ack_topic(A, "b-c")]
        assert store.origin_listed is False
        assert reload_units(admin, "pending-ack") == []


class Pulsar5Names:
    """A broker answering as Pulsar 5.0 does: the store's name carries the subscription URL-encoded."""

    def __init__(self, subscriptions: dict[str, set[str]]):
        self.subscriptions = subscriptions  # topic → its subscriptions (with a pending-ack store each)
        self.asked: list[tuple[str, str]] = []

    def list_tenants(self):
        return ["public"]

    def list_namespaces(self, tenant):
        return ["public/default"]

    def list_topics(self, namespace, include_system=True):
        stores = [pending_ack_topic(t, s, encoded=True) for t, subs in self.subscriptions.items() for s in subs]
        return sorted(self.subscriptions) + (stores if include_system else [])

    def pending_ack_internal_stats(self, topic, subscription):
        self.asked.append((topic, subscription))
        if subscription not in self.subscriptions.get(topic, ()):
            raise NotFoundError("Subscription not found")
        return {"pendingAckLogStats": {"managedLedgerInternalStats": {"ledgers": [], "cursors": {}}}}


def test_a_pulsar_5_store_name_resolves_to_the_subscription_it_encodes():
    admin = Pulsar5Names({A: {"tenant/ns/fn", "plain"}})
    stores = discover_pending_ack_stores(admin)
    encoded = stores[f"{A}-tenant%2Fns%2Ffn__transaction_pending_ack"]
    assert (encoded.topic, encoded.subscription) == (A, "tenant/ns/fn")
    assert (stores[f"{A}-plain__transaction_pending_ack"].subscription) == "plain"
    assert admin.asked == [(A, "tenant%2Fns%2Ffn"), (A, "tenant/ns/fn")]  # one reading needs no question


def test_reload_and_batch_log_stat_use_the_same_resolution(tmp_path):
    """Through the CLI, as an operator runs them: the ambiguous store's topic is `a`, never `a-b`."""
    runner = CliRunner()
    directory = tmp_path / "e"
    with _ambiguous_engine(directory):
        pass
    env = {"TXNADMIN_HOME": str(tmp_path / "home")}
    url = f"local:{directory}"
    result = runner.invoke(app, ["-u", url, "transactions", "get-txn-pending-ack-batch-log-stat"], env=env)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["subscriptionArray"]
    assert [(r["topic"], r["subscription"]) for r in rows] == [(A, "b-c")]
    result = runner.invoke(app, ["-u", url, "transactions", "set-txn-pending-ack-batch-log", "--disable", "--reload",
                                 "--yes", "-o", "json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout[result.stdout.index("{"):])["reloaded"] == [A]
