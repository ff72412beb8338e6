"""`txnadmin metrics`: shares and recommendations from real expositions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.engine.writer_metrics import BufferedWriterMetrics
from txnadmin.metrics import analyze_registry

runner = CliRunner()
FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def run(*args):
    result = runner.invoke(app, ["metrics", *args, "-o", "json"])
    return result, (json.loads(result.stdout) if result.exit_code == 0 else None)


def test_saved_broker_exposition_with_implemented_names():
    result, out = run(str(FIXTURES / "broker-implemented.prom"))
    assert result.exit_code == 0, result.output
    tc, ack = out["components"]
    assert tc["metricNames"] == "implemented" and tc["flushes"] == 990
    assert round(tc["triggerShares"]["max_delay"], 3) == round(970 / 990, 3)
    assert tc["recordsPerEntry"]["mean"] == 3.0
    assert "98 % of flushes are by delay with 3.0 records on average: batching buys little" in tc["recommendation"]["reason"]
    assert tc["recommendation"]["set"] == {"transactionLogBatchedWriteMaxDelayInMillis": 5}
    assert "10 flushes were forced by records of at least max size" in tc["recommendation"]["reason"]
    assert ack["recommendation"]["set"] == {"transactionPendingAckBatchedWriteMaxRecords": 1024}
    assert ack["recordsPerEntry"]["mean"] == 750.0


def test_pip160_names_are_accepted_and_named():
    result, out = run(str(FIXTURES / "broker-pip160.prom"))
    assert result.exit_code == 0, result.output
    (tc,) = out["components"]
    assert tc["metricNames"] == "pip-160" and tc["flushes"] == 100  # summed over both coordinators
    assert tc["triggerShares"]["max_records"] == 1.0 and tc["recordsPerEntry"]["mean"] == 80.0


def test_config_thresholds_are_used(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionPendingAckBatchedWriteMaxRecords=2000\n")
    _, out = run(str(FIXTURES / "broker-implemented.prom"), "--config", str(conf))
    ack = out["components"][1]["recommendation"]
    assert ack["set"] == {"transactionPendingAckBatchedWriteMaxRecords": 4000} and not ack["assumedDefaults"]


def test_an_exposition_generated_by_prometheus_client_round_trips():
    registry = CollectorRegistry()
    metrics = BufferedWriterMetrics("pulsar_txn_tc", registry, broker="b:8080")
    for _ in range(8):
        metrics.flushed("max_records", 512, 60_000, 0.5)
    for _ in range(2):
        metrics.flushed("max_delay", 100, 9_000, 1.0)
    reports = analyze_registry(registry)
    tc = next(r for r in reports if r.component == "transaction coordinator log")
    assert tc.flushes == 10 and tc.trigger_shares()["max_records"] == 0.8
    assert tc.records.mean == (8 * 512 + 2 * 100) / 10
    assert tc.recommendation["set"] == {"transactionLogBatchedWriteMaxRecords": 1024}
    text = generate_latest(registry).decode()
    assert "pulsar_txn_tc_bufferedwriter_batch_records_bucket" in text


def test_a_rehearsal_engine_through_its_server(tmp_path):
    import threading

    from txnadmin.engine.engine import Engine
    from txnadmin.engine.manage import init_engine
    from txnadmin.engine.workload import WorkloadSpec, run_workload
    from txnadmin.server.run import BackgroundServer

    init_engine(tmp_path / "e", {"transactionCoordinatorCount": "2", "transactionLogBatchedWriteEnabled": "true",
                                 "transactionPendingAckBatchedWriteEnabled": "true"})
    engine = Engine(tmp_path / "e")
    server = BackgroundServer(engine, token="t0k").start()
    try:
        run_workload(engine, WorkloadSpec(rate=0, concurrency=8, duration_s=1.0), threading.Event())
        result, out = run(f"local:{tmp_path / 'e'}")
    finally:
        server.stop()
        engine.close()
    assert result.exit_code == 0, result.output
    tc = out["components"][0]
    assert tc["flushes"] > 0 and tc["recordsPerEntry"]["mean"] >= 1 and tc["recommendation"]["reason"]


def test_unreadable_or_empty_sources_exit_3(tmp_path):
    result = runner.invoke(app, ["metrics", str(tmp_path / "none.prom")])
    assert result.exit_code == 3 and "cannot read" in result.stderr
    (tmp_path / "other.prom").write_text("# TYPE up gauge\nup 1\n")
    result = runner.invoke(app, ["metrics", str(tmp_path / "other.prom")])
    assert result.exit_code == 3 and "pulsar_txn_tc_bufferedwriter_*" in result.stderr
    result = runner.invoke(app, ["metrics", f"local:{tmp_path}"])
    assert result.exit_code == 3 and "no running engine" in result.stderr


def _exposition() -> str:
    return (FIXTURES / "broker-implemented.prom").read_text()


def test_a_metrics_url_keeps_the_shared_retry_policy_and_honours_retry_after():
    """`metrics URL` goes through the same HTTP policy as every admin call: a 429 with Retry-After is waited out."""
    from test_http_faults import Misbehaving

    hits: list[str] = []

    def reply(path, headers):
        hits.append(headers.get("authorization", ""))
        return (429, "slow down", {"Retry-After": "1"}) if len(hits) == 1 else (200, _exposition(), {})

    server = Misbehaving(reply)
    try:
        result = runner.invoke(app, ["--request-timeout", "10", "metrics", f"{server.url}/metrics", "--token",
                                     "metrics-secret", "-o", "json"])
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["components"][0]["flushes"] == 990
    assert hits == ["Bearer metrics-secret"] * 2


def test_a_metrics_url_is_bounded_by_request_timeout_even_when_the_body_trickles():
    from test_http_policy import _trickler

    sock, url = _trickler(_exposition().encode(), 0.3)  # thousands of bytes at 0.3 s each
    try:
        result = runner.invoke(app, ["--request-timeout", "1", "metrics", f"{url}/metrics"])
    finally:
        sock.close()
    assert result.exit_code == 3
    assert "within --request-timeout 1 s" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_metrics_url_does_not_follow_a_redirect_off_the_cluster():
    """Credentials and the reading both stay with the host named (the admin calls' redirect rule)."""
    from test_http_faults import Misbehaving

    elsewhere = Misbehaving((200, _exposition(), {}))
    named = Misbehaving(lambda path, headers: (307, "", {"Location": f"http://localhost:{elsewhere.port}/metrics"})
                        if path.startswith("/metrics") else (404, "", {}))
    try:
        result = runner.invoke(app, ["metrics", f"{named.url}/metrics", "--token", "metrics-secret"])
    finally:
        named.close()
        elsewhere.close()
    assert result.exit_code == 3 and "refusing a redirect" in result.stderr, result.output
    assert elsewhere.hits == []


# -- the engine's own /metrics: what tells one broker process from the next ---------------------------------------

def _families(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def _process_start(text: str) -> float:
    family = _families(text)["process_start_time_seconds"]
    [sample] = family.samples
    assert family.type == "gauge" and sample.labels == {"cluster": "standalone"}, family
    return sample.value


def test_a_served_engine_reports_its_process_start_and_labels_its_counters_with_its_broker(tmp_path):
    """Through `txnadmin serve`: /metrics carries process_start_time_seconds (when this engine opened, a new value
    after a restart) and every flush counter of both writers is labelled with the host of the broker id the engine
    lists as active (Pulsar labels with the advertised address, without the port); the runtime configuration says
    metricsBufferResponse and transactionCoordinatorEnabled as a broker does."""
    import httpx
    from serve_helpers import serving

    from txnadmin.admin.http import HttpAdmin
    from txnadmin.engine.manage import init_engine
    from txnadmin.engine.writer_metrics import TRIGGERS

    engine_dir = tmp_path / "e"
    init_engine(engine_dir, {"transactionCoordinatorCount": "2", "engineBrokerServiceUrl": "pulsar://127.0.0.7:6651",
                             "transactionLogBatchedWriteEnabled": "true"})
    starts = []
    for _ in range(2):  # the second round is a restart of the same engine
        before = time.time()
        with serving(engine_dir, tmp_path) as (url, token):
            after = time.time()
            text = httpx.get(f"{url}/metrics", timeout=30).text
            with HttpAdmin(url, token=token) as admin:
                brokers = admin.active_brokers("standalone")
                runtime = admin.runtime_config()
        start = _process_start(text)
        assert before <= start <= after, (before, start, after)
        starts.append(start)
        assert brokers == ["127.0.0.7:6651"]
        families = _families(text)
        for prefix in ("pulsar_txn_tc", "pulsar_txn_pending_ack_store"):
            for trigger in TRIGGERS:
                samples = families[f"{prefix}_bufferedwriter_flush_trigger_{trigger}"].samples
                assert samples and {s.labels["broker"] for s in samples} == {brokers[0].rsplit(":", 1)[0]}, samples
        assert runtime["metricsBufferResponse"] == "false" and runtime["transactionCoordinatorEnabled"] == "true"
    assert starts[1] > starts[0]


def test_a_stopped_engine_s_view_reports_no_process_start(tmp_path):
    """`-u local:DIR` of a stopped engine reads a view: no broker process runs there, so nothing claims one."""
    from txnadmin.admin.local import LocalAdmin
    from txnadmin.engine.engine import Engine
    from txnadmin.engine.manage import init_engine

    init_engine(tmp_path / "e", {"transactionCoordinatorCount": "1"})
    Engine(tmp_path / "e", maintenance=False).close()
    with LocalAdmin(tmp_path / "e", read_mostly=True) as view:  # what `-u local:DIR` opens on a stopped engine
        text = view.metrics_text()
    assert "pulsar_txn_tc_bufferedwriter_flush_trigger_max_delay_total" in text
    assert "process_start_time_seconds" not in text


def test_a_one_broker_engine_can_leave_its_process_start_out_of_its_metrics(tmp_path):
    """engineBrokersWithoutProcessStart=0: the one broker (broker 0) exports no process_start_time_seconds, as
    behind a relabelling that drops it, and still its CPU seconds and its flush counters."""
    import httpx
    from serve_helpers import serving

    from txnadmin.engine.manage import init_engine

    init_engine(tmp_path / "e", {"transactionCoordinatorCount": "1", "engineBrokersWithoutProcessStart": "0"})
    with serving(tmp_path / "e", tmp_path) as (url, token):
        families = _families(httpx.get(f"{url}/metrics", timeout=30).text)
    assert "process_start_time_seconds" not in families
    assert {"process_cpu_seconds", "pulsar_txn_tc_bufferedwriter_flush_trigger_max_delay"} <= set(families)


@pytest.mark.parametrize("buffered", [True, False])
def test_metrics_buffer_response_serves_one_rendering_per_stats_period(tmp_path, buffered):
    """metricsBufferResponse=true: scrapes within one managedLedgerStatsPeriodSeconds slot get the rendering of the
    slot's first scrape, so flushes after it do not show (Pulsar's PrometheusMetricsGenerator); false (Pulsar's
    default): every scrape is fresh. The runtime configuration says which."""
    import httpx

    from txnadmin.admin.http import HttpAdmin
    from txnadmin.engine.engine import Engine
    from txnadmin.engine.manage import init_engine
    from txnadmin.server.run import BackgroundServer

    period = 1_000_000
    init_engine(tmp_path / "e", {"transactionCoordinatorCount": "1", "transactionLogBatchedWriteEnabled": "true",
                                 "metricsBufferResponse": str(buffered).lower(),
                                 "managedLedgerStatsPeriodSeconds": str(period)})
    engine = Engine(tmp_path / "e")
    server = BackgroundServer(engine, token="t0k", record=False).start()
    metric = "pulsar_txn_tc_bufferedwriter_flush_trigger_max_delay"
    try:
        for _attempt in range(3):  # a slot boundary between the two scrapes (once in 11 days) makes them differ
            slot = int(time.time()) // period
            first = httpx.get(f"{server.url}/metrics", timeout=30).text
            for _ in range(3):
                engine.commit(engine.begin())
            second = httpx.get(f"{server.url}/metrics", timeout=30).text
            if int(time.time()) // period == slot:
                break
        with HttpAdmin(server.url, token="t0k") as admin:
            runtime = admin.runtime_config()
    finally:
        server.stop()
        engine.close()
    counts = [next(s.value for s in _families(text)[metric].samples if s.name.endswith("_total"))
              for text in (first, second)]
    assert runtime["metricsBufferResponse"] == str(buffered).lower()
    if buffered:
        assert second == first and counts[0] == counts[1], counts
    else:
        assert counts[1] > counts[0], counts
