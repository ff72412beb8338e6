"""`txnadmin downgrade roll`: the rolling downgrade after the safe verdict, through the CLI against a real engine
of three brokers under a workload (`engine run`): each broker restarted on the older version in turn, every
recorded log recovered on it, progress kept in the checklist; and its refusals."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from engine_brokers_helpers import (
    SMALL, TXNADMIN, batched_written, brokers, cli, init, run_engine as _run_engine, stop_engine as _stop, until,
)


def _safe(tmp_path, over_http: bool = False):
    """A three-broker engine under load whose downgrade is recorded and safe: (home, dir, checklist, process,
    target args). ``over_http``: the target is the first broker's URL with the token, as a real cluster is reached
    (the checklist is bound to it), instead of `local:DIR`."""
    home, d = tmp_path / "home", tmp_path / "e"
    init(home, d, "--brokers", "3", *SMALL)
    run = _run_engine(home, d)
    state = tmp_path / "dg.json"
    try:
        until(lambda: batched_written(d), "batched entries", 30)
        server = json.loads((d / "server.json").read_text())
        target = (["-u", server["url"], "--auth-params", f"token:{server['token']}"] if over_http
                  else ["-u", f"local:{d}"])
        started = cli(home, *target, "downgrade", "start", "--state", str(state), "--yes")
        assert started.returncode == 0, started.stdout + started.stderr
        waited = cli(home, *target, "downgrade", "wait", "--state", str(state), "--rerecord", "--yes",
                     "--timeout", "180", "--interval", "1")
        assert waited.returncode == 0, waited.stdout + waited.stderr
        yield home, d, state, run, target
    finally:
        if run.poll() is None:
            _stop(run)


@pytest.fixture
def safe_cluster(tmp_path):
    for home, d, state, run, _target in _safe(tmp_path):
        yield home, d, state, run


@pytest.fixture
def safe_cluster_over_http(tmp_path):
    yield from _safe(tmp_path, over_http=True)


def test_roll_walks_every_broker_down_resumes_after_kill_9_and_checks_every_log_recovered(safe_cluster):
    """The whole walk on a three-broker engine under load, killed with SIGKILL once the first broker is recorded
    done: the same command finishes it, restarting no broker twice (each process start changes exactly once),
    and every recorded log recovered on 2.10.6. Run again, it restarts nothing."""
    home, d, state, run = safe_cluster
    env = dict(os.environ, TXNADMIN_HOME=str(home))
    args = ["-u", f"local:{d}", "downgrade", "roll", "--to", "2.10.6", "--state", str(state), "--yes",
            "--interval", "1", "--timeout", "180"]
    before = {b["id"]: b["processStartTime"] for b in brokers(d)}
    first = subprocess.Popen(TXNADMIN + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        def one_done():
            walk = json.loads(state.read_text()).get("rollingDowngrade") or {}
            return [b for b, step in walk.get("brokers", {}).items() if step.get("state") == "done"]

        done = until(one_done, "the first broker walked down", 120)
    finally:
        first.kill()  # SIGKILL: no handler runs
        first.communicate(timeout=30)
    restarted_once = {b["id"]: b["processStartTime"] for b in brokers(d) if b["id"] in done}
    resumed = subprocess.run(TXNADMIN + args + ["-o", "json"], capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "already on 2.10.6" in resumed.stderr  # -o json: the walk's story on stderr
    walk = json.loads(resumed.stdout)
    assert walk["done"] and walk["failedBroker"] is None and walk["unrecovered"] == []
    assert set(walk["brokers"]) == set(before)
    now = {b["id"]: b for b in brokers(d)}  # from the engine's own record, not the walk's report
    assert all(now[b]["processStartTime"] == t for b, t in restarted_once.items())  # not restarted again
    assert all(b["version"] == "2.10.6" and b["processStartTime"] != before[b["id"]] for b in now.values())
    checklist = json.loads(state.read_text())
    assert all(step["state"] == "done" for step in checklist["rollingDowngrade"]["brokers"].values())
    after = {b["id"]: b["processStartTime"] for b in brokers(d)}
    again = cli(home, *args[:-4], "--interval", "1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("already on 2.10.6") == 3
    assert {b["id"]: b["processStartTime"] for b in brokers(d)} == after
    assert "did not recover" not in _stop(run)


def test_roll_refuses_before_the_safe_verdict_and_a_bad_version(tmp_path):
    home, d = tmp_path / "home", tmp_path / "e"
    init(home, d, "--brokers", "2")
    run = _run_engine(home, d)
    state = tmp_path / "dg.json"
    try:
        bad = cli(home, "-u", f"local:{d}", "downgrade", "roll", "--to", "two", "--state", str(state), "--yes")
        assert bad.returncode == 2 and "--to 'two'" in bad.stderr
        started = cli(home, "-u", f"local:{d}", "downgrade", "start", "--state", str(state), "--yes")
        assert started.returncode == 0, started.stderr
        early = cli(home, "-u", f"local:{d}", "downgrade", "roll", "--to", "2.10.6", "--state", str(state),
                    "--yes")
        assert early.returncode == 1 and "no safe verdict" in early.stderr
        assert {b["version"] for b in brokers(d)} != {"2.10.6"}  # nothing was restarted

        # A function's subscription ("tenant/ns/fn") recorded under 5.0.0's store name: 2.10.6 has no valid name for
        # it (PR #25727), so the walk refuses before any broker is touched, whatever the verdict says.
        from txnadmin.names import pending_ack_topic
        from txnadmin.procedures.downgrade.checklist import load_state, save_state

        recorded = load_state(state)
        topic = "persistent://public/default/fn-input"
        store = pending_ack_topic(topic, "public/default/fn", encoded=True)
        recorded["pendingAckStores"][store] = {"topic": topic, "subscription": "public/default/fn"}
        recorded["safeVerdict"] = {"poll": recorded.get("polls", 0), "at": 0}
        save_state(state, recorded)
        starts = {b["id"]: b["processStartTime"] for b in brokers(d)}
        planned = cli(home, "-u", f"local:{d}", "downgrade", "roll", "--to", "2.10.6", "--state", str(state),
                      "--dry-run", "-o", "json")
        assert planned.returncode == 0, planned.stderr  # the plan shows the refusal before anyone is asked
        plan = json.loads(planned.stdout)["plan"]
        assert plan["renamedStores"] == [{"store": store, "namedOnTo": None}]
        assert plan["steps"][0].startswith("refuse before touching a broker: 2.10.6 names 1 recorded")
        refused = cli(home, "-u", f"local:{d}", "downgrade", "roll", "--to", "2.10.6", "--state", str(state),
                      "--yes")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"{store} cannot open at all" in refused.stderr and "--allow-renamed-stores" in refused.stderr
        assert "Traceback" not in refused.stderr and "rollingDowngrade" not in load_state(state)
        assert {b["id"]: b["processStartTime"] for b in brokers(d)} == starts  # no broker was touched
    finally:
        _stop(run)


def test_the_stores_an_older_version_names_otherwise():
    from txnadmin.names import pending_ack_topic
    from txnadmin.procedures.downgrade.rolling import renamed_stores

    topic = "persistent://public/default/t"
    subs = {"plain": "billing-1", "space": "a b", "function": "public/default/fn"}
    on_5 = {pending_ack_topic(topic, s, encoded=True): {"topic": topic, "subscription": s} for s in subs.values()}
    on_4_0 = {pending_ack_topic(topic, s): {"topic": topic, "subscription": s} for s in subs.values()
              if "/" not in s}  # a 4.0 broker never had a store for the function's subscription
    unencoded = f"{topic}-a b__transaction_pending_ack"
    for recorded, to, expected in (
            (on_5, "4.2.2", set()),
            (on_5, "5.1.0", set()),
            (on_5, "4.0.13", {unencoded, None}),  # None: no name at all ('/' before the fix)
            (on_5, "2.10.6", {unencoded, None}),
            (on_4_0, "2.10.6", set()),
            (on_4_0, "5.0.0", {f"{topic}-a+b__transaction_pending_ack"})):
        found = renamed_stores({"pendingAckStores": recorded}, to)
        assert {name for _, name in found} == expected and len(found) == len(expected), (to, found)
        assert all(key in recorded for key, _ in found)


def test_roll_on_a_cluster_it_cannot_restart_asks_the_operator_and_waits_for_each_broker(safe_cluster_over_http):
    """Through the brokers' HTTP address (as a real cluster is reached) the walk cannot restart anything: it says
    which broker to take down and waits until that broker answers on --to as a new process. The operator (here,
    `engine broker restart` run when asked) does each restart."""
    home, d, state, run, target = safe_cluster_over_http
    env = dict(os.environ, TXNADMIN_HOME=str(home))
    walk = subprocess.Popen(TXNADMIN + [*target, "downgrade", "roll", "--to", "2.10.6", "--state", str(state), "--yes",
                                        "--interval", "1", "--timeout", "180"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    asked = []
    try:
        assert walk.stdout is not None
        for line in walk.stdout:
            if "take it down now and start it on 2.10.6" in line:
                broker = line.split(":", 2)[0] + ":" + line.split(":", 2)[1]
                asked.append(broker)
                done = cli(home, "engine", "broker", "restart", str(d), "--broker", broker, "--version", "2.10.6")
                assert done.returncode == 0, done.stderr
        walk.wait(timeout=60)
    finally:
        if walk.poll() is None:
            walk.kill()
    assert walk.returncode == 0, walk.stderr.read() if walk.stderr else ""
    assert sorted(asked) == sorted(b["id"] for b in brokers(d))  # each broker asked for once
    assert {b["version"] for b in brokers(d)} == {"2.10.6"}


def test_a_broker_already_on_the_version_counts_as_back_though_it_exports_no_process_start():
    """A broker the walk did not restart (already on --to) has no earlier process to tell a new one from; one that
    exports no process_start_time_seconds must still count as back, not hold the walk until its timeout. A broker
    the walk did restart, answering as the same process on the old version, does not."""
    from txnadmin.admin.cluster import BrokerReading
    from txnadmin.procedures.downgrade.report import DowngradeError
    from txnadmin.procedures.downgrade.rolling import _await_return

    class View:  # what a cluster answers about one broker: listed, on ``version``, no process start time
        def __init__(self, version):
            self.version = version

        def forget(self):
            pass

        def active_brokers(self):
            return ["b:8080"]

        def read_broker(self, broker):
            return BrokerReading(broker, 0.0, version=self.version)

    step = {"state": "restarting", "versionBefore": None, "processStartBefore": None}
    _await_return(View("2.10.6"), "b:8080", step, "2.10.6", 5.0, 0.1, print)  # type: ignore[arg-type]  # a stand-in for ClusterView: the two reads the wait makes
    assert step["versionAfter"] == "2.10.6"
    restarted = {"state": "restarting", "versionBefore": "4.0.12", "processStartBefore": None}
    with pytest.raises(DowngradeError, match="did not come back on 2.10.6"):
        _await_return(View("4.0.12"), "b:8080", restarted, "2.10.6", 0.3, 0.1, print)  # type: ignore[arg-type]  # a stand-in for ClusterView: the two reads the wait makes
