"""An idle transactional subscription whose topic is unloaded under `downgrade wait` and left unloaded, as Pulsar
leaves it: a topic unloaded (`topics unload`, a bundle move) loads again only when something looks it up, and until
then the transactions endpoints answer 404 "Topic not found <topic>" (TransactionsBase.getExistingPersistentTopicAsync
reads only the loaded topics) while the v2 topic stats load it (getTopicIfExists on its owner). `wait` loads it
itself with that read, and the reopen is judged by the watch like any other. Driven through the CLI (subprocesses)
against a served engine with engineUnloadLeavesTopicUnloaded on; the traffic is driven on the engine in this
process."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.protocol import PENDING_ACK_BATCH_FLAG

from engine_helpers import live_batched_entries
from http_front import front
from downgrade_helpers import (
    T, T_STORE, TOKEN, TXNADMIN, U_STORE, assert_one_line_naming, cli, components_of, proven_done, served_engine,
    traffic_on_u_until_it_ends, until,
)

NOT_LOADED = "store not loaded"
T_STATS = "/admin/v2/persistent/public/default/t/stats"


def _waiter(url: str, state: Path, *extra: str) -> tuple[subprocess.Popen, list[str]]:
    """`downgrade wait -o json` in the background, its stderr read line by line."""
    proc = subprocess.Popen(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", "downgrade", "wait", "--state",
                                        str(state), "-o", "json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stderr is not None
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    return proc, lines


def _finish(proc: subprocess.Popen, engine, lines: list[str], rounds: int = 60) -> tuple[int, dict, str]:
    """Traffic on u (never on t: its subscription stays idle) until the wait ends; (exit code, report, stderr)."""
    try:
        out, _ = traffic_on_u_until_it_ends(proc, engine, rounds)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    time.sleep(0.2)  # the stderr reader drains the last lines
    err = "".join(lines)
    assert "Traceback" not in err, err
    return proc.returncode, json.loads(out), err


def _start_with_t_done(engine, url: str, state: Path) -> None:
    """`start`, then t's store trimmed past LastBatched; u's still waits (its subscription acknowledges later)."""
    assert cli(url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
    until(lambda: components_of(cli(url, "downgrade", "status", "--state", str(state), "-o", "json"))
          [T_STORE]["done"], "t's store done", engine, "t")
    # From now on an unload leaves the topic closed until something looks it up, as on Pulsar.
    engine.config.engineUnloadLeavesTopicUnloaded = True


def _unload_t(url: str) -> None:
    admin = HttpAdmin(url, token=TOKEN)
    try:
        admin.unload_topic(T)
    finally:
        admin.close()


@pytest.mark.slow
def test_an_idle_store_left_unloaded_mid_wait_is_loaded_by_the_wait_and_its_reopen_judged(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url):
        _start_with_t_done(engine, url, state)
        waiter, lines = _waiter(url, state, "--timeout", "90", "--interval", "0.5")
        until(lambda: proven_done(state, T_STORE), "the wait proved t's store done")
        before = json.loads(state.read_text())["pendingAckStores"][T_STORE]["recoverStartTime"]
        _unload_t(url)
        assert T not in engine.topics  # unloaded, and nobody looks it up: t's subscription is idle
        # the wait sees the 404 and loads t itself, then judges the reopen
        until(lambda: T in engine.topics, "the wait loaded t")
        code, report, err = _finish(waiter, engine, lines)
        batched = live_batched_entries(engine)
        # for people, the plan under the target line says it may load topics (stdout: stderr keeps one-line errors)
        shown = cli(url, "downgrade", "wait", "--state", str(state), "--timeout", "0")
    assert "loaded 1 unloaded topic(s) with a stats read" in err, err[-3000:]
    out = shown.stdout.splitlines()
    assert out[0].startswith("target: ") and out[1].startswith("plan: ") and "topics stats <topic>" in out[2], out
    assert code == 0 and report["safe"] is True, err[-3000:]
    t = {c["name"]: c for c in report["components"]}[T_STORE]
    assert t["done"] is True, t
    accepted = t.get("acceptedReopens") or []
    assert accepted and accepted[-1]["from"] == before and accepted[-1]["to"] != before, t
    assert "with batching off" in accepted[-1]["evidence"], accepted
    assert "loaded 1 unloaded topic(s) with a stats read: " + T in err, err[-3000:]
    assert batched == []


@pytest.mark.slow
def test_batching_switched_on_and_off_while_the_store_was_unloaded_is_never_safe(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url), front(url, TOKEN) as door:
        _start_with_t_done(engine, door.url, state)
        flipped = threading.Event()

        def flip_before_the_load(method: str, path: str) -> None:
            # Between the poll that saw t's 404 and the one that sees it reopened: on for two watch periods, off
            # again before the load goes through (the next poll finds both flags off).
            if method == "GET" and path.split("?")[0] == T_STATS and not flipped.is_set():
                flipped.set()
                admin = HttpAdmin(url, token=TOKEN)
                try:
                    admin.update_dynamic_config(PENDING_ACK_BATCH_FLAG, "true")
                    time.sleep(5)
                    admin.update_dynamic_config(PENDING_ACK_BATCH_FLAG, "false")
                finally:
                    admin.close()

        door.before_forward.append(flip_before_the_load)
        waiter, lines = _waiter(door.url, state, "--timeout", "90", "--interval", "0.5")
        until(lambda: proven_done(state, T_STORE), "the wait proved t's store done")
        _unload_t(url)
        code, report, err = _finish(waiter, engine, lines)
    assert flipped.is_set()
    assert code == 1 and report["safe"] is False, err[-3000:]
    t = {c["name"]: c for c in report["components"]}[T_STORE]
    assert t["done"] is False and t["waitingFor"] == "reopened since recording", t
    assert "not proven harmless" in t["reason"] and PENDING_ACK_BATCH_FLAG in t["reason"], t
    assert not t.get("acceptedReopens"), t


@pytest.mark.slow
def test_a_load_that_fails_keeps_waiting_with_one_line_naming_the_store_and_exits_1(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url), front(url, TOKEN) as door:
        _start_with_t_done(engine, door.url, state)
        door.intercepts.append(lambda m, p: (500, json.dumps({"reason": "Failed to load topic within timeout"}))
                               if m == "GET" and p.split("?")[0] == T_STATS else None)
        _unload_t(url)
        waited = cli(door.url, "downgrade", "wait", "--state", str(state), "--timeout", "4", "--interval", "0.5",
                     "-o", "json")
        assert waited.returncode == 1 and json.loads(waited.stdout)["safe"] is False, waited.stderr
        t = components_of(waited)[T_STORE]
        assert t["done"] is False and t["waitingFor"] == NOT_LOADED, t
        assert_one_line_naming(t["reason"], "store not loaded", f"topics stats {T}", "HTTP 500", "keeps waiting")
        assert t["topicLoad"]["result"].startswith("failed: HTTP 500"), t
        assert ("GET", T_STATS) in [(m, p.split("?")[0]) for m, p in door.seen]
        assert T not in engine.topics  # nothing else loaded it
        # `status` stays a pure read: it names the store not loaded and loads nothing
        door.seen.clear()
        polled = cli(door.url, "downgrade", "status", "--state", str(state), "-o", "json")
        assert polled.returncode == 1 and components_of(polled)[T_STORE]["waitingFor"] == NOT_LOADED
        assert not [p for m, p in door.seen if p.split("?")[0] == T_STATS]
        assert components_of(polled)[U_STORE]["done"] is False


@pytest.mark.slow
def test_an_unloaded_topic_answers_404_on_the_transactions_endpoints_until_its_stats_load_it(tmp_path):
    with served_engine(tmp_path) as (engine, url):
        engine.config.engineUnloadLeavesTopicUnloaded = True
        before = json.loads(cli(url, "transactions", "pending-ack-stats", "-t", T, "-s", "s").stdout)
        _unload_t(url)
        for args in (["pending-ack-stats", "-t", T, "-s", "s"], ["pending-ack-internal-stats", "-t", T, "-s", "s"],
                     ["transaction-buffer-stats", "-t", T]):
            answered = cli(url, "transactions", *args)
            assert answered.returncode == 1 and f"Topic not found {T}" in answered.stderr, (args, answered.stderr)
        # still listed, with its store: unloaded is not deleted
        stats = HttpAdmin(url, token=TOKEN)
        try:
            listed = stats.list_topics("public/default")
            assert T in listed and T_STORE in listed, listed
            assert "s" in stats.topic_stats(T)["subscriptions"]  # the v2 stats read loads it
        finally:
            stats.close()
        after = json.loads(cli(url, "transactions", "pending-ack-stats", "-t", T, "-s", "s").stdout)
        assert after["recoverStartTime"] > before["recoverStartTime"]  # its store reopened with the topic
        # the default keeps the old behaviour: an unload reloads at once
        engine.config.engineUnloadLeavesTopicUnloaded = False
        _unload_t(url)
        assert cli(url, "transactions", "pending-ack-stats", "-t", T, "-s", "s").returncode == 0


@pytest.mark.slow
def test_start_loads_each_topic_it_unloads_so_an_idle_store_is_recorded_reopened(tmp_path):
    """On Pulsar `start`'s own unload leaves an idle topic closed: without a load its stores would be recorded
    "not loaded", with no recoverStartTime to prove anything by."""
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url):
        engine.config.engineUnloadLeavesTopicUnloaded = True
        assert cli(url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        assert T in engine.topics
        stores = json.loads(state.read_text())["pendingAckStores"]
        for name in (T_STORE, U_STORE):
            assert stores[name]["recoverStartTime"] and stores[name]["batchingOff"] is True, stores[name]
            assert not stores[name].get("notLoaded"), stores[name]
