"""The exporter's poll against a broker stand-in, for conditions the engine cannot produce honestly: a target
without a clock, a coordinator that does not answer, hundreds of recovering buffers, a login page. Each value is
checked against what doctor or find-hanging say of the same stand-in; what cannot be proven must be absent, never 0."""

from __future__ import annotations

import threading

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from txnadmin.admin.hanging import find_hanging
from txnadmin.admin.http import HttpAdmin
from txnadmin.procedures import doctor
from txnadmin.procedures.exporter import METRICS, PREFIX, Collector, Exporter, Options, PollError, poll

from broker_standin import BrokerStandIn, healthy_cluster, open_transaction

TOPIC = "persistent://public/default/orders"
MARGIN = {"stuck-margin": 0.0, "ending": 0.0}


def _options(**kw) -> Options:
    return Options(thresholds=doctor.parse_thresholds([f"{k}={v:g}ms" for k, v in MARGIN.items()]), **kw)


def _series(snapshot, name: str) -> dict[tuple, float]:
    return {labels: v for labels, v in snapshot.values.get(name, ())}


def test_an_overdue_transaction_is_counted_as_doctor_and_find_hanging_count_it():
    standin = BrokerStandIn()
    open_transaction(standin.state, "(0,3)", opened_ago_ms=3_600_000, timeout_ms=10_000, produced=[TOPIC], owner="o")
    open_transaction(standin.state, "(1,4)", opened_ago_ms=120_000, timeout_ms=10_000, status="COMMITTING")
    options = _options(max_transaction_timeout_minutes=30)
    with standin.admin() as admin:
        snap = poll(admin, standin.base, options)
        report = doctor.run(admin, standin.base, ["stuck-transactions"], options.thresholds)
        hanging = find_hanging(admin, 30, now_ms=standin.state["now"])
    critical = [f for f in report.findings if f.severity == "critical"]
    assert _series(snap, "transactions_past_timeout") == {
        (("coordinator", "0"),): sum(1 for f in critical if f.evidence["status"] == "OPEN"),
        (("coordinator", "1"),): 0}
    ending = _series(snap, "transactions_stuck_ending")
    assert ending[(("coordinator", "1"), ("state", "COMMITTING"))] == \
        sum(1 for f in critical if f.evidence["status"] == "COMMITTING") and sum(ending.values()) == 1
    assert sum(_series(snap, "transactions_hanging").values()) == len(hanging) == 1
    assert _series(snap, "oldest_open_transaction_age_seconds")[(("coordinator", "0"),)] == 3600
    assert _series(snap, "max_read_position_held_seconds") == {(("topic", TOPIC),): 3600}
    assert _series(snap, "transactions_open")[(("coordinator", "1"), ("state", "COMMITTING"))] == 1
    assert not snap.missing


def test_without_the_targets_clock_no_age_or_timeout_is_served_and_the_poll_says_so():
    standin = BrokerStandIn()
    standin.state["date_header"] = False
    open_transaction(standin.state, "(0,3)", opened_ago_ms=3_600_000, timeout_ms=10_000, produced=[TOPIC])
    with standin.admin() as admin:
        snap = poll(admin, standin.base, _options())
    for name in ("oldest_open_transaction_age_seconds", "transactions_past_timeout", "transactions_stuck_ending",
                 "transactions_hanging", "max_read_position_held_seconds"):
        assert name not in snap.values, name  # a 0 here would pass for "nothing overdue"
    assert _series(snap, "transactions_open")[(("coordinator", "0"), ("state", "OPEN"))] == 1
    assert any("Date" in m for m in snap.missing), snap.missing


def test_a_coordinator_that_does_not_answer_has_no_series_rather_than_zeros():
    standin = BrokerStandIn()
    standin.state["coordinators"][1].update(status=500, reason="Internal Server Error")
    open_transaction(standin.state, "(0,3)", opened_ago_ms=3_600_000, timeout_ms=10_000)
    with standin.admin() as admin:
        snap = poll(admin, standin.base, _options())
    for name in ("transactions_open", "oldest_open_transaction_age_seconds", "transactions_past_timeout",
                 "transactions_hanging", "transactions_stuck_ending"):
        coordinators = {dict(labels)["coordinator"] for labels in _series(snap, name)}
        assert coordinators == {"0"}, (name, coordinators)
    assert any("coordinator 1" in m for m in snap.missing), snap.missing


def test_recovering_buffers_are_all_counted_and_only_the_top_n_ages_are_kept():
    state = healthy_cluster()
    template = state["topics"][TOPIC]
    for i in range(40):
        topic = f"persistent://public/default/stuck-{i:02d}"
        state["topics"][topic] = {**template, "subscriptions": {},
                                  "buffer": {**template["buffer"], "state": "Initializing", "recoverEndTime": 0,
                                             "recoverStartTime": state["now"] - (i + 1) * 60_000}}
    standin = BrokerStandIn(state)
    with standin.admin() as admin:
        snap = poll(admin, standin.base, _options(top=5))
        report = doctor.run(admin, standin.base, ["recovery"], doctor.parse_thresholds(["recovery=0s"]))
    assert _series(snap, "transaction_buffers_recovering")[()] == 40 == \
        sum(1 for f in report.findings if f.check == "recovery" and f.subject.startswith("persistent://"))
    ages = _series(snap, "transaction_buffer_recovery_age_seconds")
    assert sorted(dict(l)["topic"] for l in ages) == [f"persistent://public/default/stuck-{i}" for i in range(35, 40)]
    assert sorted(ages.values()) == [(i + 1) * 60.0 for i in range(35, 40)]


def test_a_login_page_is_a_failed_poll_not_a_healthy_cluster():
    def html(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html><body>Sign in</body></html>", headers={"Content-Type": "text/html"})

    with HttpAdmin("http://sso.example", transport=httpx.MockTransport(html), retry_backoff=0) as admin:
        with pytest.raises(PollError, match="cannot read the target"):
            poll(admin, "http://sso.example", _options())


def test_a_scrape_serves_the_last_snapshot_with_help_and_type_for_each_metric():
    standin = BrokerStandIn()
    calls = []

    def poller(_stop: threading.Event):
        calls.append(1)
        if len(calls) > 1:
            raise PollError("the stand-in went away")
        with standin.admin() as admin:
            return poll(admin, standin.base, _options())

    exporter = Exporter(poller, standin.base, say=lambda _line: None)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(exporter))
    before = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    # nothing polled yet: no zeros, only the exporter's own series (the last success holds its start time)
    assert set(before) == {"txnadmin_poll_age_seconds", "txnadmin_poll_errors",
                           "txnadmin_last_poll_success_timestamp_seconds"}
    exporter.poll_once()
    exporter.poll_once()  # fails: the first poll's values stay
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert families["txnadmin_poll_errors"].type == "counter"
    assert [s.value for s in families["txnadmin_poll_errors"].samples if s.name.endswith("_total")] == [1]
    assert "txnadmin_transactions_open" in families and "txnadmin_last_poll_success_timestamp_seconds" in families
    for name, family in families.items():
        kind, help_text = METRICS[name.removeprefix(PREFIX)]
        assert (family.type, family.documentation) == (kind, help_text), name
