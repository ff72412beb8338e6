"""`engine run --fault shed=SECONDS`: a moving cluster, as a load manager's bundle shedding makes it.

Every SECONDS one topic with pending-ack stores (or open transactions) and one coordinator are unloaded in turn,
through the engine calls the REST unload uses; each reopen gets a new recoverStartTime. Driven through the real CLI
in child processes and inspected with `-u local:DIR`, as an operator in another shell would.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from txnadmin.cli.main import app

TXNADMIN = [sys.executable, "-m", "txnadmin"]
TOPIC_LINE = re.compile(r"^shed: unloaded (persistent://public/default/txn-topic-\d+) \((\d+) pending-ack stores? "
                        r"reopened\)$")
TC_LINE = re.compile(r"^shed: unloaded persistent://pulsar/system/transaction_coordinator_assign-partition-(\d+) "
                     r"\(coordinator (\d+) reopened\)$")
COUNT_LINE = re.compile(r"^shed: (\d+) topic and (\d+) coordinator unloads, (\d+) failed$")

runner = CliRunner()


def _env(tmp_path: Path) -> dict:
    return dict(os.environ, TXNADMIN_HOME=str(tmp_path))


def _cli(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(TXNADMIN + list(args), capture_output=True, text=True, env=_env(tmp_path), timeout=timeout)


def _init(tmp_path: Path, *settings: str) -> Path:
    engine = tmp_path / "engine"
    made = _cli(tmp_path, "engine", "init", str(engine), *settings)
    assert made.returncode == 0, made.stderr
    return engine


def _local_json(tmp_path: Path, engine: Path, *args: str):
    done = _cli(tmp_path, "-u", f"local:{engine}", "transactions", *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_shed_unloads_a_topic_and_a_coordinator_in_turn_and_each_reopens(tmp_path):
    engine = _init(tmp_path)  # 16 coordinators: a 3 s run cannot reach them all
    run = _cli(tmp_path, "engine", "run", str(engine), "--fault", "shed=0.5", "--duration", "3", "--rate", "50")
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert "Traceback" not in run.stderr
    topics = [m.groups() for m in map(TOPIC_LINE.match, lines) if m]
    shed_tcs = [int(m.group(1)) for m in map(TC_LINE.match, lines) if m]
    assert topics and shed_tcs, run.stderr
    # in turn: the topics alternate, the coordinators count up from 0
    names = [name for name, _ in topics]
    assert all(a != b for a, b in zip(names, names[1:], strict=False)), names
    assert shed_tcs == list(range(len(shed_tcs))), shed_tcs
    assert all(1 <= int(stores) <= 2 for _, stores in topics), topics  # 2 subscriptions per topic
    [count] = [m.groups() for m in map(COUNT_LINE.match, lines) if m]
    assert count == (str(len(topics)), str(len(shed_tcs)), "0"), run.stderr

    # Every open saves its recoverStartTime; the stopped engine's view reports each one's last open. The
    # coordinators shed reopened at least one period after the start opened them all; the others did not.
    stats = _local_json(tmp_path, engine, "coordinator-stats")
    kept = [stats[str(i)]["recoverStartTime"] for i in range(16) if i not in shed_tcs]
    moved = [stats[str(i)]["recoverStartTime"] for i in shed_tcs]
    assert kept and min(moved) > max(kept), (moved, kept)
    assert all(stats[str(i)]["state"] == "Ready" for i in range(16))


@pytest.mark.slow
def test_shed_reopens_pending_ack_stores_while_another_shell_watches(tmp_path):
    """The operator's view: while `engine run --fault shed` runs, `-u local:DIR` (through the engine's server)
    sees a store's recoverStartTime change, and /metrics carries the process start; Ctrl-C stops everything."""
    engine = _init(tmp_path, "-c", "2")
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(engine), "--fault", "shed=0.3", "--duration", "0",
                                        "--rate", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        seen: list[int] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(set(seen)) < 3:
            if (engine / "server.json").exists():
                done = _cli(tmp_path, "-u", f"local:{engine}", "transactions", "pending-ack-stats", "-t",
                            "txn-topic-0", "-s", "sub-0", "-o", "json")
                if done.returncode == 0 and json.loads(done.stdout).get("recoverStartTime"):
                    seen.append(json.loads(done.stdout)["recoverStartTime"])
            time.sleep(0.2)
        assert len(set(seen)) >= 3, seen  # reopened at least twice under our eyes
        assert seen == sorted(seen), seen  # each reopen later than the one before
        # the stores moved, the process did not: its start stays what it was before the first reopen
        url = json.loads((engine / "server.json").read_text())["url"]
        started = re.search(r"^process_start_time_seconds\{[^}]*\} (\S+)$", httpx.get(f"{url}/metrics").text, re.M)
        assert started and float(started.group(1)) * 1000 <= seen[0], started
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err  # Ctrl-C: a clean stop, and still "interrupted" (docs/exit-codes.md)
    assert "Traceback" not in err
    [count] = [m.groups() for m in map(COUNT_LINE.match, err.splitlines()) if m]
    assert int(count[0]) >= 2 and count[2] == "0", err
    assert not (engine / "server.json").exists()  # stopped cleanly


@pytest.mark.slow
def test_shed_with_other_faults_and_json_leaves_what_they_broke_alone(tmp_path):
    """Combinable: the stuck and held transactions' coordinators are never unloaded (an unload is their cure),
    the other coordinators are; -o json prints no unload lines, only the count, and the counts in the JSON."""
    engine = _init(tmp_path, "-c", "8")
    run = _cli(tmp_path, "engine", "run", str(engine), "--fault", "stuck-open", "--fault", "shed=0.3", "--fault",
               "hold-ending", "--duration", "3", "--rate", "50", "--txn-timeout-ms", "600000", "-o", "json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    shed = out["shed"]
    assert shed["periodSeconds"] == 0.3 and shed["failures"] == 0
    assert shed["topicUnloads"] >= 1 and shed["coordinatorUnloads"] >= 1, shed
    assert not any(TOPIC_LINE.match(line) or TC_LINE.match(line) for line in run.stderr.splitlines()), run.stderr
    [count] = [m.groups() for m in map(COUNT_LINE.match, run.stderr.splitlines()) if m]
    assert count == (str(shed["topicUnloads"]), str(shed["coordinatorUnloads"]), "0")

    held = re.search(r"fault hold-ending: \((\d+),(\d+)\) held in COMMITTING", run.stderr)
    stuck = re.findall(r"\((\d+),(\d+)\)", re.search(r"fault stuck-open: (.*) OPEN", run.stderr).group(1))
    assert held and len(stuck) == 3, run.stderr
    faulted = {int(held.group(1))} | {int(m) for m, _ in stuck}
    assert f"left alone: {', '.join(f'coordinator {i}' for i in sorted(faulted))}" in run.stderr, run.stderr
    # still broken: the held commit never ended, the stuck ones are still OPEN
    meta = _local_json(tmp_path, engine, "transaction-metadata", "--txn-id", f"({held.group(1)},{held.group(2)})")
    assert meta["status"] == "COMMITTING", meta
    for most, least in stuck:
        assert _local_json(tmp_path, engine, "transaction-metadata", "-m", most, "-l", least)["status"] == "OPEN"
    # and never reopened after the start, unlike the coordinators that were shed (the others, in turn from the first)
    stats = _local_json(tmp_path, engine, "coordinator-stats")
    shed_ids = sorted(set(range(8)) - faulted)[:shed["coordinatorUnloads"]]
    assert max(stats[str(i)]["recoverStartTime"] for i in faulted) < min(
        stats[str(i)]["recoverStartTime"] for i in shed_ids), (faulted, shed_ids, stats)


@pytest.mark.parametrize("spec, says", [
    ("shed", "give the period in seconds"),
    ("shed=", "give the period in seconds"),
    ("shed=  ", "give the period in seconds"),
    ("shed=0", "more than 0"),
    ("shed=-1", "more than 0"),
    ("shed=-0.0", "more than 0"),
    ("shed=nan", "finite"),
    ("shed=inf", "finite"),
    ("shed=1e999", "finite"),
    ("shed=abc", "'abc' is not a number of seconds"),
    ("shed=5s", "'5s' is not a number of seconds"),
    ("shed=1\nrm -rf", "is not a number of seconds"),
    ("shed5", "use one of stuck-open, hold-ending, stall-buffer-recovery, stall-coordinator-recovery, shed"),
])
def test_a_bad_shed_period_is_a_one_line_usage_error(tmp_path, spec, says):
    result = runner.invoke(app, ["engine", "run", str(tmp_path / "engine"), "--fault", spec])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("error: --fault "), result.stderr
    assert not (tmp_path / "engine").exists()  # refused before anything was opened


def test_shed_given_twice_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["engine", "run", str(tmp_path / "e"), "--fault", "shed=1", "--fault", "shed=2"])
    assert result.exit_code == 2 and "give --fault shed=SECONDS once" in result.stderr


# -- failures inside the shedding thread ------------------------------------------------------------------------

def _shedding_beside_a_workload(tmp_path, engine_class, say, seconds: float = 2.0):
    from txnadmin.engine.faults import Shedder
    from txnadmin.engine.manage import init_engine
    from txnadmin.engine.workload import WorkloadSpec, run_workload

    init_engine(tmp_path / "e", {"transactionCoordinatorCount": "2"})
    engine = engine_class(tmp_path / "e")
    failures: list[str] = []
    shedder = Shedder(engine, 0.1, say, on_failure=failures.append).start()
    try:
        stats = run_workload(engine, WorkloadSpec(rate=100, duration_s=seconds))
    finally:
        stopped = shedder.stop()
        engine.close()
    return shedder, stats, failures, stopped


def test_a_failed_unload_is_reported_and_shedding_goes_on(tmp_path):
    from txnadmin.engine.engine import Engine, EngineError

    class OneUnloadFails(Engine):  # one real reload refused once, as a topic caught mid-delete would be
        refused = threading.Event()

        def reload_topic(self, topic):
            if not self.refused.is_set():
                self.refused.set()
                raise EngineError(f"cannot unload {topic} just now")
            return super().reload_topic(topic)

    said: list[str] = []
    shedder, stats, failures, stopped = _shedding_beside_a_workload(tmp_path, OneUnloadFails, said.append)
    assert stopped
    assert len(failures) == 1 and shedder.failures == 1, failures
    assert re.fullmatch(r"shed: unloading persistent://public/default/txn-topic-\d failed \(EngineError: cannot "
                        r"unload persistent://\S+ just now\); shedding goes on", failures[0]), failures
    assert shedder.topic_unloads >= 1 and shedder.coordinator_unloads >= 1  # it went on
    assert sum(1 for line in said if TOPIC_LINE.match(line)) == shedder.topic_unloads
    assert stats.committed > 0


def test_a_failure_outside_an_unload_is_logged_and_the_workload_goes_on(tmp_path, caplog):
    from txnadmin.engine.engine import Engine

    def say(line: str) -> None:
        raise OSError("stderr went away")

    with caplog.at_level(logging.ERROR, logger="txnadmin.engine.faults"):
        shedder, stats, failures, stopped = _shedding_beside_a_workload(tmp_path, Engine, say)
    assert stopped and stats.committed > 0
    assert [r.getMessage() for r in caplog.records] == [f"{tmp_path / 'e'}: load shedding stopped on an unexpected "
                                                        "error"], caplog.records
    assert "stderr went away" in caplog.text  # the traceback is in the log, not swallowed
