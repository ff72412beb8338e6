"""An engine of several brokers (`engine init --brokers N`), through the CLI against a real server process: each
broker's address, version, runtime configuration and /metrics; ownership and Pulsar's 307 redirect; the broker
lifecycle verbs and the rolling-restart fault."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from engine_brokers_helpers import accepts, brokers, cli, init, until
from serve_helpers import serving
from txnadmin.admin.protocol import NotFoundError
from txnadmin.metrics.exposition import parse_exposition, process_cpu_time, process_start_time

TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]





def get(url: str, token: str, path: str) -> httpx.Response:
    return httpx.get(url + path, headers={"Authorization": f"Bearer {token}"}, follow_redirects=False, timeout=10)



def owner_url(url: str, token: str, topic_path: str) -> str:
    reply = get(url, token, f"/lookup/v2/topic/persistent/{topic_path}")
    assert reply.status_code == 200, reply.text
    return reply.json()["httpUrl"]


ASSIGN = "pulsar/system/transaction_coordinator_assign-partition-{}"


def test_init_keeps_the_broker_count_and_refuses_a_bad_one(tmp_path):
    home = tmp_path / "home"
    done = cli(home, "engine", "init", str(tmp_path / "e"), "--brokers", "3")
    assert done.returncode == 0, done.stderr
    assert "3 brokers" in done.stdout
    assert "engineBrokers=3" in (tmp_path / "e" / "engine.conf").read_text().splitlines()
    for args, says in ((["--brokers", "0"], "--brokers"), (["--set", "engineBrokers=17"], "engineBrokers"),
                       (["--set", "engineBrokerWatchDelaysMillis=5,x"], "engineBrokerWatchDelaysMillis"),
                       (["--set", "engineBrokerFailoverDelayMillis=-1"], "engineBrokerFailoverDelayMillis"),
                       (["--brokers", "2", "--set", "engineBrokersWithoutProcessStart=2"],
                        "engineBrokersWithoutProcessStart"),
                       (["--set", "engineBrokersWithoutProcessStart=0,x"], "engineBrokersWithoutProcessStart")):
        bad = cli(home, "engine", "init", str(tmp_path / "bad"), *args)
        assert bad.returncode == 2, (args, bad.stderr)
        assert says in bad.stderr and "Traceback" not in bad.stderr
        assert not (tmp_path / "bad").exists()  # nothing half-written


def test_a_one_broker_engine_is_served_as_before_and_has_no_broker_to_stop(tmp_path):
    home, d = tmp_path / "home", tmp_path / "e"
    init(home, d)
    with serving(d, home) as (url, token):
        assert "brokers" not in json.loads((d / "server.json").read_text())
        assert get(url, token, "/admin/v2/brokers/standalone").json() == ["127.0.0.1:6650"]
        refused = cli(home, "engine", "broker", "stop", str(d), "--broker", "127.0.0.1:6650")
        assert refused.returncode == 3 and "plays one broker" in refused.stderr


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory):
    """A served engine of 3 brokers; the second and third see dynamic-config changes only a minute later, and the
    third exports no process_start_time_seconds."""
    tmp = tmp_path_factory.mktemp("cluster3")
    home, d = tmp / "home", tmp / "e"
    init(home, d, "--brokers", "3", "--set", "engineBrokerWatchDelaysMillis=0,60000",
         "--set", "engineBrokersWithoutProcessStart=2")
    with serving(d, home) as (url, token):
        yield home, d, url, token


def test_each_broker_has_its_own_address_version_and_metrics(cluster3):
    home, d, url, token = cluster3
    listed = brokers(d)
    ids = [b["id"] for b in listed]
    assert len(set(ids)) == 3 and all(i.startswith("127.0.0.1:") for i in ids)
    assert url == listed[0]["url"]
    for i, b in enumerate(listed):
        assert get(b["url"], token, "/admin/v2/brokers/standalone").json() == ids  # host:port, as Pulsar lists them
        assert get(b["url"], token, "/admin/v2/brokers/version").text == "5.0.0"
        samples = parse_exposition(get(b["url"], token, "/metrics").text)
        labels = {s.labels["broker"] for s in samples if "broker" in s.labels}
        assert labels == {b["id"]}  # its own counters only, labelled with its own id
        assert process_cpu_time(samples) is not None
        if i == 2:  # it leaves its start time out of /metrics only: server.json keeps it for the lifecycle verbs
            assert process_start_time(samples) is None and b["processStartTime"] > 0
        else:
            assert process_start_time(samples) == pytest.approx(b["processStartTime"])
    plan = cli(home, "-u", f"local:{d}", "upgrade", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert all(f"{i} runs 5.0.0" in plan.stdout for i in ids)  # every broker asked for its own version


def test_a_call_about_what_another_broker_owns_is_redirected_to_the_owner(cluster3):
    home, d, url, token = cluster3
    ids = {b["url"] for b in brokers(d)}
    owners = {tc: owner_url(url, token, ASSIGN.format(tc)) for tc in range(4)}
    assert set(owners.values()) <= ids and len(set(owners.values())) > 1  # the coordinators are spread
    for tc, owner in owners.items():
        path = f"/admin/v3/transactions/coordinatorInternalStats/{tc}?metadata=true"
        for broker in ids - {owner}:  # a broker that does not own it answers as validateTopicOwnership does
            reply = get(broker, token, path)
            assert reply.status_code == 307
            assert reply.headers["location"] == f"{owner}/admin/v3/transactions/coordinatorInternalStats/{tc}" \
                                                "?metadata=true&authoritative=" + ("true" if broker == url else "false")
        assert get(owner, token, path).status_code == 200
        shown = cli(home, "-u", f"local:{d}", "transactions", "coordinator-internal-stats", "-c", str(tc))
        assert shown.returncode == 0, shown.stderr  # the client follows the redirect to the owner
        assert f"__transaction_log_{tc}" in shown.stdout
    elsewhere = next(tc for tc, owner in owners.items() if owner != url)
    aborted = cli(home, "-u", f"local:{d}", "transactions", "abort-transaction", "-m", str(elsewhere), "-l", "99")
    assert aborted.returncode == 1 and "not found" in aborted.stderr.lower()  # the owner's answer, POST redirected
    assert "redirect" not in aborted.stderr
    listed = cli(home, "-u", f"local:{d}", "transactions", "coordinators-list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert {c["id"]: c["brokerServiceUrl"].replace("pulsar://", "http://") for c in json.loads(listed.stdout)} == owners
    topic = "public/default/not-there"
    owner = owner_url(url, token, topic)
    stats = f"/admin/v3/transactions/transactionBufferStats/{topic}"
    assert {get(b, token, stats).status_code for b in ids - {owner}} == {307}
    assert get(owner, token, stats).status_code == 404  # the owner itself says the topic is not there


def test_each_broker_says_which_bundles_it_owns_and_a_fresh_client_sends_topic_calls_to_their_owners(cluster3):
    """``ownedNamespaces`` as Pulsar's BrokersBase answers it (asked of another broker: a 307 there, validateBrokerName),
    and HttpAdmin's prediction from it: for every topic a lookup places, the owner it enters at is the owner."""
    from txnadmin.admin.http import HttpAdmin

    home, d, url, token = cluster3
    listed = brokers(d)
    topics = [f"persistent://public/default/spread-{i}" for i in range(40)]
    owners = {t: owner_url(url, token, t.removeprefix("persistent://")) for t in topics}  # a lookup places them
    assert len(set(owners.values())) > 1
    owned = {}
    for b in listed:
        path = f"/admin/v2/brokers/standalone/{b['id']}/ownedNamespaces"
        elsewhere = next(o for o in listed if o is not b)
        moved = get(elsewhere["url"], token, path + "?x=1")
        assert moved.status_code == 307 and moved.headers["location"] == f"{b['url']}{path}?x=1"
        reply = get(b["url"], token, path)
        assert reply.status_code == 200, reply.text
        owned[b["url"]] = reply.json()
        assert all(s == {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
                   for s in owned[b["url"]].values())
    assert sum(map(len, owned.values())) == len(set().union(*owned.values()))  # each bundle has one owner
    assert get(url, token, "/admin/v2/brokers/elsewhere/x:1/ownedNamespaces").status_code == 404
    assert get(url, token, "/admin/v2/brokers/standalone/nonsense/ownedNamespaces").status_code == 500
    assert httpx.get(f"{url}/admin/v2/brokers/standalone/{listed[0]['id']}/ownedNamespaces",
                     timeout=10).status_code == 401
    with HttpAdmin(url, token=token) as admin:
        for elsewhere_topic in [t for t in topics if owners[t] != url][:2]:
            with pytest.raises(NotFoundError):  # no such topic, says its owner, after a redirect: at the second the
                admin.topic_stats(elsewhere_topic)  # client asks the brokers what they own
        predicted = {t: admin._bundles.owner(t) if admin._bundles else None for t in topics}
    assert predicted == owners


def test_the_lookup_and_lifecycle_routes_need_the_token_and_refuse_bad_input(cluster3):
    home, d, url, token = cluster3
    victim = brokers(d)[1]["id"]
    assert httpx.get(f"{url}/lookup/v2/topic/persistent/public/default/t", timeout=10).status_code == 401
    control = f"{url}/txnadmin/brokers/{victim}"
    assert httpx.post(f"{control}/stop", timeout=10).status_code == 401
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.post(f"{control}/explode", headers=auth, timeout=10).status_code == 404
    assert httpx.post(f"{url}/txnadmin/brokers/127.0.0.1:1/stop", headers=auth, timeout=10).status_code == 404
    bad = httpx.post(f"{control}/start", params={"version": "<b>9</b>"}, headers=auth, timeout=10)
    assert bad.status_code == 400 and "expected a Pulsar version" in bad.json()["reason"]
    assert all(b["running"] for b in brokers(d))  # nothing was stopped or started by any of them


def test_a_dynamic_config_change_reaches_each_broker_after_its_own_watch(cluster3):
    home, d, url, token = cluster3
    flag = "transactionLogBatchedWriteEnabled"
    done = cli(home, "engine", "set", flag, "true", "--dir", str(d))
    assert done.returncode == 0, done.stderr
    first, *late = brokers(d)
    until(lambda: get(first["url"], token, "/admin/v2/brokers/configuration/runtime").json()[flag] == "true",
          "the first broker's watch (no delay)")
    for b in late:  # their watches fire a minute after the change: not yet
        assert get(b["url"], token, "/admin/v2/brokers/configuration/runtime").json()[flag] == "false"


def test_a_broker_stops_its_bundles_move_and_it_restarts_as_a_new_process(tmp_path):
    home, d = tmp_path / "home", tmp_path / "e"
    init(home, d, "--brokers", "3", "--set", "engineBrokerFailoverDelayMillis=300")
    with serving(d, home) as (url, token):
        first = brokers(d)[0]
        owners = {tc: owner_url(url, token, ASSIGN.format(tc)) for tc in range(4)}
        victim = next(b for b in brokers(d)[1:] if b["url"] in owners.values())
        moved = [tc for tc, owner in owners.items() if owner == victim["url"]]
        before = {tc: json.loads(cli(home, "-u", f"local:{d}", "transactions", "coordinator-stats", "-c", str(tc),
                                     "-o", "json").stdout)["recoverStartTime"] for tc in moved}

        stopped = cli(home, "engine", "broker", "stop", str(d), "--broker", victim["id"])
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["running"] is False
        assert not accepts(victim["id"])
        assert victim["id"] not in get(url, token, "/admin/v2/brokers/standalone").json()
        for tc in moved:  # once the failover delay has passed, a survivor owns it, reopened there
            heir = until(lambda tc=tc: (o := owner_url(url, token, ASSIGN.format(tc))) != victim["url"] and o,
                         f"coordinator {tc} moving off the stopped broker")
            shown = cli(home, "-u", f"local:{d}", "transactions", "coordinator-stats", "-c", str(tc), "-o", "json")
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout)["recoverStartTime"] > before[tc]
            assert heir != victim["url"]

        started = cli(home, "engine", "broker", "start", str(d), "--broker", victim["id"], "--version", "4.0.13")
        assert started.returncode == 0, started.stderr
        state = json.loads(started.stdout)
        assert state["running"] is True and state["version"] == "4.0.13"
        assert state["processStartTime"] > victim["processStartTime"]
        assert get(victim["url"], token, "/admin/v2/brokers/version").text == "4.0.13"
        samples = parse_exposition(get(victim["url"], token, "/metrics").text)
        assert process_start_time(samples) == pytest.approx(state["processStartTime"])
        counters = [s.value for s in samples if "bufferedwriter" in s.name and not s.name.endswith("_created")]
        assert counters and not any(counters)  # a new process: its counters start from zero
        assert f"{victim['id']} runs 4.0.13" in cli(home, "-u", f"local:{d}", "upgrade", "--dry-run").stdout

        restarted = cli(home, "engine", "broker", "restart", str(d), "--broker", first["id"])
        assert restarted.returncode == 0, restarted.stderr
        assert json.loads(restarted.stdout)["processStartTime"] > first["processStartTime"]

        unknown = cli(home, "engine", "broker", "stop", str(d), "--broker", "127.0.0.1:1")
        assert unknown.returncode == 3 and victim["id"] in unknown.stderr  # names the brokers there are
        bad = cli(home, "engine", "broker", "start", str(d), "--broker", victim["id"], "--version", "4.x")
        assert bad.returncode == 2 and "4.x" in bad.stderr
        for b in brokers(d)[1:]:
            assert cli(home, "engine", "broker", "stop", str(d), "--broker", b["id"]).returncode == 0
        last = cli(home, "engine", "broker", "stop", str(d), "--broker", first["id"])
        assert last.returncode == 1 and "last one running" in last.stderr
        asked = httpx.post(f"{first['url']}/txnadmin/brokers/{first['id']}/stop", timeout=10,
                           headers={"Authorization": f"Bearer {token}"})
        assert asked.status_code == 409  # the server refuses it too, whoever asks
        assert accepts(first["id"])


def test_rolling_restart_restarts_each_broker_in_turn_under_a_workload(tmp_path):
    home, d = tmp_path / "home", tmp_path / "e"
    init(home, d, "--brokers", "2", "--set", "transactionLogBatchedWriteEnabled=true")
    env = dict(os.environ, TXNADMIN_HOME=str(home))
    run = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "50",
                                       "--fault", "rolling-restart=1", "-o", "json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        listed = until(lambda: (d / "server.json").exists() and brokers(d), "the engine's brokers listening")
        until(lambda: all(b["processStartTime"] != old["processStartTime"]
                          for b, old in zip(brokers(d), listed, strict=True)), "every broker restarted once")
    finally:
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert "rolling-restart: restarted broker" not in err  # -o json keeps stderr to failures and the end
    assert "Traceback" not in err
    one = tmp_path / "one"
    init(home, one)
    refused = cli(home, "engine", "run", str(one), "--duration", "1", "--fault", "rolling-restart=1")
    assert refused.returncode == 2 and "plays one broker" in refused.stderr
