"""Motion between the brokers of an engine (engine/cluster/): a component reopens on its new owner reading that
broker's flags and counting in its registry, and `--fault shed` moves bundles between brokers."""

from __future__ import annotations

import os
import subprocess
import sys

from prometheus_client import generate_latest

from txnadmin.admin.local import open_engine
from txnadmin.metrics.exposition import parse_exposition
from txnadmin.engine.coordinator import TransactionCoordinator
from txnadmin.engine.engine import NotFound
from txnadmin.engine.cluster import Cluster
from txnadmin.engine.config import EngineConfig, update_dynamic
from txnadmin.engine.manage import init_engine
from txnadmin.names import coordinator_assign_partition

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
FLAG = "transactionLogBatchedWriteEnabled"
ACK_FLAG = "transactionPendingAckBatchedWriteEnabled"


def test_a_moved_coordinator_reopens_with_its_new_owners_flags_and_counters(tmp_path):
    d = tmp_path / "e"
    # the second broker's watch delivers a change only ten minutes later: it still has batching off
    init_engine(d, {"engineBrokers": "2", "transactionCoordinatorCount": "4",
                    "engineBrokerWatchDelaysMillis": "0,600000"})
    cluster = Cluster(d, [1, 2])  # addresses only: nothing listens in this test
    engine = open_engine(d, host_of=cluster.host_of, maintenance=False)
    try:
        cluster.attach(engine)
        fast, slow = cluster.brokers
        for i in engine.coordinator_ids():  # opened as the engine opened, before the brokers started: still theirs
            assert engine.coordinator(i).log.writer.metrics is cluster.owner_of_coordinator(i).tc_metrics
        update_dynamic(d, FLAG, "true")
        cluster.tick()
        assert getattr(fast.config, FLAG) is True and getattr(slow.config, FLAG) is False
        on_slow = next(i for i in engine.coordinator_ids() if cluster.owner_of_coordinator(i) is slow)
        tc = engine.coordinator(on_slow)
        assert tc.log.writer_config.enabled is False
        said = cluster.move(coordinator_assign_partition(on_slow))
        assert f"from {slow.id} to {fast.id}: 1 coordinator" in said
        moved = engine.coordinator(on_slow)
        assert cluster.owner_of_coordinator(on_slow) is fast
        assert moved.log.writer_config.enabled is True  # the new owner's flag, read as it reopened
        assert moved.recover_start_time > tc.recover_start_time
        assert moved.log.writer.metrics is fast.tc_metrics  # it counts on its new owner's /metrics
        back = cluster.move(coordinator_assign_partition(on_slow))
        assert f"to {slow.id}" in back and engine.coordinator(on_slow).log.writer_config.enabled is False

        # a pending-ack store reopens with its topic's bundle, reading the new owner's pending-ack flag
        update_dynamic(d, ACK_FLAG, "true")
        cluster.tick()
        topic = "persistent://public/default/moving"
        engine.subscribe(topic, "s")
        position = engine.publish(topic, b"m")
        txn = engine.begin()
        engine.ack(txn, topic, "s", [position])
        owner = cluster.owner(topic)
        store = engine.stores[(topic, "s")]
        assert store.writer_config.enabled is getattr(owner.config, ACK_FLAG)
        cluster.move(topic)
        heir = cluster.owner(topic)
        assert heir is not owner and getattr(heir.config, ACK_FLAG) is not getattr(owner.config, ACK_FLAG)
        reopened = engine.stores[(topic, "s")]
        assert reopened is not store and reopened.writer_config.enabled is getattr(heir.config, ACK_FLAG)
        assert reopened.writer.metrics is heir.ack_metrics
        assert engine.commit(txn) == "COMMITTED"  # the transaction ends on the moved store
        ended = [s for s in parse_exposition(generate_latest(heir.registry).decode())
                 if s.name == "pulsar_txn_tp_committed_count_total"]
        assert [s.value for s in ended] == [1.0]  # counted on the store's owner now
        assert not [s for s in parse_exposition(generate_latest(owner.registry).decode())
                    if s.name == "pulsar_txn_tp_committed_count_total"]
    finally:
        cluster.close()
        engine.close()
    assert EngineConfig.load(d).engineBrokers == 2


def test_shed_moves_bundles_between_the_brokers_of_a_running_engine(tmp_path):
    d = tmp_path / "e"
    init_engine(d, {"engineBrokers": "2", "transactionCoordinatorCount": "2"})
    env = dict(os.environ, TXNADMIN_HOME=str(tmp_path / "home"))
    run = subprocess.run(TXNADMIN + ["engine", "run", str(d), "--duration", "3", "--rate", "50", "--fault",
                                     "shed=0.5"], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    moves = [line for line in run.stderr.splitlines() if line.startswith("shed: unloaded")]
    assert moves and all(" moved from 127.0.0.1:" in line for line in moves), run.stderr
    assert "have their bundles moved to another broker" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_moved_coordinator_is_not_found_on_its_new_owner_until_its_replay_ends(tmp_path, monkeypatch):
    d = tmp_path / "e"
    init_engine(d, {"engineBrokers": "2", "transactionCoordinatorCount": "2"})
    cluster = Cluster(d, [1, 2])
    engine = open_engine(d, host_of=cluster.host_of, maintenance=False)
    seen_during_replay = []
    replay = TransactionCoordinator.recover

    def observed(self, older=None):  # what an admin handler finds while the new owner replays the log
        try:
            engine.loaded_coordinator(self.tc_id)
            seen_during_replay.append("found")
        except NotFound as exc:
            seen_during_replay.append(str(exc))
        return replay(self, older)

    try:
        cluster.attach(engine)
        txn = engine.begin(tc_id=1)
        monkeypatch.setattr(TransactionCoordinator, "recover", observed)
        cluster.move(coordinator_assign_partition(1))
        assert seen_during_replay == ["Transaction coordinator not found! coordinator id : 1"]
        assert engine.loaded_coordinator(1).get(txn[1]).status_name == "OPEN"  # found again once replayed
    finally:
        cluster.close()
        engine.close()
