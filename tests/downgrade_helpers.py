"""What the downgrade tests share (imported, never collected): engines with a batched history, in this process and
as engine directories, the traffic that trims them, a `txnadmin serve` process or an engine served in this process,
and the CLI run against either."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from engine_helpers import live_batched_entries, open_engine, small_config, wait_served
from typer.testing import CliRunner

from txnadmin.admin.http import HttpAdmin
from txnadmin.admin.local import LocalAdmin
from txnadmin.admin.protocol import NotFoundError
from txnadmin.cli.main import app
from txnadmin.engine.config import EngineConfig
from txnadmin.engine.engine import Engine
from txnadmin.procedures.downgrade import start, status
from txnadmin.server.run import BackgroundServer, free_port, wait_until_listening

runner = CliRunner()
TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
TOKEN = "serve-test-token"
TC_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign-partition-{}"
BATCHED = {"transactionLogBatchedWriteEnabled": "true", "transactionPendingAckBatchedWriteEnabled": "true",
           "transactionLogBatchedWriteMaxDelayInMillis": "1", "transactionPendingAckBatchedWriteMaxDelayInMillis": "1"}
TOPICS = [("t", "s"), ("u", "s")]
T, U = "persistent://public/default/t", "persistent://public/default/u"
T_STORE, U_STORE = (f"{topic}-s__transaction_pending_ack" for topic in (T, U))


# -- an engine in this process -------------------------------------------------------------------------------

def traffic(engine, n: int, topic: str = "t", sub: str = "s") -> None:
    engine.subscribe(topic, sub)
    for _ in range(n):
        txn = engine.begin(60_000)
        engine.produce(txn, topic, b"x")
        got = engine.receive(topic, sub, 1)
        if got:
            engine.ack(txn, topic, sub, [got[0].position])
        engine.commit(txn)
    engine.maintenance_tick()


def load(engine, n=20):
    for topic, sub in TOPICS:
        traffic(engine, n, topic, sub)
    for _ in range(3):
        engine.maintenance_tick()


@contextlib.contextmanager
def engine_started(tmp_path):
    """A batching engine under some traffic, with `downgrade start` recorded in tmp_path/s.json."""
    with open_engine(tmp_path / "e", **BATCHED) as engine:
        admin = LocalAdmin(engine)
        load(engine)
        start(admin, tmp_path / "s.json")
        yield engine, admin


def checked_status(engine, admin, path):
    """status(), with every "safe" proven by the independent entry-log check."""
    report = status(admin, path)
    if report.safe:
        assert live_batched_entries(engine) == [], "the tool said safe while batched entries were live"
    return report


def until_safe(engine, admin, path, rounds=12):
    for _ in range(rounds):
        report = checked_status(engine, admin, path)
        if report.safe:
            return report
        load(engine)
    return report


class Unloaded(LocalAdmin):
    """A store the listing still shows but whose broker has not loaded it: stats answer 404."""

    hidden = "persistent://public/default/u"
    deleted = False

    def pending_ack_internal_stats(self, topic, subscription, metadata=False):
        if topic == self.hidden:
            raise NotFoundError("Topic not found")
        return super().pending_ack_internal_stats(topic, subscription, metadata)

    def pending_ack_stats(self, topic, subscription, low_water_marks=False):
        if topic == self.hidden:
            raise NotFoundError("Topic not found")
        return super().pending_ack_stats(topic, subscription, low_water_marks)

    def list_topics(self, namespace, include_system=True):
        names = super().list_topics(namespace, include_system)
        return [n for n in names if not (self.deleted and n.startswith(self.hidden + "-"))]


# -- an engine directory, run as a broker (`engine run`) ----------------------------------------------------

def fresh_engine(tmp_path):
    """`engine init` with batching on, two coordinators and ledgers that roll every 20 entries; no traffic yet."""
    d = tmp_path / "e"
    sets = ["managedLedgerMaxEntriesPerLedger=20", "managedLedgerMinLedgerRolloverTimeMinutes=0",
            "transactionPendingAckLogIndexMinLag=5", "transactionLogBatchedWriteEnabled=true",
            "transactionPendingAckBatchedWriteEnabled=true"]
    args = ["engine", "init", str(d), "-c", "2"]
    for s in sets:
        args += ["--set", s]
    assert runner.invoke(app, args).exit_code == 0
    return d


@contextlib.contextmanager
def running(d):
    """The engine as a live broker: `engine run` in the background (its loopback server takes local: calls)."""
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "150",
                                        "--concurrency", "4", "--abort-ratio", "0", "-o", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_served(d)
        time.sleep(1.0)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def engine_traffic(d, seconds="1.5"):
    """`engine run` for ``seconds``: transactional traffic on a stopped engine directory."""
    result = runner.invoke(app, ["engine", "run", str(d), "--duration", seconds, "--rate", "0", "--concurrency", "4",
                                 "--abort-ratio", "0", "-o", "json"])
    assert result.exit_code == 0, result.output


def server_of(d):
    """A running engine's own admin URL and token (its server.json)."""
    info = json.loads((d / "server.json").read_text())
    return info["url"], info["token"]


def someone_else(d) -> HttpAdmin:
    """Another operator on the same broker (the running engine's own admin API)."""
    url, token = server_of(d)
    return HttpAdmin(url, token=token)


def local(d, *args, timeout=240):
    """The CLI with nothing but `-u local:PATH`: no token, no URL (a running engine's own server.json is used)."""
    return subprocess.run(TXNADMIN + ["-u", f"local:{d}", *args], capture_output=True, text=True, timeout=timeout)


# -- an engine served over HTTP, and the CLI against it ------------------------------------------------------

def loaded_engine(tmp_path):
    """A batching engine directory with history on t/s and u/s (stopped), and tmp_path/token for serve_process."""
    d = tmp_path / "e"
    with open_engine(d, **BATCHED) as engine:
        load(engine)
    (tmp_path / "token").write_text(TOKEN)
    return d


@contextlib.contextmanager
def serve_process(tmp_path, d, port=None):
    """`txnadmin serve` on ``d`` (a process, restartable on the same ``port``); yields its URL and the process."""
    port = port or free_port()
    proc = subprocess.Popen(TXNADMIN + ["serve", "--engine-dir", str(d), "--port", str(port), "--token-file",
                                        str(tmp_path / "token")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until_listening(port, proc, timeout_s=60)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=20)


@contextlib.contextmanager
def served_engine(tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    """A batching engine with history on t/s and u/s, served over HTTP (its maintenance driven by the tests)."""
    d = tmp_path / "e"
    small_config(**BATCHED).save(d)
    engine = Engine(d, EngineConfig.load(d), maintenance=False)
    server = None
    try:
        for topic in ("t", "u"):
            traffic(engine, 20, topic, "s")
        server = BackgroundServer(engine, token=TOKEN).start()
        yield engine, server.url
    finally:
        if server is not None:
            server.stop()
        engine.close()


def cli(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(TXNADMIN + ["-u", url, "--auth-params", f"token:{TOKEN}", *args], capture_output=True,
                          text=True, timeout=timeout)


# -- reading what the CLI said -------------------------------------------------------------------------------

def report_of(result) -> dict:
    """A command's JSON report, once it is clear it printed no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def components_of(result: subprocess.CompletedProcess) -> dict[str, dict]:
    assert "Traceback" not in result.stderr, result.stderr
    return {c["name"]: c for c in json.loads(result.stdout)["components"]}


def waiting_for(report: dict, kind: str) -> set[str]:
    return {c["name"] for c in report["components"] if c.get("waitingFor") == kind}


def assert_one_line_naming(text: str, *names: str) -> None:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Stacktrace" not in text and "\tat " not in text and "Traceback" not in text, text
    for name in names:
        assert name in lines[0], (name, text)


def until(check, what: str, engine: Engine | None = None, topic: str = "", rounds: int = 40):
    """Poll ``check()`` until it holds, driving transactional traffic on ``topic`` between tries (its store
    trims only as its subscription acknowledges)."""
    for _ in range(rounds):
        value = check()
        if value:
            return value
        if engine is not None:
            traffic(engine, 10, topic, "s")
            engine.maintenance_tick()
        else:
            time.sleep(0.25)
    raise AssertionError(f"never: {what}")


def traffic_on_u_until_it_ends(proc: subprocess.Popen, engine: Engine, rounds: int = 40) -> tuple[str, str]:
    """Transactional traffic on u only (t's subscription stays as it is) until ``proc``, a `downgrade wait`, ends:
    u's store trims as its subscription acknowledges. ``proc``'s (stdout, stderr)."""
    for _ in range(rounds):
        if proc.poll() is not None:
            break
        traffic(engine, 10, "u", "s")
        engine.maintenance_tick()
        time.sleep(0.2)
    return proc.communicate(timeout=120)


def proven_done(state: Path, store: str):
    """The checklist says `wait` proved ``store`` done (it then reads only its recoverStartTime)."""
    try:
        rec = json.loads(state.read_text())["pendingAckStores"].get(store) or {}
    except (OSError, ValueError):
        return False  # being replaced atomically right now
    return rec.get("provenDone") is not None and rec.get("provenDone") == rec.get("recoverStartTime")
