"""`procedures.downgrade.verify` where the CLI cannot reach: stores that answer 404, inputs that change under it.

The refusals for another cluster's dumps are driven through the CLI in test_cli_downgrade_verify.py.
"""

from __future__ import annotations

import json

import pytest

from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import NotFoundError
from txnadmin.procedures.downgrade import DowngradeError, start, verify
from txnadmin.procedures.downgrade.checklist import load_state, save_state

from downgrade_helpers import BATCHED, Unloaded, load
from engine_helpers import open_engine

HIDDEN_STORE = "persistent://public/default/u-s__transaction_pending_ack"


@pytest.fixture()
def recorded(tmp_path):
    """A batching engine under traffic, `start` recorded in s.json, and a dump of its ledgers taken after it."""
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)
        start(LocalAdmin(engine), tmp_path / "s.json")
        engine.storage.export(tmp_path / "dump")
        yield engine, tmp_path / "s.json", tmp_path / "dump"


def _verify(admin, state, dump):
    return verify(admin, state, [str(dump / "ledgers")], dump / "ledgers.txt", engine="python")


def test_a_listed_store_whose_stats_answer_404_means_cannot_tell(recorded):
    engine, state, dump = recorded
    before = state.read_bytes()
    admin = Unloaded(engine)  # the store of topic u is listed, but its stats answer 404 (not loaded)
    with pytest.raises(DowngradeError, match=f"store {HIDDEN_STORE} is listed .* 404 .*load its topic") as err:
        _verify(admin, state, dump)
    assert err.value.exit_code == 3 and state.read_bytes() == before
    # Gone from the listing too: deleted, so none of its ledgers is required (the rest still is).
    admin.deleted = True
    _result, record = _verify(admin, state, dump)
    everything = _verify(LocalAdmin(engine), state, dump)[1]
    assert 0 < record["liveLedgersChecked"] < everything["liveLedgersChecked"]


class NoCoordinator(LocalAdmin):
    def coordinator_internal_stats(self, coordinator_id, metadata=False):
        raise NotFoundError("Transaction coordinator not found")


class NoCoordinatorListed(NoCoordinator):
    def list_coordinators(self):
        return [c for c in super().list_coordinators() if c["id"] != 0]


def test_a_recorded_coordinator_that_answers_404_is_not_loaded_and_one_not_listed_is_not_this_cluster(recorded):
    engine, state, dump = recorded
    before = state.read_bytes()
    # listed, but 404: failing over or replaying its log (Pulsar's window between two owners)
    with pytest.raises(DowngradeError, match="coordinator 0 is not loaded .*failing over.*verify` again") as err:
        _verify(NoCoordinator(engine), state, dump)
    assert err.value.exit_code == 3 and state.read_bytes() == before
    # not even listed: coordinators are never deleted, so this is another cluster
    with pytest.raises(DowngradeError, match="coordinator 0 is not among the target's coordinators.*not the "
                                             "cluster") as err:
        _verify(NoCoordinatorListed(engine), state, dump)
    assert err.value.exit_code == 3 and state.read_bytes() == before


class Meddling(LocalAdmin):
    """Runs ``meddle`` once, while verify reads the target's ledgers (before the scan)."""

    meddle = staticmethod(lambda: None)

    def coordinator_internal_stats(self, coordinator_id, metadata=False):
        meddle, self.meddle = self.meddle, (lambda: None)
        meddle()
        return super().coordinator_internal_stats(coordinator_id, metadata)


def test_a_ledger_list_that_changes_while_verify_reads_it_records_nothing(recorded):
    engine, state, dump = recorded
    before = state.read_bytes()
    admin = Meddling(engine)
    admin.meddle = lambda: (dump / "ledgers.txt").write_text((dump / "ledgers.txt").read_text() + "12:00:01.000 INFO  shell done\n")
    with pytest.raises(DowngradeError, match="ledgers.txt changed while verify read it") as err:
        _verify(admin, state, dump)
    assert err.value.exit_code == 3 and state.read_bytes() == before


def test_logs_recorded_while_verify_runs_void_its_check(recorded):
    """`start` run beside verify records logs whose ledgers verify did not hold the list to."""
    engine, state, dump = recorded
    admin = Meddling(engine)

    def rerecord():
        data = load_state(state)
        data["pendingAckStores"]["persistent://public/default/v-s__transaction_pending_ack"] = {
            "topic": "persistent://public/default/v", "subscription": "s", "lastBatchedLedgerId": None}
        save_state(state, data)  # as a `start` beside it saves

    admin.meddle = rerecord
    with pytest.raises(DowngradeError, match="logs were recorded while verify ran") as err:
        _verify(admin, state, dump)
    assert err.value.exit_code == 3 and json.loads(state.read_text())["verification"] is None
