"""Re-recording without a reload after a start that batching voided (issue #24: a done log whose proof failed is
no longer done, and nothing a voided run recorded may vouch for batching being off)."""

from __future__ import annotations

import pytest

from txnadmin.admin.local import LocalAdmin
from txnadmin.procedures.downgrade import DowngradeError, Waiting, start, status

from downgrade_helpers import BATCHED, load
from engine_helpers import open_engine


@pytest.mark.slow
def test_a_no_reload_record_after_a_voided_start_does_not_inherit_batching_off(tmp_path):
    flag = "transactionPendingAckBatchedWriteEnabled"
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        load(engine)

        unloads: list[str] = []

        class SwitchesOn(LocalAdmin):
            def unload_topic(self, topic):
                super().unload_topic(topic)
                unloads.append(topic)
                if len(unloads) == 3:  # someone switches batching on while start reloads, after two reloads
                    super().update_dynamic_config(flag, "true")

        with pytest.raises(DowngradeError, match="switched back on"):
            start(SwitchesOn(engine), tmp_path / "s.json", concurrency=1)
        admin = LocalAdmin(engine)
        admin.update_dynamic_config(flag, "false")
        state = start(admin, tmp_path / "s.json", reload=False)  # the documented no-reload path, run again
        recs = [*state["coordinators"].values(), *state["pendingAckStores"].values()]
        assert recs and not any(rec["batchingOff"] for rec in recs if not rec.get("notLoaded")), recs
        for _ in range(6):  # however long the traffic: nothing here was seen reopening with batching off
            load(engine, 30)
            report = status(admin, tmp_path / "s.json")
            assert not report.safe
            kinds = {l.kind for l in report.waiting}
            assert Waiting.NOT_REOPENED in kinds and kinds <= {Waiting.NOT_REOPENED, Waiting.STILL_FLUSHING}, kinds
            assert all(l.kind == Waiting.NOT_REOPENED for l in report.waiting if l.component == "coordinator")
