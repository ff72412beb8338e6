"""A commit applies its acks to the subscription in memory and persists them lazily, as Pulsar does; the pending-ack
log is cleaned only behind the subscription's *persisted* mark-delete (Pulsar's clearUselessLogData reads
getPersistentMarkDeletedPosition), so a crash in between loses no committed ack: replay re-applies the COMMIT."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from txnadmin.engine.engine import Engine
from txnadmin.engine.storage import LedgerStorage
from txnadmin.names import managed_ledger_name
from txnadmin.engine.position import Position

from engine_helpers import open_engine

TOPIC = "persistent://public/default/t"


def test_the_store_log_is_cleaned_only_behind_the_persisted_mark_delete(tmp_path):
    engine = open_engine(tmp_path / "e", managedLedgerMaxEntriesPerLedger=1000)
    try:
        sub = engine.topic(TOPIC).subscription("s")
        positions = [engine.publish(TOPIC, b"m%d" % i) for i in range(3)]
        txn = engine.begin()
        engine.ack(txn, TOPIC, "s", positions[:1])  # one pending ack: the store indexes its record at once
        engine.ack(txn, TOPIC, "s", positions[1:])
        store = engine.store(TOPIC, "s")
        before = store.cursor.mark_delete_position
        engine.commit(txn)
        assert sub.mark_delete_position == positions[-1]  # applied at once, in memory
        assert sub.persisted_mark_delete_position < positions[0]  # not yet persisted
        assert store.cursor.mark_delete_position == before  # so the store keeps its ACK and COMMIT records
        engine.sweep_ledgers()  # the subscription persists first, then the store cleans behind it
        assert sub.persisted_mark_delete_position == positions[-1]
        assert store.cursor.mark_delete_position > before
    finally:
        engine.close()


CHILD = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, sys.argv[2])
    from pathlib import Path
    from engine_helpers import open_engine
    engine = open_engine(Path(sys.argv[1]), managedLedgerMaxEntriesPerLedger=1000)
    topic = "persistent://public/default/t"
    engine.subscribe(topic, "s")
    positions = [engine.publish(topic, b"m%d" % i) for i in range(4)]
    txn = engine.begin()
    engine.ack(txn, topic, "s", positions[:3])
    engine.commit(txn)
    print(json.dumps([str(p) for p in positions]), flush=True)
    os._exit(0)  # as a kill -9 right after the commit answered: nothing flushed, nothing closed
""")


def test_a_crash_right_after_a_commit_loses_none_of_its_acks(tmp_path):
    directory = tmp_path / "e"
    tests_dir = str(Path(__file__).resolve().parent)
    out = subprocess.run([sys.executable, "-c", CHILD, str(directory), tests_dir], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    positions = [Position.parse(p) for p in json.loads(out.stdout)]
    with LedgerStorage.open(directory, read_only=True) as storage:  # what the crash left on disk
        state = json.loads(storage.meta_get(f"managed-ledgers/{managed_ledger_name(TOPIC)}/cursors/s"))
    assert Position.parse(state["markDelete"]) < positions[0]  # the commit's acks had not been persisted yet
    with Engine(directory, maintenance=False) as engine:
        cursor = engine.topic(TOPIC, create=False).subscription("s")
        assert all(cursor.is_deleted(p) for p in positions[:3])  # re-applied from the pending-ack log
        assert not cursor.is_deleted(positions[3])
        assert [m.position for m in engine.receive(TOPIC, "s", 10)] == [positions[3]]
