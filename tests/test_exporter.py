"""`txnadmin exporter` through the CLI and over HTTP: real engine processes with faults, a real `serve`, a target
that never answers and one that does not exist. Values are compared with what `doctor`, `downgrade status` and the
faults say, never with numbers written here."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from txnadmin.cli.main import app
from txnadmin.engine.faults import STALLED_TOPIC
from txnadmin.procedures.exporter import METRICS, PREFIX

from downgrade_helpers import TOKEN, cli, loaded_engine, serve_process

runner = CliRunner()
TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]


@contextmanager
def exporting(*args: str, env: dict | None = None):
    """`txnadmin exporter --port 0 …` as a process; yields (its /metrics URL, the process). Stopped with SIGTERM."""
    proc = subprocess.Popen(TXNADMIN + [*args[:args.index("exporter") + 1], "--port", "0",
                                        *args[args.index("exporter") + 1:]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "/metrics" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield line.split(" on ", 1)[1].split()[0], proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def scrape(url: str) -> tuple[dict[tuple[str, frozenset], float], dict[str, tuple[str, str]]]:
    """(sample name and labels → value, family → (type, help)) from one scrape."""
    with urllib.request.urlopen(url, timeout=30) as reply:
        text = reply.read().decode()
    samples, families = {}, {}
    for family in text_string_to_metric_families(text):
        families[family.name] = (family.type, family.documentation)
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, families


def values(samples: dict, name: str, **labels: str) -> dict[frozenset, float]:
    """The samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {lab: v for (n, lab), v in samples.items() if n == PREFIX + name and want <= set(lab)}


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(values(samples, name, **labels).values())


def until(url: str, predicate, deadline: float = 90.0, what: str = ""):
    """Scrape until ``predicate(samples)`` holds (a bound on waiting, not a timing check); the samples then."""
    end = time.monotonic() + deadline
    samples: dict = {}
    while time.monotonic() < end:
        samples, _ = scrape(url)
        if predicate(samples):
            return samples
        time.sleep(0.3)
    raise AssertionError(f"never {what}: {sorted((n, dict(l), v) for (n, l), v in samples.items())}")


@pytest.mark.slow
def test_faults_move_the_metrics_and_the_fixes_bring_them_back(tmp_path):
    """stuck-open, hold-ending and stall-buffer-recovery in a running engine under a workload: the exporter shows
    each one as the fault says; `doctor --fix --yes` clears the stuck ones, a restart the held commit and the
    stalled recovery; Ctrl-C stops the exporter with 130."""
    engine = tmp_path / "engine"
    env = dict(os.environ, TXNADMIN_HOME=str(tmp_path))
    subprocess.run(TXNADMIN + ["engine", "init", str(engine), "-c", "2"], check=True, capture_output=True, env=env)
    run = subprocess.Popen(TXNADMIN + ["engine", "run", str(engine), "--duration", "0", "--rate", "20",
                                       "--txn-timeout-ms", "300", "--fault", "stuck-open", "--fault", "hold-ending",
                                       "--fault", "stall-buffer-recovery", "-o", "json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    url_arg = f"local:{engine}"
    judged = ("--threshold", "stuck-margin=0s", "--threshold", "ending=0s")
    try:
        with exporting("-u", url_arg, "exporter", "--interval", "0.5", *judged, "--max-transaction-timeout", "0",
                       env={"TXNADMIN_HOME": str(tmp_path)}) as (url, proc):
            _, families = scrape(url)
            faulted = until(url, lambda s: total(s, "transactions_past_timeout") >= 3
                            and total(s, "transactions_stuck_ending", state="COMMITTING") >= 1
                            and values(s, "transaction_buffer_recovery_age_seconds", topic=STALLED_TOPIC),
                            what="saw the three faults")
            # the three OPEN ones and the held commit are the oldest: their age, held positions and hanging count
            assert total(faulted, "transactions_open", state="COMMITTING") >= 1
            assert total(faulted, "transaction_buffers_recovering") >= 1
            assert max(values(faulted, "oldest_open_transaction_age_seconds").values()) > 0
            assert values(faulted, "max_read_position_held_seconds", topic="persistent://public/default/txn-topic-0")
            assert total(faulted, "transactions_hanging") >= 4
            first_age = values(faulted, "transaction_buffer_recovery_age_seconds", topic=STALLED_TOPIC)
            later = until(url, lambda s: values(s, "transaction_buffer_recovery_age_seconds", topic=STALLED_TOPIC)
                          and max(values(s, "transaction_buffer_recovery_age_seconds", topic=STALLED_TOPIC).values())
                          > max(first_age.values()), what="saw the recovery age rise")
            assert proc.poll() is None and later

            fixed = runner.invoke(app, ["-u", url_arg, "doctor", "--only", "stuck-transactions", *judged, "--fix",
                                        "--yes", "-o", "json"], env={"TXNADMIN_HOME": str(tmp_path)})
            assert fixed.exit_code in (0, 1), fixed.output
            assert json.loads(fixed.stdout)["fix"]["results"], fixed.stdout
            until(url, lambda s: values(s, "transactions_past_timeout")
                  and total(s, "transactions_past_timeout") == 0, what="saw the stuck ones aborted")
            still = scrape(url)[0]
            assert total(still, "transactions_stuck_ending", state="COMMITTING") >= 1  # only a restart ends it

            run.send_signal(signal.SIGTERM)
            assert run.wait(timeout=60) == 0, run.stderr.read().decode()[-2000:] if run.stderr else ""
            # stopped, the engine answers nothing (as a stopped broker): polls fail, the last values stay
            errors = total(scrape(url)[0], "poll_errors_total")
            down = until(url, lambda s: total(s, "poll_errors_total") > errors, what="counted the stopped engine")
            assert total(down, "transactions_stuck_ending", state="COMMITTING") >= 1
            run = subprocess.Popen(TXNADMIN + ["engine", "run", str(engine), "--duration", "0", "--rate", "5",
                                               "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            healthy = until(url, lambda s: values(s, "transactions_stuck_ending")
                            and total(s, "transactions_stuck_ending") == 0
                            and values(s, "transaction_buffers_recovering")
                            and total(s, "transaction_buffers_recovering") == 0
                            and not values(s, "transaction_buffer_recovery_age_seconds"),
                            what="saw the engine healthy after its restart")
            assert total(healthy, "transactions_past_timeout") == 0
            # every series served has HELP text and the type the metric list gives
            for name, (kind, help_text) in METRICS.items():
                full = PREFIX + name
                if full in families:
                    assert families[full] == (kind, help_text), name
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 130
            err = proc.stderr.read()
            assert "interrupted" in err and "Traceback" not in err, err[-2000:]
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=60)


@pytest.mark.slow
def test_checklist_and_doctor_values_equal_what_the_commands_say_and_a_lost_target_goes_stale(tmp_path):
    """Against a real `serve` with token auth: with --checklist and --doctor, every value equals what `downgrade
    status -o json` and `doctor -o json` say of the same quiet engine; the checklist is never written. Then the
    server goes away: the exporter stays up, serves the last values, and its errors and poll age rise."""
    d = loaded_engine(tmp_path)
    state = tmp_path / "checklist.json"
    with serve_process(tmp_path, d) as (target, server):
        started = cli(target, "downgrade", "start", "--yes", "--state", str(state), "-o", "json")
        assert started.returncode == 0, started.stderr
        before = (state.read_bytes(), state.stat().st_mtime_ns)
        with exporting("-u", target, "--auth-params", f"token:{TOKEN}", "exporter", "--interval", "0.5",
                       "--checklist", str(state), "--doctor") as (url, proc):
            polled = until(url, lambda s: values(s, "doctor_findings") and values(s, "downgrade_logs"),
                           what="finished a poll with the checklist and doctor")
            status = cli(target, "downgrade", "status", "--state", str(state), "-o", "json")
            report = json.loads(status.stdout)
            doc = json.loads(cli(target, "doctor", "-o", "json").stdout)
            after = scrape(url)[0]
            assert total(after, "downgrade_checklist_loaded") == 1
            assert total(after, "downgrade_logs", status="waiting") == report["waiting"]
            assert total(after, "downgrade_logs", status="done") == report["logs"] - report["waiting"]
            waiting = {dict(lab)["reason"]: v for lab, v in values(after, "downgrade_waiting_logs").items()}
            assert {r: v for r, v in waiting.items() if v} == report["waitingByReason"]
            flags = {(dict(lab)["broker"], dict(lab)["flag"]): v for lab, v in values(after, "batching_enabled").items()}
            assert sorted({b for b, _ in flags}) == report["brokersChecked"] and set(flags.values()) == {0}
            counted: dict[tuple[str, str], int] = {}
            for f in doc["findings"]:
                counted[(f["check"], f["severity"])] = counted.get((f["check"], f["severity"]), 0) + 1
            served = {(dict(lab)["check"], dict(lab)["severity"]): v
                      for lab, v in values(after, "doctor_findings").items()}
            assert {k: v for k, v in served.items() if v} == counted
            assert {c for c, _ in served} == set(doc["summary"]["checks"])
            assert polled and (state.read_bytes(), state.stat().st_mtime_ns) == before

            server.terminate()
            server.wait(timeout=20)
            errors = total(scrape(url)[0], "poll_errors_total")
            stale = until(url, lambda s: total(s, "poll_errors_total") > errors + 1, what="counted failed polls")
            assert proc.poll() is None
            assert values(stale, "downgrade_logs") == values(after, "downgrade_logs")  # the last values, still served
            older = until(url, lambda s: total(s, "poll_age_seconds") > total(stale, "poll_age_seconds"),
                          what="saw the poll age rise")
            assert total(older, "poll_errors_total") >= total(stale, "poll_errors_total")
        assert (state.read_bytes(), state.stat().st_mtime_ns) == before
        err = proc.stderr.read() if proc.stderr else ""
        assert "failed" in err and "Traceback" not in err and TOKEN not in err, err[-2000:]


@pytest.mark.slow  # several failed polls, each after a refused connection and its retries
def test_an_unreachable_target_keeps_it_up_counting_errors_with_a_rising_poll_age(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free now, and nothing listens there
    with exporting("-u", f"http://127.0.0.1:{port}", "exporter", "--interval", "0.2") as (url, proc):
        first = until(url, lambda s: total(s, "poll_errors_total") >= 1, what="counted a failed poll")
        later = until(url, lambda s: total(s, "poll_errors_total") > total(first, "poll_errors_total")
                      and total(s, "poll_age_seconds") > total(first, "poll_age_seconds"), what="saw errors rise")
        assert proc.poll() is None
        assert not values(later, "transactions_open")
        # no poll succeeded: the exporter's start time, as in the first scrape (see the test below)
        assert values(later, "last_poll_success_timestamp_seconds") == values(first,
                                                                              "last_poll_success_timestamp_seconds")
    err = proc.stderr.read()
    assert f"127.0.0.1:{port}" in err and "Traceback" not in err, err


def test_an_exporter_that_never_polled_successfully_serves_its_start_as_the_last_success():
    """Issue 34: without the series, `time() - txnadmin_last_poll_success_timestamp_seconds > 300`
    (TxnadminExporterStale) could never fire for an exporter whose polls all fail. It is served from the first
    scrape, holding the exporter's start time until a poll succeeds (the rule's promtool case: never-succeeded)."""
    launched = time.time()
    with exporting("-u", "http://127.0.0.1:1", "exporter", "--interval", "0.2") as (url, proc):
        first, _ = scrape(url)
        start = values(first, "last_poll_success_timestamp_seconds")
        assert list(start) == [frozenset()], first  # one series, from the first scrape, before any poll ended
        assert launched <= start[frozenset()] <= time.time()
        failed = until(url, lambda s: total(s, "poll_errors_total") >= 2, what="counted two failed polls")
        assert values(failed, "last_poll_success_timestamp_seconds") == start  # failures do not move it
        assert proc.poll() is None


def test_a_scrape_is_answered_while_the_poll_waits_on_a_target_that_never_replies(tmp_path):
    """A listener that accepts and never answers: the poll hangs inside its request, and every scrape meanwhile is
    served from what the exporter has (its age rising), not held until the poll ends."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        with exporting("-u", f"http://127.0.0.1:{port}", "--request-timeout", "600", "exporter",
                       "--interval", "0.2") as (url, proc):
            first, families = scrape(url)
            later = until(url, lambda s: total(s, "poll_age_seconds") > total(first, "poll_age_seconds"),
                          what="saw the age rise")
            assert total(later, "poll_errors_total") == 0 and "txnadmin_poll_duration_seconds" not in families
            assert proc.poll() is None
    # SIGTERM with the poll still waiting on the silent target: the poll is abandoned and the exporter exits 0
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""


def test_usage_errors_and_a_port_in_use(tmp_path):
    unnamed = runner.invoke(app, ["exporter"], env={"TXNADMIN_HOME": str(tmp_path), "TXNADMIN_ADMIN_URL": "",
                                                    "PULSAR_CLIENT_CONF": "", "PULSAR_HOME": ""})
    assert unnamed.exit_code == 2 and "exporter needs a named target" in unnamed.stderr, unnamed.output
    bad = runner.invoke(app, ["-u", "http://127.0.0.1:1", "exporter", "--threshold", "ending=soon"])
    assert bad.exit_code == 2 and "invalid duration 'soon' for --threshold ending" in bad.stderr, bad.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = runner.invoke(app, ["-u", "http://127.0.0.1:1", "exporter", "--port", str(port)])
    assert busy.exit_code == 3 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr, busy.output
    assert "Traceback" not in busy.output


def test_every_metric_follows_the_naming_rules():
    """Prefix, base units, `_total` only on counters (prometheus-client adds it), HELP text for each."""
    for name, (kind, help_text) in METRICS.items():
        assert kind in ("gauge", "counter") and help_text.strip(), name
        assert not name.endswith("_total"), name
        assert not any(unit in name for unit in ("_ms", "_milliseconds", "_minutes")), name
    assert Path(__file__).parent.joinpath("..", "docs", "observability.md").exists()
    doc = Path(__file__).parent.joinpath("..", "docs", "observability.md").read_text()
    for name, (kind, _) in METRICS.items():
        assert PREFIX + name + ("_total" if kind == "counter" else "") in doc, name
