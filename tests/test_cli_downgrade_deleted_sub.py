"""A transactional subscription deleted under `downgrade`, as a real Pulsar broker answers it: its topic stays
loaded, pendingAckStats dereferences the missing subscription (a NullPointerException, HTTP 500) while
pendingAckInternalStats answers 404. Driven through the CLI (subprocesses) against a served engine; the traffic
that trims the stores is driven on the engine itself, in this process, while the CLI polls over HTTP."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from txnadmin.admin.http import HttpAdmin

from engine_helpers import live_batched_entries
from downgrade_helpers import (
    T, T_STORE, TOKEN, TXNADMIN, U, U_STORE, assert_one_line_naming, cli, components_of, proven_done, served_engine,
    traffic_on_u_until_it_ends, until,
)
from http_front import front

pytestmark = pytest.mark.slow  # every test serves an engine through a downgrade: several seconds each

# What a broker sends for an exception no REST handler maps: RestException's plain-text 500 (message, stack trace).
NPE_500 = ("\n --- An unexpected error occurred in the server ---\n\nMessage: Cannot invoke \"org.apache.pulsar.broker."
           "service.persistent.PersistentSubscription.getTransactionPendingAckStats(boolean)\" because the return "
           "value of \"java.util.Map.get(Object)\" is null\n\nStacktrace:\n\njava.lang.NullPointerException: Cannot "
           "invoke \"...getTransactionPendingAckStats(boolean)\"\n\tat org.apache.pulsar.broker.service.persistent."
           "PersistentTopic.getTransactionPendingAckStats(PersistentTopic.java:4321)\n\tat java.base/java.util."
           "concurrent.CompletableFuture$UniApply.tryFire(CompletableFuture.java:646)\n")


def test_a_subscription_deleted_mid_wait_counts_as_deleted_and_the_wait_ends_safe(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url):
        assert cli(url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        # t's store trims (its subscription acknowledges); u's waits for its own acknowledgements.
        until(lambda: components_of(cli(url, "downgrade", "status", "--state", str(state), "-o", "json"))
              [T_STORE]["done"], "t's store done", engine, "t")
        waiter = subprocess.Popen(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", "downgrade", "wait",
                                              "--state", str(state), "--timeout", "90", "--interval", "0.5", "-o",
                                              "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            until(lambda: proven_done(state, T_STORE), "the wait proved t's store done")
            admin = HttpAdmin(url, token=TOKEN)
            admin.delete_subscription(T, "s")
            # As Pulsar answers for a subscription missing from its loaded topic: 500 here, 404 for the internal stats.
            answered = cli(url, "transactions", "pending-ack-stats", "-t", T, "-s", "s")
            assert answered.returncode == 1 and "HTTP 500" in answered.stderr, answered.stderr
            assert cli(url, "transactions", "pending-ack-internal-stats", "-t", T, "-s", "s").returncode == 1
            admin.close()
            # the rest gets done while the wait polls: u's subscription acknowledges and its store trims
            out, err = traffic_on_u_until_it_ends(waiter, engine)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.communicate()
        assert "Traceback" not in err, err
        assert waiter.returncode == 0, err[-2000:]
        report = json.loads(out)
        assert report["safe"] is True
        logs = {c["name"]: c for c in report["components"]}
        assert logs[T_STORE]["done"] is True and logs[T_STORE]["reason"].startswith("store deleted"), logs[T_STORE]
        assert logs[U_STORE]["done"] is True and "newer than LastBatched" in logs[U_STORE]["reason"], logs[U_STORE]
        assert live_batched_entries(engine) == []


def _pulsar_answers_for_u(method: str, path: str, internal: bool):
    """u's subscription missing from its loaded topic, its store still listed (a leftover): Pulsar's 500 for its
    stats, and 404 for its internal stats when ``internal``."""
    if method != "GET" or "/public/default/u/s" not in path:
        return None
    if "/pendingAckStats/" in path:
        return 500, NPE_500, "text/plain"
    if internal and "/pendingAckInternalStats/" in path:
        return 404, json.dumps({"reason": f"{U} not found subscription : s"})
    return None


def test_a_500_for_pending_ack_stats_while_the_store_is_listed_is_never_safe(tmp_path):
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url), front(url, TOKEN) as door:
        assert cli(door.url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        # Now u's stats answer 500 and its internal stats 404, and its store is still listed:
        # not deleted (it may be replayed), not "not loaded" (its topic is loaded), and never safe.
        door.intercepts.append(lambda m, p: _pulsar_answers_for_u(m, p, internal=True))
        polled = cli(door.url, "downgrade", "status", "--state", str(state), "-o", "json")
        u = components_of(polled)[U_STORE]
        assert polled.returncode == 1 and json.loads(polled.stdout)["safe"] is False
        assert u["done"] is False and u["waitingFor"] == "subscription gone, store still listed", u
        assert "HTTP 500" in u["reason"] and "\n" not in u["reason"], u
        assert f"pulsar-admin topics delete {U_STORE}" in u["suggestion"], u
        waited = cli(door.url, "downgrade", "wait", "--state", str(state), "--timeout", "4", "--interval", "0.5",
                     "-o", "json")
        assert waited.returncode == 1 and json.loads(waited.stdout)["safe"] is False, waited.stderr
        assert components_of(waited)[U_STORE]["waitingFor"] == "subscription gone, store still listed"
        text = cli(door.url, "downgrade", "status", "--state", str(state))
        assert text.returncode == 1 and "Traceback" not in text.stderr
        assert [line for line in text.stdout.splitlines() if "HTTP 500" in line], text.stdout
        # start again records around it (nothing of it to reload) and leaves the verdict to status: still not done
        again = cli(door.url, "downgrade", "start", "--yes", "--state", str(state), "-o", "json")
        assert again.returncode == 0, again.stderr
        polled = cli(door.url, "downgrade", "status", "--state", str(state), "-o", "json")
        assert polled.returncode == 1 and components_of(polled)[U_STORE]["waitingFor"] == (
            "subscription gone, store still listed")
        # The internal stats answer too (a broker failing, not a subscription gone): start cannot record, exit 3,
        # one line naming the store and the status.
        door.intercepts[:] = [lambda m, p: _pulsar_answers_for_u(m, p, internal=False)]
        failed = cli(door.url, "downgrade", "start", "--yes", "--state", str(state))
        assert failed.returncode == 3, failed.stderr
        assert_one_line_naming(failed.stderr, U_STORE, "HTTP 500", "an unexpected error occurred in the server")


def test_a_deleted_store_costs_a_poll_one_call_not_the_stats_500_and_its_retries(tmp_path):
    """Gone from the listing, a store is confirmed deleted by its internal stats' 404 alone: its stats would answer
    a 500 that HttpAdmin retries with backoff, on every poll, for every store deleted since recording."""
    state = tmp_path / "s.json"
    with served_engine(tmp_path) as (engine, url), front(url, TOKEN) as door:
        assert cli(door.url, "downgrade", "start", "--yes", "--state", str(state)).returncode == 0
        # proven done first: later polls then ask only its recoverStartTime (pendingAckStats), not its ledgers
        until(lambda: components_of(cli(door.url, "downgrade", "status", "--state", str(state), "-o", "json"))
              [T_STORE]["done"], "t's store done", engine, "t")
        cli(door.url, "downgrade", "wait", "--state", str(state), "--timeout", "2", "--interval", "0.5")
        assert proven_done(state, T_STORE)
        engine.delete_subscription(T, "s")
        door.seen.clear()
        polled = cli(door.url, "downgrade", "status", "--state", str(state), "-o", "json")
        t = components_of(polled)[T_STORE]
        assert t["done"] is True and t["reason"].startswith("store deleted"), t
        asked = [path for method, path in door.seen if "/public/default/t/s" in path]
        assert asked and all("/pendingAckInternalStats/" in path for path in asked), asked
        assert len(asked) == 1, asked


def test_transactions_pending_ack_stats_on_a_deleted_subscription_prints_one_line(tmp_path):
    with served_engine(tmp_path) as (engine, url), front(url, TOKEN) as door:
        engine.delete_subscription(U, "s")
        # The served engine answers as a broker: a plain-text 500 (RestException's form) here, a JSON 404 there.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        raw = httpx.get(f"{url}/admin/v3/transactions/pendingAckStats/public/default/u/s", headers=auth)
        assert raw.status_code == 500 and raw.headers["content-type"].startswith("text/plain"), raw.text
        assert raw.text.lstrip().startswith("--- An unexpected error occurred in the server ---\n\nMessage: "), raw.text
        raw = httpx.get(f"{url}/admin/v3/transactions/pendingAckInternalStats/public/default/u/s", headers=auth)
        assert raw.status_code == 404 and raw.json()["reason"], raw.text
        served = cli(url, "transactions", "pending-ack-stats", "-t", U, "-s", "s")
        assert served.returncode == 1 and served.stdout == "", served.stdout
        # pulsar-admin's form: the reason, a blank line, "Reason: " and the reason again
        reason, blank, again = served.stderr.rstrip("\n").split("\n")
        assert blank == "" and again == f"Reason: {reason}" and "HTTP 500" in reason and "Subscription s of" in reason
        # the body a real broker sends (plain text with its stack trace): its message, on one line, no trace
        door.intercepts.append(lambda m, p: _pulsar_answers_for_u(m, p, internal=True))
        broker = cli(door.url, "transactions", "pending-ack-stats", "-t", U, "-s", "s")
        assert broker.returncode == 1 and "Traceback" not in broker.stderr
        reason, blank, again = broker.stderr.rstrip("\n").split("\n")
        assert blank == "" and again == f"Reason: {reason}", broker.stderr
        assert reason.startswith("an unexpected error occurred in the server: Cannot invoke"), reason
        assert "Stacktrace" not in broker.stderr and "PersistentTopic.java" not in broker.stderr
