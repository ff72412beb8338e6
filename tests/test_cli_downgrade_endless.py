"""Ways `txnadmin downgrade wait` could never end (issue #24, item 8), driven through the CLI with `-u local:PATH`
against a running engine (`engine run`, killed with -9 and started again as a broker restart).

- `start --no-reload`, a restart, `start --no-reload` again: the re-record took the ledger the restart's own reopen
  created for LastBatched, so the wait hung until that plain ledger rolled over (240 min by default).
- An open transaction acked on a subscription that is then deleted: the broker can no longer describe that
  transaction (Pulsar answers 500), and every poll failed on naming the transaction that pins its coordinator's log.

Every "safe" is checked against the entry-log files once the engine has stopped.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time

from typer.testing import CliRunner

from txnadmin.cli.main import app

from engine_helpers import live_batched_entries_in

runner = CliRunner()
TXNADMIN = [sys.executable, "-m", "txnadmin.cli.main"]
REOPENED = "reopened since recording"


def local(d, *args, timeout=240):
    return subprocess.run(TXNADMIN + ["-u", f"local:{d}", *args], capture_output=True, text=True, timeout=timeout)


def _json(result) -> dict:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def _never_rolling_engine(tmp_path):
    """Batching on, and ledgers that roll only after a million entries or 240 minutes (the default): a wait that
    needs another roll cannot end within a test."""
    d = tmp_path / "e"
    args = ["engine", "init", str(d), "-c", "2"]
    for s in ("managedLedgerMaxEntriesPerLedger=1000000", "managedLedgerMinLedgerRolloverTimeMinutes=0",
              "transactionPendingAckLogIndexMinLag=5", "transactionLogBatchedWriteEnabled=true",
              "transactionPendingAckBatchedWriteEnabled=true"):
        args += ["--set", s]
    assert runner.invoke(app, args).exit_code == 0
    return d


def _broker(d) -> subprocess.Popen:
    """The engine as a live broker under steady traffic; returns once its admin API is up."""
    proc = subprocess.Popen(TXNADMIN + ["engine", "run", str(d), "--duration", "0", "--rate", "150",
                                        "--concurrency", "4", "--abort-ratio", "0", "-o", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        if (d / "server.json").exists() and local(d, "transactions", "coordinators-list").returncode == 0:
            break
        assert proc.poll() is None, "engine run exited"
        time.sleep(0.05)
    time.sleep(1.0)  # traffic reaches every topic and subscription
    return proc


@contextlib.contextmanager
def _stopped_at_exit(procs: list):
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)


def _kill9(d, proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (d / "server.json").unlink(missing_ok=True)  # what a killed server leaves behind (its pid is gone anyway)


def _recorded(state) -> dict:
    """Each recorded log's checklist entry, by log key (coordinator id or store name)."""
    data = json.loads(state.read_text())
    return {**data["coordinators"], **data["pendingAckStores"]}


def test_no_reload_rerecord_after_a_restart_waits_only_for_the_ledgers_before_it(tmp_path):
    d = _never_rolling_engine(tmp_path)
    state = tmp_path / "s.json"
    procs: list = []
    with _stopped_at_exit(procs):
        procs.append(_broker(d))
        first = local(d, "downgrade", "start", "--yes", "--no-reload", "--state", str(state), "-o", "json")
        assert first.returncode == 0, first.stderr
        before_restart = _recorded(state)
        # Not reopened yet: every log may still batch into its newest ledger, so that ledger is LastBatched.
        for key, rec in before_restart.items():
            assert rec["batchingOff"] is False and rec["lastBatchedLedgerId"] == rec["confirmedLedger"], (key, rec)
        time.sleep(1.0)  # the stores still batch under traffic with the flags off: they opened with them on
        _kill9(d, procs.pop())
        procs.append(_broker(d))  # the broker restart: every store reopens, on a new ledger, with the flags off
        polled = local(d, "downgrade", "status", "--state", str(state), "-o", "json")
        assert polled.returncode == 1 and _json(polled)["waitingByReason"].get(REOPENED), polled.stdout
        again = local(d, "downgrade", "start", "--yes", "--no-reload", "--state", str(state), "-o", "json")
        assert again.returncode == 0, again.stderr
        after_restart = _recorded(state)
        assert all(rec["batchingOff"] is True for rec in after_restart.values()), after_restart
        done = local(d, "downgrade", "wait", "--state", str(state), "--timeout", "90", "--interval", "0.5",
                     "-o", "json")
        report = _json(done)
        assert done.returncode == 0 and report["safe"] is True, (done.stderr, report["waitingByReason"])
        for comp in report["components"]:
            key = str(comp["coordinatorId"]) if comp["component"] == "coordinator" else comp["name"]
            # LastBatched is the ledger the log wrote before the restart, never the one its reopen created …
            assert comp["lastBatchedLedgerId"] == before_restart[key]["lastBatchedLedgerId"], comp
            # … so it is safe without another roll: the oldest live ledger is the one the reopen created.
            assert comp["oldestLedgerId"] == after_restart[key]["confirmedLedger"], comp
    assert live_batched_entries_in(d) == []


# -- a subscription deleted under an open transaction --------------------------------------------------------

U_STORE = "persistent://public/default/u-s__transaction_pending_ack"


def _engine_with_an_open_ack_on_u(tmp_path):
    """A batching engine after some traffic, holding one OPEN transaction (an hour's timeout) that acked a message
    on u's subscription s. Returns the directory and the transaction's id as Pulsar prints it."""
    from engine_helpers import Clock, open_engine
    from test_downgrade import BATCHED
    from test_downgrade_adversarial import load

    d = tmp_path / "e"
    # The real time: the served engine reopening it recovers the transaction's deadline from its open time.
    with open_engine(d, Clock(int(time.time() * 1000)), **BATCHED) as engine:
        load(engine)
        sent = engine.begin(60_000)
        engine.produce(sent, "u", b"held")
        engine.commit(sent)
        held = engine.begin(3_600_000)
        got = engine.receive("u", "s", 1)
        engine.ack(held, "u", "s", [got[0].position])
        for _ in range(3):
            engine.maintenance_tick()
    return d, f"({held[0]},{held[1]})"


def test_a_subscription_deleted_under_an_open_transaction_mid_wait(tmp_path):
    from txnadmin.admin.http import HttpAdmin

    from serve_helpers import serving

    d, txn = _engine_with_an_open_ack_on_u(tmp_path)
    tc_log = f"__transaction_log_{txn.strip('()').split(',')[0]}"
    state = str(tmp_path / "s.json")
    with serving(d, tmp_path / "home") as (url, token):
        assert local(d, "downgrade", "start", "--yes", "--state", state).returncode == 0
        listed = local(d, "transactions", "list", "-o", "json")
        assert listed.returncode == 0 and [r["txnId"] for r in _json(listed)] == [txn], listed.stderr
        waiter = subprocess.Popen(TXNADMIN + ["-u", f"local:{d}", "downgrade", "wait", "--state", state,
                                              "--timeout", "20", "--interval", "0.5", "-o", "json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        # Mid-wait, someone deletes the subscription the open transaction acked on (its store goes with it).
        HttpAdmin(url, token=token).delete_subscription("persistent://public/default/u", "s")
        out, err = waiter.communicate(timeout=120)
        assert "Traceback" not in err, err
        # The wait goes on to its --timeout: not safe (the transaction still pins its coordinator's log) …
        assert waiter.returncode == 1, (waiter.returncode, err)
        report = json.loads(out)
        by_name = {c["name"]: c for c in report["components"]}
        # … the deleted store counts as done …
        assert by_name[U_STORE]["done"] is True and "deleted" in by_name[U_STORE]["reason"], by_name[U_STORE]
        # … and the coordinator whose open transaction cannot be described waits, saying so.
        pinned = by_name[tc_log]
        assert pinned["done"] is False and pinned["waitingFor"] == "open transaction pinning trimming", pinned
        assert "could not be named" in pinned["reason"], pinned
        polled = local(d, "downgrade", "status", "--state", state, "-o", "json")
        assert polled.returncode == 1 and _json(polled)["safe"] is False, polled.stderr
        # `transactions list` still lists every coordinator that can answer, and names the one that cannot.
        listed = local(d, "transactions", "list", "-o", "json")
        assert "Traceback" not in listed.stderr
        assert listed.returncode == 1 and _json(listed) == [], (listed.stdout, listed.stderr)
        tc_id = txn.strip("()").split(",")[0]
        assert f"coordinator {tc_id}: its transactions could not be listed" in listed.stderr, listed.stderr
        alone = local(d, "transactions", "list", "-c", tc_id)
        assert alone.returncode == 1 and "Subscription s of" in alone.stderr and "Traceback" not in alone.stderr
