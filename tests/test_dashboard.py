"""examples/grafana/txnadmin-transactions.json: every panel's query reads only listed names, parses, and returns data.

The Pulsar panels are checked against a real Prometheus server (Debian's `prometheus` package) scraping the engine's
/metrics while `engine run` drives a workload, beside a second engine whose transaction buffer never recovers (so
the failure series exist), with the template variables resolved from Prometheus and substituted as Grafana does.
The exporter's panels are checked with promtool on exporter series, and against the real server too once
`txnadmin exporter` exists as a command. The same server loads the alert rules: each must evaluate without error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from pulsar_metric_names import TXNADMIN_EXPORTER_METRICS, family_of, metric_names_in

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "examples" / "grafana" / "txnadmin-transactions.json"
RULES = ROOT / "examples" / "prometheus" / "txnadmin-alerts.yml"
TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
INSTALL_HINT = ("{tool} not found on PATH: install Debian's prometheus package (`apt-get install -y prometheus`, as "
                "root), or run `make test`, which installs it when run as root")
SCRAPE_S = 1
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(INSTALL_HINT.format(tool=name))
    return found


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _targets() -> list[tuple[str, str]]:
    """(panel title, query) for every query of every panel."""
    return [(p["title"], t["expr"]) for p in _dashboard()["panels"] if p["type"] != "row" for t in p["targets"]]


def _query_variables() -> list[dict]:
    return [v for v in _dashboard()["templating"]["list"] if v["type"] == "query"]


def _is_exporter(expr: str) -> bool:
    return any(n.startswith("txnadmin_") for n in metric_names_in(expr))


def substitute(expr: str, values: dict[str, str], rate_interval: str) -> str:
    """Grafana's interpolation before a query is sent: ``$__rate_interval`` and each ``$var``/``${var}``."""
    expr = expr.replace("$__rate_interval", rate_interval)

    def one(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        assert name in values, f"{expr}: variable ${name} is not defined by the dashboard"
        return values[name]

    return VARIABLE.sub(one, expr)


def as_regex(values: list[str]) -> str:
    """A multi-value variable with every value selected, as Grafana writes it into a Prometheus query."""
    escaped = [re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", v) for v in sorted(values)]
    return "(" + "|".join(escaped) + ")"


# -- the dashboard as a file ---------------------------------------------------------------------------------------

def test_every_panel_has_queries_with_unique_ids_and_defined_variables():
    board = _dashboard()
    assert board["uid"] and board["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    defined = {v["name"] for v in board["templating"]["list"]}
    for panel in board["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            used = {a or b for a, b in VARIABLE.findall(target["expr"])} - {"__rate_interval"}
            assert used <= defined, (panel["title"], used - defined)


def test_every_name_a_panel_reads_is_listed_and_both_kinds_are_there():
    used: set[str] = set()
    for title, expr in _targets():
        names = metric_names_in(expr)
        assert names, (title, expr)
        for name in names:
            if name.startswith("txnadmin_"):
                assert name in TXNADMIN_EXPORTER_METRICS, (title, name)
            else:
                assert family_of(name) is not None, f"{title}: {name} is not on Pulsar's list"
        used |= names
    families = {f.name for n in used if (f := family_of(n)) is not None}
    # coordinator, pending-ack, buffered writer, transaction buffer and snapshot segments, and the exporter
    for needed in ("pulsar_txn_active_count", "pulsar_txn_committed_total", "pulsar_txn_tp_commit_latency",
                   "pulsar_txn_tc_bufferedwriter_batch_records", "pulsar_txn_tb_active_total",
                   "pulsar_txn_tb_snapshot_index_total", "pulsar_txn_tb_snapshot_segment_op_total"):
        assert needed in families, needed
    assert set(TXNADMIN_EXPORTER_METRICS) <= used, set(TXNADMIN_EXPORTER_METRICS) - used


# -- the exporter's panels under promtool -------------------------------------------------------------------------

EXPORTER_SERIES = {
    'txnadmin_transactions_open{coordinator="0",state="OPEN"}': "3x20",
    'txnadmin_transactions_open{coordinator="0",state="COMMITTING"}': "1x20",
    'txnadmin_oldest_open_transaction_age_seconds{coordinator="0"}': "0+15x20",
    'txnadmin_transactions_past_timeout{coordinator="0"}': "1x20",
    'txnadmin_transactions_hanging{coordinator="0"}': "1x20",
    'txnadmin_transactions_stuck_ending{coordinator="0",state="COMMITTING"}': "1x20",
    "txnadmin_transaction_buffers_recovering": "1x20",
    'txnadmin_transaction_buffer_recovery_age_seconds{topic="persistent://public/default/stalled"}': "0+15x20",
    'txnadmin_max_read_position_held_seconds{topic="persistent://public/default/orders"}': "0+15x20",
    "txnadmin_downgrade_checklist_loaded": "1x20",
    'txnadmin_downgrade_logs{status="done"}': "2x20",
    'txnadmin_downgrade_waiting_logs{reason="batched entries live"}': "1x20",
    'txnadmin_batching_enabled{broker="broker-1:8080",flag="transactionLogBatchedWriteEnabled"}': "0x20",
    'txnadmin_doctor_findings{check="stuck-transactions",severity="critical"}': "4x20",
    "txnadmin_poll_age_seconds": "1x20",
    "txnadmin_poll_duration_seconds": "0.2x20",
    "txnadmin_poll_errors_total": "0+1x20",
    "txnadmin_last_poll_success_timestamp_seconds": "0+15x20",
}


def test_the_exporter_panels_return_data_on_exporter_series(tmp_path):
    """Each exporter query, variables substituted, returns at least one series from the exporter's names (promtool:
    ``count(q) > bool 0`` is 1 only when ``q`` returns something); a query that returns nothing fails."""
    queries = [(title, expr) for title, expr in _targets() if _is_exporter(expr)]
    assert queries
    values = {v["name"]: ".*" for v in _query_variables()}
    cases = {"interval": "15s",
             "input_series": [{"series": s, "values": v} for s, v in EXPORTER_SERIES.items()],
             "promql_expr_test": [{"expr": f"count({substitute(expr, values, '1m')}) > bool 0", "eval_time": "5m",
                                   "exp_samples": [{"labels": "{}", "value": 1}]} for _, expr in queries]}
    (tmp_path / "rules.yml").write_text("groups: []\n")
    spec = tmp_path / "panels.test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "tests": [cases]}, sort_keys=False))
    result = subprocess.run([_tool("promtool"), "test", "rules", str(spec)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# -- a real Prometheus --------------------------------------------------------------------------------------------

def _exporter_command() -> list[str] | None:
    """`txnadmin exporter`'s argv prefix when the command exists (the exporter ships from another branch)."""
    probe = subprocess.run(TXNADMIN + ["exporter", "--help"], capture_output=True, text=True, timeout=60)
    return TXNADMIN if probe.returncode == 0 else None


def _failing_engine(directory: Path):
    """An engine whose transaction buffer never finishes recovering, with one commit and one abort refused by it:
    the failure series a broker creates only when a request fails."""
    from engine_helpers import open_engine
    from txnadmin.engine.topic import TransactionBufferNotReady

    topic = "persistent://public/default/never-recovers"
    engine = open_engine(directory, transactionCoordinatorCount=1)
    held, dropped = engine.begin(600_000), engine.begin(600_000)
    engine.produce(held, topic, b"held")
    engine.produce(dropped, topic, b"dropped")
    engine.stall_topic_recovery(topic)
    for txn, commit in ((held, True), (dropped, False)):
        with pytest.raises(TransactionBufferNotReady):
            engine.end_transaction(txn, commit)
    return engine


def _get(url: str, path: str, **params) -> dict:
    reply = httpx.get(f"{url}{path}", params=params, timeout=10)
    body = reply.json()
    assert reply.status_code == 200 and body["status"] == "success", (path, params, reply.text[:500])
    return body["data"]


def _resolve_variables(prom: str) -> dict[str, str]:
    """Each query variable's values from Prometheus (label_values(selector, label)), in dashboard order, every
    value selected: what Grafana substitutes with "All" picked and no custom all value."""
    values: dict[str, str] = {}
    for var in _query_variables():
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
        assert match, var["definition"]
        selector = substitute(match.group(1), values, "1m")
        series = _get(prom, "/api/v1/series", **{"match[]": selector, "start": str(time.time() - 300)})
        found = sorted({s[match.group(2)] for s in series if match.group(2) in s})
        assert found, f"variable ${var['name']} resolves to nothing: {selector}"
        values[var["name"]] = as_regex(found)
    return values


def _has_data(prom: str, query: str) -> bool:
    now = time.time()
    data = _get(prom, "/api/v1/query_range", query=query, start=str(now - 60), end=str(now), step="1")
    return any(series["values"] for series in data["result"])


def _wait_for(what: str, check, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while True:
        missing = check()
        if not missing:
            return
        if time.monotonic() > end:
            pytest.fail(f"{what}: {missing}")
        time.sleep(1)


@pytest.mark.slow
def test_every_panel_returns_data_from_a_real_prometheus(tmp_path):
    from txnadmin.server.run import BackgroundServer, free_port

    prometheus = _tool("prometheus")
    engine_dir = tmp_path / "engine"
    env = dict(os.environ, TXNADMIN_HOME=str(tmp_path / "home"))
    subprocess.run(TXNADMIN + ["engine", "init", str(engine_dir), "-c", "2",
                               "--set", "transactionLogBatchedWriteEnabled=true",
                               "--set", "transactionPendingAckBatchedWriteEnabled=true",
                               "--set", "transactionBufferSegmentedSnapshotEnabled=true",
                               "--set", "transactionBufferSnapshotSegmentSize=80",
                               "--set", "transactionBufferSnapshotMinTimeInMillis=1000"],
                   check=True, capture_output=True, env=env, timeout=120)
    stopping: list = []
    logs = (tmp_path / "logs").open("w")
    try:
        run = subprocess.Popen(TXNADMIN + ["engine", "run", str(engine_dir), "--duration", "0", "--rate", "60",
                                           "--concurrency", "4", "--abort-ratio", "0.3", "--timeout-ratio", "0.05",
                                           "--txn-timeout-ms", "1500", "-o", "json"],
                               stdout=subprocess.DEVNULL, stderr=logs, env=env)
        stopping.append(run)
        _wait_for("engine run never served", lambda: [] if (engine_dir / "server.json").exists() else ["no url"], 60)
        workload = json.loads((engine_dir / "server.json").read_text())["url"].removeprefix("http://")
        failing = BackgroundServer(_failing_engine(tmp_path / "failing"), record=False).start()
        stopping.append(failing)
        jobs = [{"job_name": "pulsar", "static_configs": [{"targets": [workload, failing.url.removeprefix("http://")]}]}]
        exporter = _exporter_command()
        exporter_url = ""
        if exporter is not None:  # after the exporter's merge: its panels against its own /metrics too
            port = free_port()
            exporter_url = f"http://127.0.0.1:{port}"
            help_text = subprocess.run(exporter + ["exporter", "--help"], capture_output=True, text=True).stdout
            extra = ["--doctor"] if "--doctor" in help_text else []
            proc = subprocess.Popen(exporter + ["-u", f"local:{engine_dir}", "exporter", "--host", "127.0.0.1",
                                                "--port", str(port), "--interval", "1", *extra],
                                    stdout=subprocess.DEVNULL, stderr=logs, env=env)
            stopping.append(proc)
            jobs.append({"job_name": "txnadmin", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]})
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s",
                       "evaluation_interval": f"{SCRAPE_S}s"},
            "rule_files": [str(RULES)], "scrape_configs": jobs}))
        port = free_port()
        prom = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                  stdout=subprocess.DEVNULL, stderr=logs)
        stopping.append(server)
        _wait_for("prometheus never became ready", lambda: [] if _ready(prom) else ["not ready"], 60)

        pulsar_targets = [(t, e) for t, e in _targets() if not _is_exporter(e)]
        # Grafana's $__rate_interval: four scrape intervals (the panel's $__interval is smaller at this zoom)
        rate_interval = f"{4 * SCRAPE_S}s"

        shown: set[str] = set()  # queries seen returning data (a retry asks only the others again)

        def without_data() -> list[str]:
            try:
                values = _resolve_variables(prom)
            except AssertionError as exc:
                return [str(exc)]
            for _, expr in pulsar_targets:
                if expr not in shown and _has_data(prom, substitute(expr, values, rate_interval)):
                    shown.add(expr)
            return [f"{title}: {expr}" for title, expr in pulsar_targets if expr not in shown]

        _wait_for("panels that show no data", without_data, 90)

        # every Pulsar name a panel or a rule reads appears in the scrape
        rule_exprs = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
        names = sorted({n for expr in [e for _, e in _targets()] + rule_exprs for n in metric_names_in(expr)
                        if n.startswith("pulsar_")})
        def never_scraped() -> list[str]:
            query = 'count by (__name__) ({__name__=~"%s"})' % "|".join(names)
            return sorted(set(names) - {r["metric"]["__name__"] for r in _get(prom, "/api/v1/query", query=query)["result"]})

        _wait_for("Pulsar names never scraped", never_scraped, 30)

        # the alert rules load and evaluate on real series without an error
        def unhealthy_rules() -> list[str]:
            groups = _get(prom, "/api/v1/rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            assert len(rules) == len(rule_exprs)
            return [f"{r['name']}: {r['health']} {r.get('lastError', '')}" for r in rules if r["health"] != "ok"]

        _wait_for("alert rules failing to evaluate", unhealthy_rules, 30)

        if exporter is not None:
            values = _resolve_variables(prom)

            def exporter_panels() -> list[str]:
                exported = httpx.get(f"{exporter_url}/metrics", timeout=10).text
                missing = []
                for title, expr in _targets():
                    if not _is_exporter(expr):
                        continue
                    query = substitute(expr, values, rate_interval)
                    # with no --checklist the downgrade series are not exported: promtool covers those panels
                    if all(n in exported for n in metric_names_in(expr)) and not _has_data(prom, query):
                        missing.append(f"{title}: {query}")
                return missing

            _wait_for("exporter panels that show no data", exporter_panels, 60)
    finally:
        for item in reversed(stopping):
            if isinstance(item, subprocess.Popen):
                item.terminate()
                try:
                    item.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    item.kill()
            else:
                item.stop()
                item.engine.close()
        logs.close()


def _ready(prom: str) -> bool:
    try:
        return httpx.get(f"{prom}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
