"""The engine's maintenance thread: a failing tick is logged (not swallowed), once per failure; the loop lives on."""

from __future__ import annotations

import logging
import threading

from engine_helpers import small_config
from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine


def test_a_failing_tick_is_logged_once_and_the_loop_recovers(tmp_path, monkeypatch, caplog):
    # ticks 1-5 fail the same way, 6-7 work, 8 fails another way, then it works for good
    outcomes: list[Exception | None] = [RuntimeError("metadata store busy")] * 5 + [None, None,
                                                                                  ValueError("bad dynamic config")]
    ticks: list[bool] = []
    finished = threading.Event()

    def tick(self, sweep_ledgers=True):
        ticks.append(sweep_ledgers)
        if len(ticks) > len(outcomes) + 2:
            finished.set()
            return
        failure = outcomes[len(ticks) - 1] if len(ticks) <= len(outcomes) else None
        if failure is not None:
            raise failure

    monkeypatch.setattr(Engine, "maintenance_tick", tick)
    caplog.set_level(logging.DEBUG, logger="txnadmin.engine.engine")
    directory = tmp_path / "engine"
    small_config(engineTimeoutCheckIntervalMillis=10).save(directory)
    engine = Engine(directory, EngineConfig.load(directory))
    try:
        assert finished.wait(30), f"the maintenance loop stopped after {len(ticks)} ticks"
    finally:
        engine.close()
    records = [(r.levelname, r.getMessage(), r.exc_info[1] if r.exc_info else None)
               for r in caplog.records if r.name == "txnadmin.engine.engine"]
    errors = [(message, exc) for level, message, exc in records if level == "ERROR"]
    assert [str(exc) for _, exc in errors] == ["metadata store busy", "bad dynamic config"]
    assert all(f"{directory}: engine maintenance failed" in message for message, _ in errors)
    assert [level for level, message, _ in records if "failed again" in message] == ["DEBUG"] * 4
    assert [message for level, message, _ in records if level == "INFO"] == [
        f"{directory}: engine maintenance works again"] * 2
