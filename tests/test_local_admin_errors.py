"""LocalAdmin answers engine errors with the status Pulsar's REST API gives, through one explicit table; anything
else is a bug and is not dressed up as a 404 or a 412."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from typer.testing import CliRunner

import txnadmin.engine as engine_pkg
from txnadmin.admin import local
from txnadmin.admin.local import LocalAdmin, engine_error_status
from txnadmin.admin.protocol import AdminError, NotFoundError, UnexpectedServerError
from txnadmin.cli.main import app
from txnadmin.engine import stats
from txnadmin.engine.config import ConfigError
from txnadmin.engine.coordinator import CoordinatorError, CoordinatorNotReady, InvalidTxnStatus, TransactionNotFound
from txnadmin.engine.engine import EngineError, NotAcceptable, NotFound
from txnadmin.engine.pending_ack import PendingAckConflict, PendingAckNotAllowed
from txnadmin.engine.stats import NotReady
from txnadmin.engine.tb_snapshot import SnapshotError

from engine_helpers import open_engine

TOPIC = "persistent://public/default/orders"

EXPECTED = [
    (TransactionNotFound, 404), (InvalidTxnStatus, 409), (CoordinatorNotReady, 503), (CoordinatorError, 500),
    (NotFound, 404), (NotAcceptable, 406), (NotReady, 503), (EngineError, 500), (PendingAckConflict, 409),
    (PendingAckNotAllowed, 405), (SnapshotError, 500), (ConfigError, 412),
]


@pytest.fixture
def admin(tmp_path):
    with open_engine(tmp_path / "e") as engine:
        yield LocalAdmin(engine)


@pytest.mark.parametrize("kind, status", EXPECTED, ids=[k.__name__ for k, _ in EXPECTED])
def test_each_engine_error_gets_pulsars_status(admin, monkeypatch, kind, status):
    def fails(*args, **kwargs):
        raise kind("what went wrong")

    monkeypatch.setattr(stats, "pending_ack_stats", fails)
    with pytest.raises(AdminError) as err:
        admin.pending_ack_stats(TOPIC, "sub")
    assert (err.value.status, err.value.reason) == (status, "what went wrong")
    assert isinstance(err.value, NotFoundError) == (status == 404)


def test_a_subscription_missing_from_its_topic_answers_as_pulsars_unchecked_lookup_does(admin):
    # pendingAckStats: PersistentTopic dereferences the missing subscription, an NPE no REST handler maps (a
    # plain-text 500); pendingAckInternalStats checks it first (SubscriptionNotFoundException, 404).
    admin.engine.subscribe(TOPIC, "sub")
    with pytest.raises(UnexpectedServerError) as err:
        admin.pending_ack_stats(TOPIC, "gone")
    assert err.value.status == 500 and err.value.message.startswith("Subscription gone of ")
    assert err.value.reason == f"an unexpected error occurred in the server: {err.value.message}"
    with pytest.raises(NotFoundError):
        admin.pending_ack_internal_stats(TOPIC, "gone")
    with pytest.raises(NotFoundError, match="Topic not found"):  # no such topic: the topic lookup's 404 comes first
        admin.pending_ack_stats("persistent://public/default/nowhere", "gone")


@pytest.mark.parametrize("bug", [KeyError("coordinators"), ValueError("bad unpack"), LookupError("x"),
                                 AttributeError("nope")])
def test_a_bug_is_not_dressed_up_as_an_answer(admin, monkeypatch, bug):
    def fails(*args, **kwargs):
        raise bug

    monkeypatch.setattr(stats, "pending_ack_stats", fails)
    with pytest.raises(type(bug)) as err:
        admin.pending_ack_stats(TOPIC, "sub")
    assert not isinstance(err.value, AdminError) and engine_error_status(err.value) is None


def test_a_subclass_row_comes_before_its_base():
    rows = [kind for kind, _ in local._engine_statuses()]
    for i, kind in enumerate(rows):
        for later in rows[i + 1:]:
            assert not issubclass(later, kind) or later is kind, f"{later.__name__} is shadowed by {kind.__name__}"


def test_engine_classes_carry_no_http_status():
    carrying = []
    for info in pkgutil.walk_packages(engine_pkg.__path__, engine_pkg.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, BaseException) and hasattr(cls, "status"):
                carrying.append(f"{module.__name__}.{name}")
    assert not carrying


def test_an_invalid_topic_name_is_412_naming_it(admin):
    with pytest.raises(AdminError) as err:
        admin.pending_ack_stats("tenant/orders", "sub")
    assert err.value.status == 412 and "tenant/orders" in err.value.reason
    with pytest.raises(AdminError) as err:
        admin.topic_internal_stats("a/b")
    assert err.value.status == 412


def test_an_invalid_topic_name_through_the_cli_is_one_failure_line(tmp_path):
    runner = CliRunner()
    d = tmp_path / "e"
    assert runner.invoke(app, ["engine", "init", str(d), "-c", "1"]).exit_code == 0
    result = runner.invoke(app, ["-u", f"local:{d}", "transactions", "pending-ack-stats", "-t", "tenant/orders",
                                 "-s", "sub"])
    assert result.exit_code == 1, result.output
    assert "Invalid short topic name 'tenant/orders'" in result.stderr and "Traceback" not in result.output


def _engine_with_a_garbled_record(tmp_path):
    """A real engine whose metadata holds a record no engine wrote (a half JSON object): opening it meets an error
    none of the engine's own errors describes, the kind a bug or unforeseen damage raises."""
    import sqlite3

    d = tmp_path / "e"
    assert CliRunner().invoke(app, ["engine", "init", str(d), "-c", "1"]).exit_code == 0
    with sqlite3.connect(d / "metadata.db") as db:
        db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES ('engine/opened/tc/0', ?)", (b"{half",))
    db.close()
    return d


def _opening_commands(d):
    """Every way the CLI opens an engine, and the exit code each gives a target it cannot open."""
    return [(["-u", f"local:{d}", "downgrade", "status"], 3), (["-u", f"local:{d}", "transactions", "coordinator-stats"], 1),
            (["engine", "run", str(d), "--duration", "0.1"], 3), (["engine", "txn", "begin", "--dir", str(d)], 3),
            (["serve", "--engine-dir", str(d), "--port", "0"], 3)]


def _copies(template, tmp_path):
    """A fresh copy of the engine for each command: an engine that failed half-way through opening keeps its
    directory locked until it is collected, and the next command in this process would meet that lock instead."""
    import shutil

    for n, (args, code) in enumerate(_opening_commands(template)):
        d = shutil.copytree(template, tmp_path / f"copy{n}")
        yield d, [a.replace(str(template), str(d)) for a in args], code


def test_an_unexpected_error_opening_an_engine_is_one_line_and_keeps_its_traceback_under_debug(tmp_path):
    import json

    template = _engine_with_a_garbled_record(tmp_path)
    runner = CliRunner()
    for d, args, code in _copies(template, tmp_path / "plain"):
        plain = runner.invoke(app, args)
        assert plain.exit_code == code, (args, plain.output)
        said = plain.stderr.strip().splitlines()[0]
        assert str(d) in said and "unexpected JSONDecodeError" in said and "run with --debug for the traceback" in said
        assert isinstance(plain.exception, SystemExit), args
    for how, env in (("--debug", {}), ("TXNADMIN_DEBUG", {"TXNADMIN_DEBUG": "1"})):
        for d, args, _ in _copies(template, tmp_path / how):
            debug = runner.invoke(app, ["--debug", *args] if how == "--debug" else args, env=env)
            # the root group lets the error through: its cause is the original failure, with its traceback
            assert str(d) in str(debug.exception), (args, debug.output)
            assert isinstance(debug.exception.__cause__, json.JSONDecodeError), (args, debug.exception)
            assert debug.exception.__cause__.__traceback__ is not None


def test_the_traceback_reaches_stderr_under_debug_and_never_without_it(tmp_path):
    import os
    import subprocess
    import sys

    d = _engine_with_a_garbled_record(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "TXNADMIN_DEBUG"}
    cli = [sys.executable, "-m", "txnadmin", "-u", f"local:{d}"]
    plain = subprocess.run([*cli, "downgrade", "status"], capture_output=True, text=True, timeout=120, env=env)
    assert plain.returncode == 3 and plain.stdout == ""
    assert plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    assert "unexpected JSONDecodeError" in plain.stderr and "run with --debug" in plain.stderr
    debug = subprocess.run([*cli, "--debug", "downgrade", "status"], capture_output=True, text=True, timeout=120,
                           env=env)
    assert debug.returncode != 0 and debug.stderr.startswith("Traceback"), debug.stderr
    # the whole chain: the decoder's own frame, then the one-line error it became
    assert "json.decoder.JSONDecodeError" in debug.stderr and "direct cause" in debug.stderr
    assert f"TargetUnreachableError: {d}: cannot open the engine" in debug.stderr


def test_an_engine_error_on_opening_stays_one_line_under_debug(tmp_path):
    """--debug is for the unexpected: a damaged metadata.db is the engine's own answer, said the same either way."""
    template = tmp_path / "e"
    runner = CliRunner()
    assert runner.invoke(app, ["engine", "init", str(template), "-c", "1"]).exit_code == 0
    (template / "metadata.db").write_bytes(b"not a database at all" * 100)
    for _, args, code in _copies(template, tmp_path):
        result = runner.invoke(app, ["--debug", *args])
        assert result.exit_code == code, (args, result.output, result.exception)
        assert "damaged" in result.stderr and "--debug" not in result.stderr, (args, result.stderr)
